import type { SparkConfig } from '../../core/config.ts';
import type { RequestGate } from '../admission-loop.ts';
import type { Ledger } from '../ledger/ledger.ts';
import type { Logger } from '../log.ts';
import type { ProcessIdentity } from '../process-identity.ts';
import type { ViewsMemo } from '../views.ts';
import type { Authorizer } from './authorize.ts';
import type { GitHubClient } from './client.ts';
import type { InboxProcessor, OutboxSender, RedeliveryState } from './service-parts.ts';

/**
 * Everything the GitHub front door needs, built once by `createController()` (`create-service.ts`)
 * and held in its services (docs/adr/0215-controller-owns-its-services.md): two controllers in
 * one process each have their own client, outbox sender, inbox processor and sweep state.
 */
export interface GitHubService {
  ledger: Ledger;
  config: SparkConfig;
  gh: SparkConfig['github'];
  client: GitHubClient;
  authorizer: Authorizer;
  log: Logger;
  webhookSecret: string | undefined;
  publicUrl: string | undefined;
  /** Identifies this process when claiming outbox rows (`identity.workerId`). */
  workerId: string;
  /** This process as its outbox claims name it, and how it tells a gone process's claims. */
  identity: ProcessIdentity;
  /** The controller's request gate: webhook requests enter it, background drains defer to it. */
  gate: RequestGate;
  /** The controller's fleet and queue views (check-run renders, queued-check refresh). */
  views: ViewsMemo;
  /** Sends the outbox's side effects (check runs, dispatches, runner registration). */
  outbox: OutboxSender;
  /** Processes the acknowledged webhook deliveries. */
  inbox: InboxProcessor;
  /** The missed-delivery sweep's memory between ticks (`redeliver.ts`). */
  redelivery: RedeliveryState;
}

/** The GitHub service of a controller's context (a thin accessor: the controller built it). */
export function githubService(ctx: { services: { github: GitHubService } }): GitHubService {
  return ctx.services.github;
}
