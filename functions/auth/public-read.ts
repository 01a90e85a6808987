import type { MiddlewareHandler } from 'hono';
import type { AppContext } from '../app-context.ts';
import { ApiError } from '../errors.ts';
import { authenticateApiToken } from './tokens.ts';

/**
 * with `publicViews: "token"` the anonymous views (`/`, the dashboard fragment
 * and stream, `/api/v1/fleet`, `/api/v1/queue`, `/metrics`) need a valid API token of any scope
 * in `Authorization: Bearer …` (never in the query string, which ends up in logs). With
 * `"open"` (the default) they stay public and sanitized.
 */
export function requirePublicRead(ctx: Pick<AppContext, 'ledger'>): MiddlewareHandler {
  return async (c, next) => {
    if (ctx.ledger.config.publicViews !== 'token') return next();
    const m = /^Bearer\s+(\S+)\s*$/i.exec(c.req.header('authorization') ?? '');
    const p = m ? await authenticateApiToken(ctx.ledger, m[1]!) : null;
    if (!p)
      throw new ApiError(
        401,
        'unauthorized',
        'this controller requires an API token for its views (publicViews: "token"); send Authorization: Bearer <token>',
        { 'WWW-Authenticate': 'Bearer' },
      );
    return next();
  };
}
