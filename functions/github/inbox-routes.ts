import type { Hono } from 'hono';
import { z } from 'zod';
import { createAuditor } from '../api/audit.ts';
import type { AppContext } from '../app.ts';
import { type AuthEnv, requireScope } from '../auth/tokens.ts';
import { ApiError, notFound } from '../errors.ts';
import { getDelivery, inboxStats, listDeliveries, retryDelivery } from '../ledger/inbox.ts';
import { inboxProcessor } from './inbox.ts';
import type { GitHubService } from './service.ts';

const ListQuery = z
  .object({
    state: z.enum(['pending', 'parked', 'done']).optional(),
    limit: z.coerce.number().int().min(1).max(500).default(100),
  })
  .strict();
const ID = /^[0-9A-Za-z-]{1,100}$/;

/**
 * The inbox for operators (issue 13): `GET /api/v1/deliveries` (open ones first, then the
 * latest processed; `?state=` and `?limit=`), `GET /api/v1/deliveries/:id`, and
 * `POST /api/v1/deliveries/:id/retry` for a parked delivery (audited as `webhook.retried` with
 * the operator's token name). `sparkctl deliveries` calls these.
 */
export function mountInboxRoutes(app: Hono<AuthEnv>, ctx: AppContext, svc: () => GitHubService) {
  const audit = createAuditor(ctx.ledger, ctx.log);
  app.get('/api/v1/deliveries', audit, requireScope('operate'), async (c) => {
    const q = ListQuery.safeParse(c.req.query());
    if (!q.success)
      throw new ApiError(
        400,
        'invalid_request',
        `expected ?state=pending|parked|done&limit=1..500: ${q.error.issues.map((i) => `${i.path.join('.') || 'query'}: ${i.message}`).join('; ')}`,
      );
    const [deliveries, stats] = await Promise.all([
      listDeliveries(ctx.ledger, q.data),
      inboxStats(ctx.ledger),
    ]);
    return c.json({ inbox: stats, deliveries });
  });
  app.get('/api/v1/deliveries/:id', audit, requireScope('operate'), async (c) => {
    const id = c.req.param('id');
    if (!ID.test(id)) throw new ApiError(400, 'invalid_request', 'a delivery id is 1-100 of [0-9A-Za-z-]');
    const d = await getDelivery(ctx.ledger, id);
    if (!d) throw notFound(`delivery ${id}`);
    return c.json({ delivery: d });
  });
  app.post('/api/v1/deliveries/:id/retry', audit, requireScope('operate'), async (c) => {
    const id = c.req.param('id');
    if (!ID.test(id)) throw new ApiError(400, 'invalid_request', 'a delivery id is 1-100 of [0-9A-Za-z-]');
    const delivery = await retryDelivery(ctx.ledger, id, `api:${c.get('principal').name}`);
    inboxProcessor(svc()).kick();
    return c.json({ delivery });
  });
}
