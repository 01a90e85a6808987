import { chmodSync, closeSync, existsSync, mkdirSync, openSync, statSync } from 'node:fs';
import type { Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { hostname } from 'node:os';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Http2Bindings, type HttpBindings, serve } from '@hono/node-server';
import { redactUrl, type SparkConfig } from '../core/config.ts';
import type { AdmissionLoop } from './admission-loop.ts';
import type { App, AppContext, AppModule } from './app.ts';
import { createController } from './controller.ts';
import { openLedgerDb } from './ledger/db.ts';
import { type Clock, Ledger, storageCause } from './ledger/ledger.ts';
import { applyMigrations } from './ledger/migrate.ts';
import { loadMigrations } from './ledger/migrations-fs.ts';
import { createNodeLedgerClient } from './ledger/node-client.ts';
import { createLogger, type Logger } from './log.ts';
import { appModules } from './modules.ts';
import { nodeProcessIdentity } from './process-identity.ts';
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
    const path = url
      .slice('file:'.length)
      .replace(/^\/\/(?=\/)/, '')
      .replace(/\?.*$/, '');
    if (path && !path.startsWith(':memory:')) protectLedgerFiles(resolve(path), opts.log);
  }
  const store = await openLedgerDb({
    url,
    authToken: settings.ledgerAuthToken,
    createClient: createNodeLedgerClient,
  });
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

/**
 * the ledger holds token hashes, JIT configs until hand-over and the whole
 * history, so its files are the controller user's alone — the directory 0700 when we create it,
 * the database created 0600 before libSQL opens it (SQLite gives its `-wal` and `-shm` the
 * database file's mode), and an existing database, `-wal` or `-shm` tightened to 0600.
 */
export function protectLedgerFiles(path: string, log?: Logger): void {
  const dir = dirname(path);
  if (!existsSync(dir)) mkdirSync(dir, { recursive: true, mode: 0o700 });
  if (!existsSync(path)) closeSync(openSync(path, 'a', 0o600));
  for (const f of [path, `${path}-wal`, `${path}-shm`]) {
    if (!existsSync(f) || (statSync(f).mode & 0o777) === 0o600) continue;
    try {
      chmodSync(f, 0o600);
    } catch (e) {
      // not ours to change (another owner, an immutable file): the write probe decides whether
      // the controller can run on it
      log?.warn('cannot make a ledger file 0600', { file: f, error: String(e) });
    }
  }
}

/**
 * Node's HTTP server limits. `maxConnections` refuses sockets beyond the cap
 * (so SSE clients or idle sockets cannot take every file descriptor from `/healthz`, webhooks
 * and agents); headers and whole requests must arrive in bounded time (slowloris); idle
 * keep-alive sockets live 15 s so a 10 s agent heartbeat reuses its connection.
 */
export function applyServerLimits(server: HttpServer, limits: SparkConfig['server']): void {
  server.maxConnections = limits.maxConnections;
  server.headersTimeout = limits.headersTimeoutS * 1000;
  server.requestTimeout = limits.requestTimeoutS * 1000;
  server.keepAliveTimeout = limits.keepAliveTimeoutS * 1000;
}

/**
 * The app's fetch, for Node: an answer given while the request's body is still arriving (a
 * refusal before reading it — a bad signature, a missing token, a Content-Length over the limit,
 * the anonymous-body budget in use — or a route that never reads a body) closes the connection.
 * Keeping it alive would make the server read the unread rest of the body first (Node dumps it,
 * @hono/node-server drains up to 64 MiB), and reading bodies nobody asked for is the cost the
 * refusal avoids (docs/adr/0150-anonymous-body-budget.md).
 */
export function closeUnreadBodies(
  fetch: (req: Request, env: HttpBindings | Http2Bindings) => Response | Promise<Response>,
): (req: Request, env: HttpBindings | Http2Bindings) => Promise<Response> {
  return async (req, env) => {
    const res = await fetch(req, env);
    if (req.method === 'GET' || req.method === 'HEAD' || !env.incoming || env.incoming.complete) return res;
    // the answer may come while Node is still parsing the packet that holds the rest of the body
    // (a handler that never reads it answers from a callback of the parser): let that finish first
    await new Promise((r) => setImmediate(r));
    if (!env.incoming.complete) res.headers.set('connection', 'close');
    return res;
  };
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
  // a ledger that can be read but not written (read-only file, directory or
  // mount, full disk) would accept requests and fail each write; refuse to start instead
  try {
    await ledger.probeWrite();
  } catch (e) {
    ledger.store.close();
    throw new Error(
      `the ledger ${redactUrl(opts.settings.ledgerUrl)} cannot be written (${storageCause(e)}); ` +
        'the controller refuses to start: make the file, its -wal/-shm and its directory writable by this user, free disk space, or mount it read-write',
    );
  }
  const { app, ctx, loop, tick } = await createController({
    ledger,
    settings: opts.settings,
    log,
    fetch: opts.fetch ?? fetch,
    runtime: 'node',
    modules,
    admissionIntervalMs: opts.admissionIntervalMs ?? 2000,
    identity: nodeProcessIdentity(hostname(), process.pid),
  });
  const tickTimer = setInterval(() => void tick(), opts.tickMs ?? 1000);
  tickTimer.unref();
  // work woken by ledger changes (the GitHub outbox), so the tick is only a safety net (ADR 0180)
  const stopBackground = modules.flatMap((m) => (m.background ? [m.background(ctx)] : []));
  void loop.runNow();

  let server: ReturnType<typeof serve> | null = null;
  let port = 0;
  if (!opts.noListen) {
    const { host, port: wanted } = opts.settings.config.listen;
    server = await new Promise<ReturnType<typeof serve>>((res, rej) => {
      const s = serve(
        { fetch: closeUnreadBodies((req, env) => app.fetch(req, env)), hostname: host, port: wanted },
        () => res(s),
      );
      s.once('error', rej);
    });
    applyServerLimits(server as unknown as HttpServer, opts.settings.config.server);
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
      await Promise.all(stopBackground.map((stop) => stop()));
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
