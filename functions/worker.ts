/**
 * Cloudflare Workers entry: the same Hono app as `npm start`, with the ledger on remote libSQL
 * (Turso/sqld) through `@libsql/client/web` (`functions/ledger/worker-client.ts`). Bindings are read once per isolate through
 * `settingsFromEnv` (the boundary); a cron trigger drives admission, the GitHub outbox and the
 * sweeps, because a Worker has no background timers. Migrations are applied by
 * `npm run deploy`, never from a request.
 */
import type { Controller } from './controller.ts';
import { createController } from './controller.ts';
import { settleInbox } from './github/inbox.ts';
import { drainGitHubOutbox } from './github/module.ts';
import { Ledger } from './ledger/ledger.ts';
import { openWorkerLedger } from './ledger/worker-client.ts';
import { createLogger } from './log.ts';
import { appModules } from './modules.ts';
import { settingsFromEnv } from './settings.ts';

/** The subset of the Workers runtime types this entry uses (no @cloudflare/workers-types needed). */
interface ExecutionContext {
  waitUntil(p: Promise<unknown>): void;
  passThroughOnException(): void;
  props: unknown;
}
interface ScheduledController {
  scheduledTime: number;
  cron: string;
}

let instance: Promise<Controller> | null = null;

function stringEnv(env: Record<string, unknown>): Record<string, string | undefined> {
  const out: Record<string, string | undefined> = {};
  for (const [k, v] of Object.entries(env)) if (typeof v === 'string') out[k] = v;
  return out;
}

/** The Worker adapter's one controller per isolate (hosts synced as it is built). */
async function build(env: Record<string, unknown>): Promise<Controller> {
  const vars = stringEnv(env);
  // the Node default (a local file) means nothing here: say the binding is missing instead
  if (!vars.SPARK_LEDGER_URL?.trim()) {
    throw new Error(
      'SPARK_LEDGER_URL is not set: a Worker needs a remote libSQL URL (libsql:// or https://); set it with "wrangler secret put SPARK_LEDGER_URL" (or in .dev.vars for wrangler dev)',
    );
  }
  const settings = settingsFromEnv(vars, null);
  const log = createLogger(settings.logLevel, 'worker');
  if (settings.ledgerUrl.startsWith('file:')) {
    throw new Error(
      `SPARK_LEDGER_URL is '${settings.ledgerUrl}': a Worker needs a remote libSQL URL (libsql:// or https://); set it with "wrangler secret put SPARK_LEDGER_URL"`,
    );
  }
  const store = await openWorkerLedger({ url: settings.ledgerUrl, authToken: settings.ledgerAuthToken });
  // no timer in an isolate: passes run after a response that changed something (waitUntil) and
  // on every cron tick
  return createController({
    ledger: new Ledger(store, { config: settings.config }),
    settings,
    log,
    fetch: globalThis.fetch.bind(globalThis),
    runtime: 'worker',
    modules: appModules,
    admissionIntervalMs: null,
  });
}

function getInstance(env: Record<string, unknown>): Promise<Controller> {
  instance ??= build(env).catch((e) => {
    instance = null;
    throw e;
  });
  return instance;
}

function startupError(e: unknown): Response {
  // configuration problems are the operator's to fix; say what, never echo secrets
  const message = e instanceof Error ? e.message : String(e);
  return new Response(JSON.stringify({ error: { code: 'misconfigured', message } }), {
    status: 500,
    headers: { 'content-type': 'application/json' },
  });
}

export default {
  async fetch(request: Request, env: Record<string, unknown>, exec: ExecutionContext): Promise<Response> {
    let inst: Controller;
    try {
      inst = await getInstance(env);
    } catch (e) {
      return startupError(e);
    }
    const res = await inst.app.fetch(request, env, exec);
    // a request that wrote (webhook, operator call, agent report) may have queued GitHub side
    // effects, directly, through the inbox, or through the admission pass it triggers: process the
    // inbox and send them right after the response instead of at the next one-minute cron
    //
    const writes = request.method !== 'GET' && request.method !== 'HEAD';
    exec.waitUntil(
      inst.loop
        .settle()
        .then(() => settleInbox(inst.ctx))
        .then(() => (writes ? drainGitHubOutbox(inst.ctx) : undefined))
        .catch((e) => inst.ctx.log.error('inbox/outbox drain after request failed', { error: String(e) })),
    );
    return res;
  },

  async scheduled(_controller: ScheduledController, env: Record<string, unknown>, exec: ExecutionContext) {
    const inst = await getInstance(env);
    const work = (async () => {
      // fail closed: without host rows (ledger unreachable) nothing runs half-way
      await inst.syncHosts();
      await inst.loop.runNow();
      await inst.tick();
      await inst.loop.settle();
    })();
    exec.waitUntil(work);
    await work;
  },
};
