import { type Context, Hono } from 'hono';
import type { AppContext } from '../app-context.ts';
import { type AuthEnv, requireScope, type Scope } from '../auth/tokens.ts';
import { createAuditor } from './audit.ts';

/** A handler of the operator API; the caller's principal is `c.get('principal')`, params typed from `P`. */
export type OperatorHandler<P extends string> = (c: Context<AuthEnv, P>) => Response | Promise<Response>;
type Register = <P extends string>(path: P, scope: Scope, handler: OperatorHandler<P>) => void;

/**
 * The operator API under `/api/v1`: every route any module adds here gets the same
 * chain — the audit trail, then the bearer token and scope check — so every call is audited the
 * same way (reads as `api.read`, refusals for lack of scope as `api.denied`, changes by their own
 * events carrying `api:<token name>`). Bodies are read with the one parser, `parseBody`.
 */
export interface OperatorApi {
  get: Register;
  post: Register;
  delete: Register;
}

/** Builds the operator sub-app; the caller mounts `app` at `/api/v1` once every module joined. */
export function createOperatorApi(ctx: Pick<AppContext, 'ledger' | 'log'>): {
  api: OperatorApi;
  app: Hono<AuthEnv>;
} {
  const app = new Hono<AuthEnv>();
  const audit = createAuditor(ctx.ledger, ctx.log);
  const on =
    (method: 'GET' | 'POST' | 'DELETE'): Register =>
    (path, scope, handler) => {
      app.on(method, path, audit, requireScope(scope), handler as OperatorHandler<string>);
    };
  return { api: { get: on('GET'), post: on('POST'), delete: on('DELETE') }, app };
}
