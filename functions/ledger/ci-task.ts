import { eq } from 'drizzle-orm';
import { CI_TASK_SCRIPT, cloneUrlForRepo, revokeUrlFor, type SparkConfig } from '../../core/config.ts';
import { type CiMode, isRunnerStatus, type Suite } from '../../core/model.ts';
import type { CiTask } from '../../core/protocol/agent.ts';
import { parseStoredReceipts, type Receipt, type StoredReceipts } from '../../core/protocol/receipt.ts';
import { conflict } from '../errors.ts';
import type { Tx } from './db.ts';
import { currentHandoff } from './queries.ts';
import { beginRelease, getReservation } from './reservations.ts';
import type { HandoffRow, LeaseRow, ReservationRow } from './rows.ts';
import * as t from './schema.ts';
import type { LedgerStore } from './store.ts';

/**
 * CI as a dstack task (ADR 0110): the ledger's side of a reservation whose repository
 * runs `scripts/ci/spark-test.sh` as a task instead of a GitHub job on a JIT runner. The mode is
 * decided once, at the grant, by the GitHub part and kept in the reservation's meta (`ci`), so a
 * config change never turns running work into the other kind.
 */

/** How `r`'s CI runs: `task` when the GitHub part recorded it at the grant, else `runner`. */
export function ciModeOf(r: Pick<ReservationRow, 'metaJson'>): CiMode {
  if (!r.metaJson) return 'runner';
  try {
    return (JSON.parse(r.metaJson) as { ci?: unknown }).ci === 'task' ? 'task' : 'runner';
  } catch {
    return 'runner';
  }
}

/**
 * The seed's lanes and time targets, as the spark-test action sets them
 * (actions/spark-test/src/input-helper.ts `LANE_TARGET_MINUTES`).
 */
const LANES = {
  smoke: { name: 'spark-test', targetMinutes: 30 },
  performance: { name: 'spark-test-long', targetMinutes: 60 },
} as const satisfies Record<Suite, CiTask['lane']>;

/** The workload a task-mode lease hands its agent; null when `r` is no task-mode CI work. */
export function ciTaskOf(
  cfg: Pick<SparkConfig, 'repositories' | 'github'>,
  r: ReservationRow,
): CiTask | null {
  if (ciModeOf(r) !== 'task' || !r.repo || !r.headSha) return null;
  const suite: Suite = r.suite === 'performance' ? 'performance' : 'smoke';
  const assertion = Object.hasOwn(cfg.repositories, r.repo)
    ? cfg.repositories[r.repo]?.distributedAssertion
    : undefined;
  return {
    ...(assertion ? { distributedAssertion: assertion } : {}),
    repo: r.repo,
    headSha: r.headSha,
    suite,
    script: CI_TASK_SCRIPT,
    cloneUrl: cloneUrlForRepo(cfg, r.repo),
    revokeUrl: revokeUrlFor(cfg),
    lane: { ...LANES[suite] },
  };
}

/**
 * Stores the task's clone token as the lease's one-time hand-over (the `jit_handoffs` row a JIT
 * config uses: erased in the transaction that hands it over, withheld on release, never rendered).
 * `runnerId` stays null: no runner exists on GitHub for a task.
 */
export async function recordTaskCredential(
  s: LedgerStore,
  tx: Tx,
  now: number,
  h: {
    taskName: string;
    leaseId: string;
    reservationId: string;
    hostId: string;
    cloneToken: string;
    repo: string;
    expiresAt: string | null;
  },
): Promise<void> {
  await tx
    .insert(t.jitHandoffs)
    .values({
      runnerName: h.taskName,
      leaseId: h.leaseId,
      reservationId: h.reservationId,
      hostId: h.hostId,
      attempt: 0,
      runnerId: null,
      jitConfig: h.cloneToken,
      createdAt: now,
    })
    .onConflictDoNothing({ target: t.jitHandoffs.runnerName });
  await s.record(tx, now, {
    subjectType: 'reservation',
    subjectId: h.reservationId,
    type: 'reservation.runner_registered',
    cause: `CI task ${h.taskName} for ${h.hostId}: read-only clone token for ${h.repo} minted (contents: read${h.expiresAt ? `, expires ${h.expiresAt}` : ''})`,
    actor: 'github',
    data: { runnerName: h.taskName, hostId: h.hostId, attempt: 0, mode: 'task' },
  });
}

/** Whether a hand-over row is a task's clone token rather than a JIT runner's config. */
export const isTaskHandoff = (h: Pick<HandoffRow, 'runnerId'>): boolean => h.runnerId == null;

/**
 * Records the receipt a task's agent built (with its `runner_exited` report): the same checks and
 * the same storage as a receipt a runner's job posts (functions/leases-api), so the check run and
 * the evidence read it the same way. A mismatch is refused (409) and nothing is written.
 */
