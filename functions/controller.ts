import { type AdmissionLoop, createRequestGate, startAdmissionLoop } from './admission-loop.ts';
import { type App, type AppContext, type AppModule, createApp } from './app.ts';
import { createGitHubService } from './github/create-service.ts';
import type { Ledger } from './ledger/ledger.ts';
import type { Logger } from './log.ts';
import { createProcessInstruments } from './metrics/instruments.ts';
import { appModules } from './modules.ts';
import { isolateIdentity, type ProcessIdentity } from './process-identity.ts';
import type { ControllerServices } from './services.ts';
import type { Settings } from './settings.ts';
import { createViewsMemo } from './views.ts';
import { createPublicViewCache } from './views-cache.ts';

/** What both entries hand in: an opened (migrated) ledger and the runtime's own parts. */
export interface ControllerOptions {
  ledger: Ledger;
  settings: Settings;
  log: Logger;
  fetch: typeof fetch;
  runtime: 'node' | 'worker';
  modules?: readonly AppModule[];
  /** Safety-net admission timer; null on Workers (no timers in an isolate). */
  admissionIntervalMs: number | null;
  /**
   * This process as its outbox claims name it; the Node entry's can tell a killed controller's
   * claims (functions/process-identity.ts). Default: an isolate's, whose claims only expire.
   */
  identity?: ProcessIdentity;
}

/** The assembled controller; the entries only serve it and drive `tick`. */
export interface Controller {
  app: App;
  ctx: AppContext;
  ledger: Ledger;
  loop: AdmissionLoop;
  /** Periodic work of every module (outbox, sweeps, schedules); errors are logged, never thrown. */
  tick(): Promise<void>;
  /** Syncs host rows from the configuration once; throws while the ledger cannot be reached. */
  syncHosts(): Promise<void>;
}

/**
 * Assembles the controller once for either runtime (the Node and Worker entries are
 * adapters — serve + timers, or fetch + scheduled). Hosts are synced from the configuration
 * here, before the first request or tick, in both runtimes (retried before each tick while the
 * ledger cannot be reached); module hooks join the ledger; the
 * admission loop and the app (with the one operator sub-app under `/api/v1`) are built.
 */
export async function createController(o: ControllerOptions): Promise<Controller> {
  const modules = o.modules ?? appModules;
  const { ledger, log } = o;
  // The ledger may be unreachable while the controller starts (a Worker still answers health
  // with 503 then): a failed sync is retried before every tick until it succeeds.
  let hostsSynced = false;
  const syncHosts = async () => {
    if (hostsSynced) return;
    await ledger.syncHosts();
    hostsSynced = true;
  };
  const trySyncHosts = () =>
    syncHosts().catch((e) =>
      log.warn('host sync failed; retried before the next tick', { error: String(e) }),
    );
  await trySyncHosts();
  const services = createServices(o);
  const base = { ledger, settings: o.settings, log, fetch: o.fetch, runtime: o.runtime, services };
  for (const m of modules) for (const h of m.hooks?.(base) ?? []) ledger.addHook(h);
  const loop = startAdmissionLoop(ledger, {
    intervalMs: o.admissionIntervalMs,
    gate: services.gate,
    onError: (e) => log.error('admission pass failed', { error: String(e) }),
  });
  const ctx: AppContext = { ...base, loop };
  const app = createApp(ctx, modules);

  let ticking = false;
  const tick = async () => {
    // a slow tick (GitHub retries) must not pile up behind itself
    if (ticking) return;
    ticking = true;
    try {
      await trySyncHosts();
      for (const m of modules) {
        try {
          await m.tick?.(ctx);
        } catch (e) {
          log.error('module tick failed', { module: m.name, error: String(e) });
        }
      }
    } finally {
      ticking = false;
    }
  };
  return { app, ctx, ledger, loop, tick, syncHosts };
}

/**
 * Every long-lived service of this controller, built here once and handed to the modules on
 * their context (docs/adr/0215-controller-owns-its-services.md): no module keeps a registry, so
 * two controllers in one process, even on one ledger, share nothing but the ledger.
 */
function createServices(o: ControllerOptions): ControllerServices {
  const { ledger } = o;
  const gate = createRequestGate();
  const views = createViewsMemo(ledger);
  const metrics = createProcessInstruments(ledger);
  const github = createGitHubService({
    ledger,
    settings: o.settings,
    log: o.log,
    fetch: o.fetch,
    gate,
    views,
    observe: (call) => metrics.github.observe(call),
    identity: o.identity ?? isolateIdentity(),
  });
  const publicViews = createPublicViewCache(ledger, ledger.config.server.publicViewCacheMs);
  return { gate, views, publicViews, metrics, github };
}
