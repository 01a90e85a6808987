import { Cron } from 'croner';
import { and, eq, inArray, isNotNull, lt } from 'drizzle-orm';
import * as t from '../ledger/schema.ts';
import { buildViews } from '../views.ts';
import { renderCheckRun } from './check-run.ts';
import { GitHubError } from './client.ts';
import { enabledRepository } from './intake.ts';
import { readMeta } from './meta.ts';
import { enqueue, enqueueCheckSync } from './outbox.ts';
import { enqueueRunnerDeletes } from './senders.ts';
import type { GitHubService } from './service.ts';

/**
 * A JIT runner that has not picked up its job within `timings.runnerPickupTimeoutS` is
 * deregistered and replaced (attempt + 1, with backoff) up to `timings.runnerRetries`; then the
 * reservation is released with outcome `runner_not_picked_up` (DESIGN.md "Timings": GitHub would
 * otherwise keep the job queued for 24 h).
 */
export async function sweepRunnerPickup(svc: GitHubService): Promise<number> {
  const { ledger } = svc;
  const { runnerPickupTimeoutS, runnerRetries } = svc.config.timings;
  const now = ledger.clock();
  const candidates = await ledger.db
    .select()
    .from(t.reservations)
    .where(and(inArray(t.reservations.status, ['preparing', 'running']), isNotNull(t.reservations.repo)));
  let acted = 0;
  for (const r of candidates) {
    const meta = readMeta(r);
    if (!meta || meta.jobPickedUpAt) continue;
    const handoffs = await ledger.db
      .select()
      .from(t.jitHandoffs)
      .where(eq(t.jitHandoffs.reservationId, r.id));
    const latest = new Map<string, (typeof handoffs)[number]>();
    for (const h of handoffs) {
      const cur = latest.get(h.leaseId);
      if (!cur || h.attempt > cur.attempt) latest.set(h.leaseId, h);
    }
    for (const h of latest.values()) {
      if (now - h.createdAt < runnerPickupTimeoutS * 1000) continue;
      const next = h.attempt + 1;
      const did = await ledger.write(async (tx, now, changed) => {
        const cur = await ledger.getReservation(tx, r.id);
        if (!cur || !['preparing', 'running'].includes(cur.status) || readMeta(cur)?.jobPickedUpAt)
          return false;
        const key = `jit:${h.leaseId}:a${next}`;
        const already = await tx
          .select({ id: t.outbox.id })
          .from(t.outbox)
          .where(eq(t.outbox.idempotencyKey, key));
        if (already.length) return false;
        const waited = Math.round((now - h.createdAt) / 1000);
        if (h.attempt >= runnerRetries) {
          await ledger.beginRelease(
            r.id,
            'runner_not_picked_up',
            `runner not picked up: ${runnerRetries + 1} runner(s) waited ${runnerPickupTimeoutS} s each without a job`,
            'github',
            tx,
          );
          changed.add('reservation');
          return true;
        }
        await enqueueRunnerDeletes(tx, now, cur, h.runnerName);
        await enqueue(tx, now, {
          kind: 'generate-jitconfig',
          key,
          reservationId: r.id,
          payload: { reservationId: r.id, leaseId: h.leaseId, attempt: next },
          notBefore: now + Math.min(10 * 60_000, 15_000 * 2 ** h.attempt),
        });
        await tx.update(t.reservations).set({ attempt: next }).where(eq(t.reservations.id, r.id));
        await ledger.record(tx, now, {
          subjectType: 'reservation',
          subjectId: r.id,
          type: 'reservation.runner_retry',
          cause: `runner ${h.runnerName} not picked up after ${waited} s; replacing it (attempt ${next} of ${runnerRetries})`,
          actor: 'github',
          data: { hostId: h.hostId, attempt: next },
        });
        return true;
      });
      if (did) acted++;
    }
  }
  return acted;
}

/** Queue positions change without events: refresh check runs whose rendered state moved. */
export async function refreshQueuedChecks(svc: GitHubService): Promise<number> {
  const { ledger } = svc;
  const queued = await ledger.db
    .select()
    .from(t.reservations)
    .where(
      and(
        eq(t.reservations.status, 'queued'),
        isNotNull(t.reservations.repo),
        isNotNull(t.reservations.headSha),
      ),
    );
  if (!queued.length) return 0;
  const { fleet } = await buildViews(ledger);
  const checkRows = await ledger.db
    .select({ id: t.outbox.id, reservationId: t.outbox.reservationId, status: t.outbox.status })
    .from(t.outbox)
    .where(
      and(
        eq(t.outbox.kind, 'check-run'),
        inArray(
          t.outbox.reservationId,
          queued.map((r) => r.id),
        ),
      ),
    );
  const latest = new Map<string, { id: number; status: string }>();
  for (const row of checkRows) {
    const cur = latest.get(row.reservationId!);
    if (!cur || row.id > cur.id) latest.set(row.reservationId!, row);
  }
  let n = 0;
  for (const r of queued) {
    const meta = readMeta(r);
    if (!meta) continue;
    // a check run GitHub refuses for good is not retried every tick; the next event tries again
    if (latest.get(r.id)?.status === 'failed') continue;
    const kept = fleet.hosts.find(
      (h) => h.keptFor === r.id && (h.state === 'draining' || h.state === 'held'),
    );
    const view = renderCheckRun(r, {
      hosts: [],
      keptHost: kept ? { id: kept.id, state: kept.state as 'draining' | 'held' } : null,
      fault: meta.fault ?? null,
      note: meta.note ?? null,
    });
    if (meta.lastCheck === `${view.status}|${view.title}`) continue;
    await ledger.write((tx, now) => enqueueCheckSync(tx, now, r.id));
    n++;
  }
  return n;
}

