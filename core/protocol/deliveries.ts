import * as z from 'zod';

/**
 * The webhook inbox as operators see it (`GET /api/v1/deliveries`, `POST
 * /api/v1/deliveries/:id/retry`): the controller answers these shapes and sparkctl
 * parses them.
 */

export const DeliveryState = z.enum(['pending', 'done', 'parked']);

export const DeliveryView = z.object({
  id: z.string(),
  event: z.string(),
  action: z.string().nullable(),
  state: DeliveryState,
  receivedAt: z.string(),
  processedAt: z.string().nullable(),
  attempts: z.number().int(),
  nextAttemptAt: z.string().nullable(),
  result: z.string(),
  lastError: z.string().nullable(),
});
export type DeliveryView = z.infer<typeof DeliveryView>;

export const InboxStats = z.object({
  pending: z.number().int(),
  parked: z.number().int(),
  /** Age of the oldest pending delivery in ms (0 when none waits). */
  oldestPendingAgeMs: z.number(),
});
export type InboxStats = z.infer<typeof InboxStats>;

export const DeliveryList = z.object({ inbox: InboxStats, deliveries: z.array(DeliveryView) });
export const DeliveryResponse = z.object({ delivery: DeliveryView });
