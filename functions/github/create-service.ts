import type { RequestGate } from '../admission-loop.ts';
import type { Ledger } from '../ledger/ledger.ts';
import type { Logger } from '../log.ts';
import type { GitHubCallObservation } from '../metrics/github-api.ts';
import type { ProcessIdentity } from '../process-identity.ts';
import type { Settings } from '../settings.ts';
import type { ViewsMemo } from '../views.ts';
import { Authorizer } from './authorize.ts';
import { createGitHubClient } from './client.ts';
import { createInboxProcessor } from './inbox.ts';
import { createOutboxSender } from './outbox.ts';
import { senders } from './senders.ts';
import type { GitHubService } from './service.ts';
import { createRedeliveryState } from './service-parts.ts';

export interface GitHubServiceDeps {
  ledger: Ledger;
  settings: Settings;
  log: Logger;
  fetch: typeof fetch;
  gate: RequestGate;
  views: ViewsMemo;
  /** Reports each GitHub API call to the controller's metrics. */
  observe: (o: GitHubCallObservation) => void;
  /** This process as its outbox claims name it (functions/process-identity.ts). */
  identity: ProcessIdentity;
}

/**
 * Builds the GitHub service with its outbox sender, inbox processor and redelivery state (one
 * of each per service; docs/adr/0215-controller-owns-its-services.md). Nothing is sent or read
 * here: an App that is not configured yields a service whose client says so.
 */
export function createGitHubService(d: GitHubServiceDeps): GitHubService {
  const config = d.ledger.config;
  const client = createGitHubClient({
    apiUrl: config.github.apiUrl,
    appId: d.settings.githubAppId,
    privateKey: d.settings.githubPrivateKey,
    fetch: d.fetch,
    clock: d.ledger.clock,
    observe: d.observe,
  });
  const core = {
    ledger: d.ledger,
    config,
    gh: config.github,
    client,
    authorizer: new Authorizer(client, config.github, d.ledger.clock),
    log: d.log,
    webhookSecret: d.settings.webhookSecret,
    publicUrl: d.settings.publicUrl,
    workerId: d.identity.workerId,
    identity: d.identity,
    gate: d.gate,
    views: d.views,
    redelivery: createRedeliveryState(),
  };
  // the sender and the processor close over the service they belong to; neither touches it
  // while it is built
  const svc = core as GitHubService;
  svc.outbox = createOutboxSender(svc, senders);
  svc.inbox = createInboxProcessor(svc);
  return svc;
}