/**
 * Scheduled benchmark (50) and background CI (20) from `schedules` (cron, UTC, via croner). A
 * missed slot (controller down) fires once, not once per missed slot; a schedule whose previous
 * request is still queued does not pile up another.
 */
export async function runSchedules(svc: GitHubService): Promise<string[]> {
  const { ledger } = svc;
  const fired: string[] = [];
  for (const [i, s] of svc.config.schedules.entries()) {
    const key = `schedule:${i}:${s.repo}:${s.cron}`;
    let cron: Cron;
    try {
      cron = new Cron(s.cron, { timezone: 'UTC', paused: true });
    } catch (e) {
      svc.log.error('invalid schedule cron expression', { schedule: i, cron: s.cron, error: String(e) });
      continue;
    }
    const now = ledger.clock();
    const row = (await ledger.db.select().from(t.meta).where(eq(t.meta.key, key)))[0];
    if (!row) {
      // first sight: start counting from now, never backfill
      await ledger.write(async (tx) => {
        await tx
          .insert(t.meta)
          .values({ key, value: String(now) })
          .onConflictDoNothing();
      });
      continue;
    }
    const last = Number(row.value);
    const due = cron.nextRun(new Date(last));
    if (!due || due.getTime() > now) continue;
    const repo = await enabledRepository(svc, s.repo);
    if (!repo) continue;
    let sha: string;
    try {
      const res = await svc.client.request<{ sha: string }>(
        'GET',
        `/repos/${repo.fullName}/commits/${encodeURIComponent(repo.defaultBranch)}`,
        {
          installationId: repo.installationId,
        },
      );
      sha = res.data.sha;
    } catch (e) {
      if (e instanceof GitHubError) {
        svc.log.warn('schedule: cannot resolve default branch head', { schedule: i, error: e.message });
        continue;
      }
      throw e;
    }
    const id = await ledger.write(async (tx, now, changed) => {
      const cur = (await tx.select().from(t.meta).where(eq(t.meta.key, key)))[0];
      // another controller process fired this slot already
      if (!cur || cur.value !== row.value) return null;
      await tx
        .update(t.meta)
        .set({ value: String(now) })
        .where(eq(t.meta.key, key));
      const pending = await tx
        .select({ id: t.reservations.id })
        .from(t.reservations)
        .where(
          and(
            eq(t.reservations.repo, repo.fullName),
            eq(t.reservations.kind, s.kind),
            eq(t.reservations.status, 'queued'),
          ),
        );
      if (pending.length) return null;
      const r = await ledger.createReservation(
        {
          kind: s.kind,
          topology: s.topology,
          repo: repo.fullName,
          headSha: sha,
          suite: s.suite,
          requester: `schedule:${s.cron}`,
          meta: {
            installationId: repo.installationId,
            trigger: 'schedule',
            defaultBranch: repo.defaultBranch,
            workflow: repo.workflow ?? svc.gh.workflow,
          },
        },
        'schedule',
        tx,
      );
      changed.add('reservation');
      return r.id;
    });
    if (id) fired.push(id);
  }
  return fired;
}

/** GitHub lets an operator redeliver a webhook for 3 days; dedup rows older than 7 days go. */
export const DELIVERY_RETENTION_MS = 7 * 24 * 3_600_000;
const PRUNE_KEY = 'github:deliveries_pruned_at';

/** Prunes old webhook dedup rows at most once an hour; returns how many were removed. */
export async function pruneDeliveries(svc: GitHubService): Promise<number> {
  const { ledger } = svc;
  const now = ledger.clock();
  const mark = (await ledger.db.select().from(t.meta).where(eq(t.meta.key, PRUNE_KEY)))[0];
  if (mark && now - Number(mark.value) < 3_600_000) return 0;
  return ledger.write(async (tx, now) => {
    const removed = await tx
      .delete(t.webhookDeliveries)
      .where(lt(t.webhookDeliveries.receivedAt, now - DELIVERY_RETENTION_MS))
      .returning({ id: t.webhookDeliveries.deliveryId });
    await tx
      .insert(t.meta)
      .values({ key: PRUNE_KEY, value: String(now) })
      .onConflictDoUpdate({ target: t.meta.key, set: { value: String(now) } });
    return removed.length;
  });
}