export async function recordTaskReceipt(
  s: LedgerStore,
  tx: Tx,
  now: number,
  a: { r: ReservationRow; lease: LeaseRow; leases: LeaseRow[]; receipt: Receipt; actor: string },
): Promise<void> {
  const { r, lease, receipt } = a;
  const mismatches = [
    receipt.reservationId !== r.id ? `reservation ${receipt.reservationId} ≠ ${r.id}` : null,
    receipt.hostId !== lease.hostId ? `host ${receipt.hostId} ≠ ${lease.hostId}` : null,
    receipt.fencingToken !== lease.fencingToken
      ? `fencing token ${receipt.fencingToken} ≠ the lease's ${lease.fencingToken}`
      : null,
    r.headSha && r.headSha !== receipt.headSha ? `headSha ${receipt.headSha} ≠ admitted ${r.headSha}` : null,
    r.topology !== receipt.topology ? `topology ${receipt.topology} ≠ admitted ${r.topology}` : null,
    r.suite && r.suite !== receipt.suite ? `suite ${receipt.suite} ≠ admitted ${r.suite}` : null,
  ].filter((m): m is string => m != null);
  if (mismatches.length)
    throw conflict(
      'receipt_mismatch',
      `receipt does not match reservation ${r.id}: ${mismatches.join('; ')}`,
    );
  const stored: StoredReceipts = parseStoredReceipts(r.receiptJson) ?? { byHost: {} };
  if (stored.byHost[receipt.hostId]) return;
  stored.byHost[receipt.hostId] = receipt;
  const json = JSON.stringify(stored);
  await tx
    .update(t.reservations)
    .set({ receiptJson: json, updatedAt: now })
    .where(eq(t.reservations.id, r.id));
  r.receiptJson = json;
  const all = Object.values(stored.byHost);
  await s.record(tx, now, {
    subjectType: 'reservation',
    subjectId: r.id,
    type: 'reservation.receipt',
    cause: `evidence receipt from ${receipt.hostId}: ${receipt.result} (${receipt.suite}, ${receipt.topology}, dstack task)`,
    actor: a.actor,
    // no log lines, no tokens: the history is rendered in public views
    data: {
      result: receipt.result,
      headSha: receipt.headSha,
      hostId: receipt.hostId,
      suite: receipt.suite,
      topology: receipt.topology,
      mode: 'task',
      hostsReported: all.length,
      hostsExpected: a.leases.length,
    },
  });
}

/** A lease of task-mode work whose task was handed over but never reported started. */
export interface UnstartedTask {
  hostId: string;
  /** When its clone token (and with it the workload) was handed to the agent. */
  handedOverAt: number;
}

/**
 * The leases of `r` whose CI task was handed to its agent at least `timeoutS` ago (the hand-over
 * of its clone token, `consumedAt`: the agent then submits the task) and that have reported
 * neither its start (the agent reports it once dstack runs it) nor its end. Each node counts from
 * its own hand-over; a node not handed over yet asked nothing of dstack and is not counted. Empty
 * when `r` is no task-mode work in a runner status. Read-only.
 */
export async function unstartedTasks(
  q: Tx | LedgerStore['db'],
  r: ReservationRow,
  now: number,
  timeoutS: number,
): Promise<UnstartedTask[]> {
  if (ciModeOf(r) !== 'task' || !isRunnerStatus(r.status)) return [];
  const leases = await q.select().from(t.leases).where(eq(t.leases.reservationId, r.id));
  const late: UnstartedTask[] = [];
  for (const l of leases) {
    if (l.status !== 'active' || l.runnerStartedAt != null || l.runnerExitedAt != null) continue;
    const h = await currentHandoff(q, l.id);
    if (h?.consumedAt == null) continue;
    if (now - h.consumedAt >= timeoutS * 1000) late.push({ hostId: l.hostId, handedOverAt: h.consumedAt });
  }
  return late;
}

/**
 * The task-start timeout (ADR 0120): CI-task work with a node whose task dstack has not started
 * within `timeoutS` of its hand-over is released with outcome `task_not_started`, at once and
 * without a retry (a new task would wait on the same host's fleet). The release is the ordinary
 * one: the agents stop their dstack runs and report `cleaned` only once dstack says terminated, so
 * no host is freed here. Re-checked inside the write transaction (a start reported meanwhile wins).
 * Returns whether the release began.
 */
export function endTaskNotStarted(
  s: LedgerStore,
  reservationId: string,
  timeoutS: number,
  actor: string,
): Promise<boolean> {
  return s.write(async (tx, now, changed) => {
    const r = await getReservation(s, tx, reservationId);
    if (!r) return false;
    const late = await unstartedTasks(tx, r, now, timeoutS);
    if (!late.length) return false;
    const hosts = late.map((l) => l.hostId).join(' + ');
    const cause = `dstack did not start the CI task on ${hosts} within ${timeoutS} s of its hand-over (not retried)`;
    await beginRelease(s, r.id, 'task_not_started', cause, actor, tx, { showCause: true });
    changed.add('reservation');
    return true;
  });
}
