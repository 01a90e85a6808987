import * as z from 'zod';
import type { OperatorApi } from '../api/operator.ts';
import type { AppContext } from '../app.ts';
import { ApiError, notFound } from '../errors.ts';
import type { GitHubService } from './service.ts';

const ListQuery = z
  .object({
    state: z.enum(['pending', 'parked', 'done']).optional(),
    limit: z.coerce.number().int().min(1).max(500).default(100),
  })
  .strict();
const ID = /^[0-9A-Za-z-]{1,100}$/;

function deliveryId(id: string): string {
  if (!ID.test(id)) throw new ApiError(400, 'invalid_request', 'a delivery id is 1-100 of [0-9A-Za-z-]');
  return id;
}

/**
 * The inbox for operators, on the operator sub-app (audited, `operate` scope):
 * `GET /api/v1/deliveries` (open ones first, then the latest processed; `?state=`, `?limit=`),
 * `GET /api/v1/deliveries/:id`, and `POST /api/v1/deliveries/:id/retry` for a parked delivery
 * (recorded as `webhook.retried` with the operator's token name). `sparkctl deliveries` calls these.
 */
export function mountInboxRoutes(api: OperatorApi, ctx: AppContext, svc: () => GitHubService) {
  api.get('/deliveries', 'operate', async (c) => {
    const q = ListQuery.safeParse(c.req.query());
    if (!q.success)
      throw new ApiError(
        400,
        'invalid_request',
        `expected ?state=pending|parked|done&limit=1..500: ${q.error.issues.map((i) => `${i.path.join('.') || 'query'}: ${i.message}`).join('; ')}`,
      );
    const [deliveries, stats] = await Promise.all([ctx.ledger.inbox.list(q.data), ctx.ledger.inbox.stats()]);
    return c.json({ inbox: stats, deliveries });
  });
  api.get('/deliveries/:id', 'operate', async (c) => {
    const id = deliveryId(c.req.param('id'));
    const d = await ctx.ledger.inbox.get(id);
    if (!d) throw notFound(`delivery ${id}`);
    return c.json({ delivery: d });
  });
  api.post('/deliveries/:id/retry', 'operate', async (c) => {
    const id = deliveryId(c.req.param('id'));
    const delivery = await ctx.ledger.inbox.retry(id, `api:${c.get('principal').name}`);
    svc().inbox.kick();
    return c.json({ delivery });
  });
}
