import { Cron } from 'croner';
import { RUNNER_STATUSES } from '../../core/model.ts';
import type { ReservationRow } from '../ledger/ledger.ts';
import { checkRunKey, renderCheckRun } from './check-run.ts';
import { GitHubError } from './client.ts';
import { readMeta } from './meta.ts';
import { queuedContext } from './senders.ts';
import type { GitHubService } from './service.ts';

/**
 * A JIT runner that has not picked up its job within `timings.runnerPickupTimeoutS` is
 * deregistered and replaced (attempt + 1, with backoff) up to `timings.runnerRetries`; then the
 * reservation is released with outcome `runner_not_picked_up` (docs/architecture.md "Timings": GitHub would
 * otherwise keep the job queued for 24 h).
 */
export async function sweepRunnerPickup(svc: GitHubService, candidates?: ReservationRow[]): Promise<number> {
  const { ledger } = svc;
  const { runnerPickupTimeoutS, runnerRetries } = svc.config.timings;
  const now = ledger.clock();
  candidates ??= await ledger.github.reservations(RUNNER_STATUSES);
  let acted = 0;
  for (const r of candidates) {
    const meta = readMeta(r);
    // a CI task has no runner to pick a job up: `sweepTaskStart` times its start
    if (!meta || meta.jobPickedUpAt || meta.ci === 'task') continue;
    const handoffs = await ledger.github.handoffsOf(r.id);
    // a runner registered at the grant (ADR 0070) can be picked up only once every node is
    // prepared and its config handed over: its wait counts from then, as it did when registration
    // followed the preparation
    const prepared = Math.max(0, ...(await ledger.leasesOf(undefined, r.id)).map((l) => l.preparedAt ?? 0));
    const latest = new Map<string, (typeof handoffs)[number]>();
    for (const h of handoffs) {
      const cur = latest.get(h.leaseId);
      if (!cur || h.attempt > cur.attempt) latest.set(h.leaseId, h);
    }
    for (const h of latest.values()) {
      const since = Math.max(h.createdAt, prepared);
      if (now - since < runnerPickupTimeoutS * 1000) continue;
      const did = await ledger.github.replaceUnpickedRunner({
        reservationId: r.id,
        leaseId: h.leaseId,
        hostId: h.hostId,
        runnerName: h.runnerName,
        attempt: h.attempt,
        since,
        retries: runnerRetries,
        timeoutS: runnerPickupTimeoutS,
      });
      if (did) acted++;
    }
  }
  return acted;
}

/**
 * The task-start timeout (ADR 0120): CI-task work (`ci: "task"`, ADR 0110) with a node whose
 * agent was handed the task but has not reported it started (dstack running it) within
 * `timings.taskStartTimeoutS` is released with outcome `task_not_started`, without a retry. The
 * agents then stop their dstack runs; the hosts are freed only once dstack reports them terminated.
 * Returns how many reservations it ended.
 */
export async function sweepTaskStart(svc: GitHubService, candidates?: ReservationRow[]): Promise<number> {
  const { ledger } = svc;
  const { taskStartTimeoutS } = svc.config.timings;
  const now = ledger.clock();
  let acted = 0;
  for (const r of candidates ?? (await ledger.github.reservations(RUNNER_STATUSES))) {
    if (readMeta(r)?.ci !== 'task') continue;
    // a cheap read first: the write transaction is taken only for work that is late
    if (!(await ledger.github.unstartedTasks(r, now, taskStartTimeoutS)).length) continue;
    if (await ledger.github.endTaskNotStarted(r.id, taskStartTimeoutS, 'github')) acted++;
  }
  return acted;
}

/**
 * Queue positions and wait reasons change without events: refresh the check runs whose rendering
 * moved (status, title or summary, {@link checkRunKey}).
 */
export async function refreshQueuedChecks(svc: GitHubService): Promise<number> {
  const { ledger } = svc;
  const queued = await ledger.github.reservations(['queued'], { withHeadSha: true });
  if (!queued.length) return 0;
  const views = await svc.views.get();
  const checkRows = await ledger.github.checkRunRowsOf(queued.map((r) => r.id));
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
    // the same context the sender renders with (start estimate included), or every queued
    // reservation would look changed on every tick and be re-sent
    const view = renderCheckRun(r, {
      hosts: [],
      ...queuedContext(views, r.id),
      fault: meta.fault ?? null,
      note: meta.note ?? null,
    });
    if (meta.lastCheck === (await checkRunKey(view))) continue;
    await ledger.github.queueCheckSync(r.id);
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
    const mark = await ledger.getMark(undefined, key);
    if (mark == null) {
      // first sight: start counting from now, never backfill
      await ledger.github.startSchedule(key, now);
      continue;
    }
    const last = Number(mark);
    const due = cron.nextRun(new Date(last));
    if (!due || due.getTime() > now) continue;
    if (s.kind === 'background') {
      // the seed's opportunistic queue: background CI is queued only while the fleet would
      // otherwise idle; a due slot stays due (fires once) until nothing else waits
      const others = await ledger.github.countQueuedOtherThan('background');
      if (others > 0) {
        svc.log.info('background CI deferred: other work is queued', { schedule: i, queued: others });
        continue;
      }
    }
    const repo = await ledger.enabledRepository(s.repo);
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
    // once across controller processes, and not while one of its kind still waits
    const id = await ledger.github.fireSchedule(key, mark, {
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
    });
    if (id) fired.push(id);
  }
  return fired;
}

/** Prunes old webhook dedup rows at most once an hour; returns how many were removed. */
export function pruneDeliveries(svc: GitHubService): Promise<number> {
  return svc.ledger.outbox.pruneDeliveries();
}
