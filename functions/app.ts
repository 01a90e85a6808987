import { Hono } from 'hono';
import { HTTPException } from 'hono/http-exception';
import { limitBody, MAX_BODY_BYTES } from './api/body.ts';
import { createOperatorApi, type OperatorApi } from './api/operator.ts';
import type { App, AppContext, AppEnv } from './app-context.ts';
import { requirePublicRead } from './auth/public-read.ts';
import { ApiError } from './errors.ts';
import { isLedgerUnavailable, ledgerUnavailable, type TransitionHook } from './ledger/ledger.ts';

/**
 * A part of the controller (GitHub front door, agent API, operator API, dashboard...). Each
 * mounts its own routes, may add ledger hooks and periodic work. The GitHub module's outbox rows
 * are written by the ledger itself (docs/adr/0220-one-ledger-front-door.md); a hook is for a
 * stand-in that models GitHub from outside, as the test fleet's JIT stand-in does.
 */
export interface AppModule {
  name: string;
  hooks?(ctx: Omit<AppContext, 'loop'>): TransitionHook[];
  routes?(app: App, ctx: AppContext): void;
  /** Routes of the operator API under `/api/v1`: each one audited and token-checked the same way. */
  operatorRoutes?(api: OperatorApi, ctx: AppContext): void;
  /** Periodic work (outbox drain, sweeps); the Node entry runs it on a timer, the Worker on cron. */
  tick?(ctx: AppContext): Promise<void>;
  /**
   * Node only: work woken by ledger changes instead of waiting for a tick (the GitHub outbox,
   * docs/adr/0180-woken-not-polled-handover.md); returns its stop function. A Worker has no
   * background work: it does the same after each request (`waitUntil`) and on cron.
   */
  background?(ctx: AppContext): () => Promise<void>;
}

export type { App, AppContext, AppEnv } from './app-context.ts';
export { MAX_BODY_BYTES };

/**
 * The webhook route bounds its own body (it must refuse a missing or malformed signature header
 * before reading any of it), so the app-wide limit leaves it alone.
 */
const OWN_BODY_LIMIT = new Set(['/github/webhooks']);

/**
 * every body is bounded while it streams. A Content-Length over the limit is
 * refused before reading; a chunked body is stopped by `parseBody` as soon as it passes the
 * limit, so a 200 MiB chunked body costs at most the limit. Nothing is read here: a body is
 * read by its handler, after the route's authentication (docs/adr/0150-anonymous-body-budget.md).
 * Route modules may set a lower limit of their own (agent API, in-job leases API).
 */
const boundedBody = limitBody(
  MAX_BODY_BYTES,
  () => new ApiError(413, 'payload_too_large', `request bodies are limited to ${MAX_BODY_BYTES} bytes`),
);

/** How long one write-probe result answers `/healthz` (anonymous callers must not each cost a write). */
export const WRITE_PROBE_TTL_MS = 5_000;

/**
 * The health check's write probe, shared by concurrent callers and reused for
 * {@link WRITE_PROBE_TTL_MS}, so a flood of anonymous `/healthz` calls costs one small write per
 * few seconds rather than one each.
 */
function createWriteProbe(ctx: Pick<AppContext, 'ledger' | 'log'>) {
  let last: { at: number; result: Promise<boolean> } | null = null;
  return () => {
    const now = Date.now();
    if (last && now - last.at < WRITE_PROBE_TTL_MS) return last.result;
    // the cause goes to the log only: /healthz is public
    const result = ctx.ledger.probeWrite().then(
      () => true,
      (e: unknown) => {
        ctx.log.error('ledger write probe failed', { error: String(e) });
        return false;
      },
    );
    last = { at: now, result };
    return result;
  };
}

export function createApp(ctx: AppContext, modules: readonly AppModule[]): App {
  const app = new Hono<AppEnv>();
  app.use('*', async (c, next) => {
    c.set('ctx', ctx);
    await next();
  });
  app.use('*', (c, next) => (OWN_BODY_LIMIT.has(c.req.path) ? next() : boundedBody(c, next)));

  app.onError((err, c) => {
    if (err instanceof ApiError) {
      for (const [k, v] of Object.entries(err.headers)) c.header(k, v);
      return c.json({ error: { code: err.code, message: err.message } }, err.status);
    }
    if (err instanceof HTTPException) {
      const status = err.status;
      return c.json(
        {
          error: {
            code: status === 413 ? 'payload_too_large' : 'http_error',
            message: err.message || 'request failed',
          },
        },
        status,
      );
    }
    if (isLedgerUnavailable(err)) {
      // disk full, read-only or I/O error: the request changed nothing (its transaction rolled back)
      ctx.log.error('ledger write failed', { path: c.req.path, error: String(err) });
      const e = ledgerUnavailable();
      for (const [k, v] of Object.entries(e.headers)) c.header(k, v);
      return c.json({ error: { code: e.code, message: e.message } }, 503);
    }
    ctx.log.error('unhandled error', { path: c.req.path, error: String((err as Error)?.stack ?? err) });
    return c.json({ error: { code: 'internal', message: 'internal error' } }, 500);
  });
  app.notFound((c) =>
    c.json({ error: { code: 'not_found', message: `no route for ${c.req.method} ${c.req.path}` } }, 404),
  );

  const probe = createWriteProbe(ctx);
  app.get('/healthz', async (c) => {
    try {
      await ctx.ledger.ping();
    } catch (e) {
      ctx.log.warn('ledger unreachable', { error: String(e) });
      return c.json({ error: { code: 'ledger_unreachable', message: 'the ledger cannot be reached' } }, 503);
    }
    if (!(await probe()))
      return c.json(
        {
          error: {
            code: 'ledger_unavailable',
            message:
              'the ledger can be read but not written; an operator should check its disk and permissions',
          },
        },
        503,
      );
    return c.json({ ok: true, ledger: 'reachable', writable: true, runtime: ctx.runtime });
  });

  // anonymous views: from the short public cache, behind a token when
  // `publicViews: "token"`
  const views = () => ctx.services.publicViews.get('views', () => ctx.services.views.get());
  const publicRead = requirePublicRead(ctx);
  app.get('/api/v1/fleet', publicRead, async (c) => c.json((await views()).fleet));
  app.get('/api/v1/queue', publicRead, async (c) => c.json((await views()).queue));

  for (const m of modules) m.routes?.(app, ctx);
  const operator = createOperatorApi(ctx);
  for (const m of modules) m.operatorRoutes?.(operator.api, ctx);
  app.route('/api/v1', operator.app as unknown as App);
  return app;
}
