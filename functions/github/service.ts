import type { SparkConfig } from '../../core/config.ts';
import type { AppContext } from '../app.ts';
import type { Ledger } from '../ledger/ledger.ts';
import type { Logger } from '../log.ts';
import { githubApiStats } from '../metrics/github-api.ts';
import { Authorizer } from './authorize.ts';
import { createGitHubClient, type GitHubClient } from './client.ts';

/** Everything the GitHub front door needs, built once per ledger (per process / per isolate). */
export interface GitHubService {
  ledger: Ledger;
  config: SparkConfig;
  gh: SparkConfig['github'];
  client: GitHubClient;
  authorizer: Authorizer;
  log: Logger;
  webhookSecret: string | undefined;
  publicUrl: string | undefined;
  /** Identifies this process when claiming outbox rows. */
  workerId: string;
}

const services = new WeakMap<Ledger, GitHubService>();

/** The service bound to `ctx.ledger`; tests may pre-register one with {@link setGitHubService}. */
export function githubService(ctx: Omit<AppContext, 'loop'>): GitHubService {
  const existing = services.get(ctx.ledger);
  if (existing) return existing;
  const config = ctx.ledger.config;
  const client = createGitHubClient({
    apiUrl: config.github.apiUrl,
    appId: ctx.settings.githubAppId,
    privateKey: ctx.settings.githubPrivateKey,
    fetch: ctx.fetch,
    clock: ctx.ledger.clock,
    observe: (o) => githubApiStats(ctx.ledger).observe(o),
  });
  const svc: GitHubService = {
    ledger: ctx.ledger,
    config,
    gh: config.github,
    client,
    authorizer: new Authorizer(client, config.github, ctx.ledger.clock),
    log: ctx.log,
    webhookSecret: ctx.settings.webhookSecret,
    publicUrl: ctx.settings.publicUrl,
    workerId: `ctl-${[...crypto.getRandomValues(new Uint8Array(5))].map((b) => b.toString(16).padStart(2, '0')).join('')}`,
  };
  services.set(ctx.ledger, svc);
  return svc;
}
