import { Hono } from 'hono';
import { HTTPException } from 'hono/http-exception';
import type { AdmissionLoop } from './admission-loop.ts';
import { createOperatorApi, type OperatorApi } from './api/operator.ts';
import { ApiError } from './errors.ts';
import type { Ledger, TransitionHook } from './ledger/ledger.ts';
import type { Logger } from './log.ts';
import type { Settings } from './settings.ts';
import { buildViews } from './views.ts';

/** Everything a route module may use; built once per process by the entry (Node or Worker). */
export interface AppContext {
  ledger: Ledger;
  settings: Settings;
  loop: AdmissionLoop;
  log: Logger;
  /** Outbound HTTP (GitHub); injectable so tests hand in a fetch bound to a local fake. */
  fetch: typeof fetch;
  /** 'node' supports long-poll and background timers; 'worker' answers at once. */
  runtime: 'node' | 'worker';
}

export type AppEnv = { Variables: { ctx: AppContext } };
export type App = Hono<AppEnv>;

/**
 * A part of the controller (GitHub front door, agent API, operator API, dashboard...). Each
 * mounts its own routes, may add ledger hooks (outbox side effects) and periodic work.
 */
export interface AppModule {
  name: string;
  hooks?(ctx: Omit<AppContext, 'loop'>): TransitionHook[];
  routes?(app: App, ctx: AppContext): void;
  /** Routes of the operator API under `/api/v1`: each one audited and token-checked the same way. */
  operatorRoutes?(api: OperatorApi, ctx: AppContext): void;
  /** Periodic work (outbox drain, sweeps); the Node entry runs it on a timer, the Worker on cron. */
  tick?(ctx: AppContext): Promise<void>;
}

/** Body size guard shared by routes (413 before parsing). */
export const MAX_BODY_BYTES = 1024 * 1024;

export function createApp(ctx: AppContext, modules: readonly AppModule[]): App {
  const app = new Hono<AppEnv>();
  app.use('*', async (c, next) => {
    c.set('ctx', ctx);
    await next();
  });

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
    ctx.log.error('unhandled error', { path: c.req.path, error: String((err as Error)?.stack ?? err) });
    return c.json({ error: { code: 'internal', message: 'internal error' } }, 500);
  });
  app.notFound((c) =>
    c.json({ error: { code: 'not_found', message: `no route for ${c.req.method} ${c.req.path}` } }, 404),
  );

  app.get('/healthz', async (c) => {
    try {
      await ctx.ledger.ping();
      return c.json({ ok: true, ledger: 'reachable', runtime: ctx.runtime });
    } catch (e) {
      ctx.log.warn('ledger unreachable', { error: String(e) });
      return c.json({ error: { code: 'ledger_unreachable', message: 'the ledger cannot be reached' } }, 503);
    }
  });

  app.get('/api/v1/fleet', async (c) => c.json((await buildViews(ctx.ledger)).fleet));
  app.get('/api/v1/queue', async (c) => c.json((await buildViews(ctx.ledger)).queue));

  for (const m of modules) m.routes?.(app, ctx);
  const operator = createOperatorApi(ctx);
  for (const m of modules) m.operatorRoutes?.(operator.api, ctx);
  app.route('/api/v1', operator.app as unknown as App);
  return app;
}
