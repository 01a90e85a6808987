import { mkdirSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { serve } from '@hono/node-server';
import { createClient } from '@libsql/client';
import type { AdmissionLoop } from './admission-loop.ts';
import type { App, AppContext, AppModule } from './app.ts';
import { createController } from './controller.ts';
import { openLedgerDb } from './ledger/db.ts';
import { type Clock, Ledger } from './ledger/ledger.ts';
import { applyMigrations } from './ledger/migrate.ts';
import { loadMigrations } from './ledger/migrations-fs.ts';
import { createLogger, type Logger } from './log.ts';
import { appModules } from './modules.ts';
import type { Settings } from './settings.ts';

export interface RunningController {
  url: string;
  port: number;
  app: App;
  ctx: AppContext;
  ledger: Ledger;
  loop: AdmissionLoop;
  close(): Promise<void>;
}

export interface StartOptions {
  settings: Settings;
  modules?: readonly AppModule[];
  log?: Logger;
  clock?: Clock;
  fetch?: typeof fetch;
  /** Module tick period (outbox, sweeps). */
  tickMs?: number;
  admissionIntervalMs?: number;
  /** Do not listen on a port (tests using app.request()). */
  noListen?: boolean;
}

/**
 * Opens (and migrates) a ledger for Node: embedded file or remote libSQL through one code path.
 * Tools (agent-token, admin) get host rows synced here; the controller leaves that to
 * {@link createController}, which syncs at the same moment on Node and Workers.
 */
export async function openNodeLedger(
  settings: Settings,
  opts: { clock?: Clock; log?: Logger; syncHosts?: boolean } = {},
) {
  const url = settings.ledgerUrl;
  if (url.startsWith('file:')) {
    const path = url.slice('file:'.length).replace(/^\/\/(?=\/)/, '');
    if (path && !path.startsWith(':memory:')) mkdirSync(dirname(resolve(path)), { recursive: true });
  }
  const store = await openLedgerDb({ url, authToken: settings.ledgerAuthToken, createClient });
  let applied: string[];
  try {
    applied = await applyMigrations(store, loadMigrations());
  } catch (e) {
    store.close();
    throw e;
  }
  if (applied.length) opts.log?.info('ledger migrated', { applied });
  const ledger = new Ledger(store, { config: settings.config, ...(opts.clock ? { clock: opts.clock } : {}) });
  if (opts.syncHosts !== false) await ledger.syncHosts();
  return ledger;
}

/** The Node adapter: opens the ledger, builds the controller, serves it and runs its timers. */
export async function startController(opts: StartOptions): Promise<RunningController> {
  const log = opts.log ?? createLogger(opts.settings.logLevel);
  const modules = opts.modules ?? appModules;
  const ledger = await openNodeLedger(opts.settings, {
    log,
    syncHosts: false,
    ...(opts.clock ? { clock: opts.clock } : {}),
  });
  const { app, ctx, loop, tick } = await createController({
    ledger,
    settings: opts.settings,
    log,
    fetch: opts.fetch ?? fetch,
    runtime: 'node',
    modules,
    admissionIntervalMs: opts.admissionIntervalMs ?? 2000,
  });
  const tickTimer = setInterval(() => void tick(), opts.tickMs ?? 1000);
  tickTimer.unref();
  void loop.runNow();

  let server: ReturnType<typeof serve> | null = null;
  let port = 0;
  if (!opts.noListen) {
    const { host, port: wanted } = opts.settings.config.listen;
    server = await new Promise<ReturnType<typeof serve>>((res, rej) => {
      const s = serve({ fetch: app.fetch, hostname: host, port: wanted }, () => res(s));
      s.once('error', rej);
    });
    port = (server.address() as AddressInfo).port;
  }
  const url = `http://${opts.settings.config.listen.host}:${port}`;
  return {
    url,
    port,
    app,
    ctx,
    ledger,
    loop,
    async close() {
      clearInterval(tickTimer);
      await loop.stop();
      if (server) {
        const s = server;
        (s as unknown as { closeAllConnections?: () => void }).closeAllConnections?.();
        await new Promise<void>((r) => s.close(() => r()));
      }
      ledger.store.close();
    },
  };
}

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..');
