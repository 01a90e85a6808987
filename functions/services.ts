import type { RequestGate } from './admission-loop.ts';
import type { GitHubService } from './github/service.ts';
import type { ProcessInstruments } from './metrics/instruments.ts';
import type { ViewsMemo } from './views.ts';
import type { PublicViewCache } from './views-cache.ts';

/**
 * Every long-lived service of one controller, built once by `createController()` and handed to
 * the modules on their context (docs/adr/0215-controller-owns-its-services.md). Nothing of this
 * lives in a module-level registry, so two controllers in one process share none of it.
 */
export interface ControllerServices {
  /** Requests in flight; background work (inbox drains, kicked passes, ticks) defers to them. */
  gate: RequestGate;
  /** The fleet and queue views, computed once per ledger version. */
  views: ViewsMemo;
  /** The short cache of the anonymous pages and `/api/v1/fleet|queue`. */
  publicViews: PublicViewCache;
  /** This controller's own measurements (`/metrics?scope=process`). */
  metrics: ProcessInstruments;
  /** The GitHub front door: client, authorizer, outbox sender, inbox processor, sweep state. */
  github: GitHubService;
}
