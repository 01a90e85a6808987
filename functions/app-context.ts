import type { Hono } from 'hono';
import type { AdmissionLoop } from './admission-loop.ts';
import type { Ledger } from './ledger/ledger.ts';
import type { Logger } from './log.ts';
import type { ControllerServices } from './services.ts';
import type { Settings } from './settings.ts';

/**
 * What the app hands every route and middleware, in a module of its own: the route modules, the
 * body limit and the authentication middleware read it, and the app (`app.ts`) mounts them, so
 * they must not import the app for it.
 */

/** Everything a route module may use; built once per controller by `createController()`. */
export interface AppContext {
  ledger: Ledger;
  settings: Settings;
  loop: AdmissionLoop;
  log: Logger;
  /** Outbound HTTP (GitHub); injectable so tests hand in a fetch bound to a local fake. */
  fetch: typeof fetch;
  /** 'node' supports long-poll and background timers; 'worker' answers at once. */
  runtime: 'node' | 'worker';
  /** The controller's services (`services.ts`), built once by `createController()`. */
  services: ControllerServices;
}

export type AppEnv = { Variables: { ctx: AppContext } };
export type App = Hono<AppEnv>;
