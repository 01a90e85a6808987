import { RUNNER_STATUSES } from '../../core/model.ts';
import type { AppContext, AppModule } from '../app.ts';
import { mountInboxRoutes } from './inbox-routes.ts';
import { sweepMissedDeliveries } from './redeliver.ts';
import { mountRepositoryRoutes } from './repositories.ts';
import { githubService } from './service.ts';
import {
  pruneDeliveries,
  refreshQueuedChecks,
  runSchedules,
  sweepRunnerPickup,
  sweepTaskStart,
} from './sweeps.ts';
import { mountWebhook } from './webhook.ts';

/**
 * Sends the GitHub outbox's due rows now (joining a drain already running). The Worker calls it
 * after each request that may have queued side effects, so a check run or dispatch does not wait
 * for the one-minute cron; a cheap read answers first when nothing is due. On
 * Node the sender also wakes by itself ({@link githubModule} `background`).
 */
export async function drainGitHubOutbox(ctx: AppContext): Promise<void> {
  const svc = githubService(ctx);
  if (svc.client.configured) await svc.outbox.drain();
}

/**
 * The GitHub front door: signed webhooks → reservations, authorization, check runs,
 * dispatch, JIT runner configs and runner deletion through the outbox, schedules, and the
 * operator routes that enable repositories.
 */
export const githubModule: AppModule = {
  name: 'github',
  // mounting the GitHub part turns on the ledger's GitHub effects: each recorded event queues its
  // outbox rows in its own transaction, decided by the ledger (docs/adr/0220-one-ledger-front-door.md);
  // this part adds no hook of its own
  hooks(ctx) {
    ctx.ledger.recordGitHubEffectsFromNowOn();
    return [];
  },
  routes(app, ctx) {
    mountWebhook(app, () => githubService(ctx));
  },
  operatorRoutes(api, ctx) {
    mountRepositoryRoutes(api, () => githubService(ctx));
    mountInboxRoutes(api, ctx, () => githubService(ctx));
  },
  // the commit that fills the outbox wakes its sender, and a retry's due time arms a timer: a
  // grant's dispatch and JIT registration never wait for the tick (ADR 0180), which stays the
  // safety net for rows another process queued
  background(ctx: AppContext) {
    return githubService(ctx).outbox.start();
  },
  async tick(ctx: AppContext) {
    const svc = githubService(ctx);
    // timers yield to webhook requests in flight: acknowledging comes first
    if (ctx.runtime === 'node') await svc.gate.whenQuiet();
    // deliveries first: they were acknowledged already and may wait for a retry that is due
    await svc.inbox.drain();
    // webhooks GitHub failed to deliver while no controller answered (ADR 0091): at start, then
    // every 10 min; a GitHub failure here must not hold back the rest of the tick
    await sweepMissedDeliveries(svc, { startSweep: ctx.runtime === 'node' }).catch((e: unknown) =>
      svc.log.warn('webhook redelivery sweep failed', { error: String(e) }),
    );
    await runSchedules(svc);
    // one read for both sweeps: runner work and task work are disjoint, and each sweep re-reads
    // what it acts on inside its write transaction
    const running = await svc.ledger.github.reservations(RUNNER_STATUSES);
    await sweepRunnerPickup(svc, running);
    await sweepTaskStart(svc, running);
    await refreshQueuedChecks(svc);
    await pruneDeliveries(svc);
    await drainGitHubOutbox(ctx);
  },
};
