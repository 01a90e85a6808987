import { and, eq } from 'drizzle-orm';
import { executorForRepo } from '../../core/config.ts';
import type { LedgerEventType } from '../../core/events.ts';
import { contradictionsOf, judgeHost } from '../../core/evidence.ts';
import {
  type HostFacts,
  isJobOutcome,
  isReleasableStatus,
  type JobOutcome,
  type Outcome,
} from '../../core/model.ts';
import type { Report } from '../../core/protocol/agent.ts';
import { isPassingResult } from '../../core/protocol/host-evidence.ts';
import { parseStoredReceipts } from '../../core/protocol/receipt.ts';
import { conflict } from '../errors.ts';
import { ciModeOf, recordTaskReceipt } from './ci-task.ts';
import type { Tx } from './db.ts';
import { recordHostEvidence } from './host-evidence.ts';
import { applyRestoredReport, getHost, quarantineAfterFailedCleanup, recordServiceDown } from './hosts.ts';
import { confirmReleased, leasesOf, requireCurrentLease } from './leases.ts';
import { currentHandoff } from './queries.ts';
import { advanceReservation, beginRelease, getReservation } from './reservations.ts';
import type { LeaseRow, ReservationRow } from './rows.ts';
import * as t from './schema.ts';
import type { LedgerStore } from './store.ts';

/** The GitHub job's result, when `workflow_job` completed already set it. */
function jobOutcome(r: ReservationRow): JobOutcome | null {
  return isJobOutcome(r.outcome) ? r.outcome : null;
}

type LeaseEvent = (type: LedgerEventType, cause: string, data?: Record<string, unknown>) => Promise<void>;

function mergeEvidence(lease: LeaseRow, key: string, value: unknown): string {
  let prev: Record<string, unknown> = {};
  try {
    prev = lease.evidenceJson ? (JSON.parse(lease.evidenceJson) as Record<string, unknown>) : {};
  } catch {
    prev = {};
  }
  return JSON.stringify({ ...prev, [key]: value });
}

/**
 * The agent-report command: applies one agent report in one write transaction (cross-part contract, steps 2–6). The
 * fencing token is checked first; a stale one throws 409 `stale_fencing_token` before anything
 * is written. Returns what changed, in words.
 */
export async function applyReport(ledger: LedgerStore, hostId: string, report: Report): Promise<string> {
  const actor = `agent:${hostId}`;
  if (report.type === 'restored') return applyRestored(ledger, hostId, report, actor);
  if (report.type === 'service_down') return recordServiceDown(ledger, hostId, report, actor);
  return ledger.write(async (tx, now, changed) => {
    const lease = await requireCurrentLease(ledger, tx, hostId, report.fencingToken);
    const r = (await getReservation(ledger, tx, lease.reservationId))!;
    const leases = await leasesOf(ledger, tx, r.id);
    // every node of the reservation may have to act on this (pairs move as a unit)
    for (const l of leases) changed.add(`host:${l.hostId}`);
    changed.add('reservation');
    const event: LeaseEvent = async (type, cause, data) =>
      ledger.record(tx, now, {
        subjectType: 'lease',
        subjectId: lease.id,
        type,
        cause,
        actor,
        data: { reservationId: r.id, hostId, ...data },
      });

    switch (report.type) {
      case 'prepared': {
        if (lease.preparedAt != null) return `${lease.id} already prepared`;
        if (lease.status !== 'active' || r.status !== 'allocated') {
          throw conflict('not_preparing', `reservation ${r.id} is ${r.status}; nothing to prepare`);
        }
        if (lease.lend && !report.serviceLent) {
          // no grant while the home service holds the GPU (docs/architecture.md rule 5)
          throw conflict(
            'service_not_lent',
            `${lease.id} lends ${hostId}'s home service: report prepared only after it is drained, stopped and its GPU processes are gone`,
          );
        }
        await tx
          .update(t.leases)
          .set({
            preparedAt: now,
            evidenceJson: mergeEvidence(lease, 'prepare', {
              serviceLent: report.serviceLent,
              ...report.evidence,
            }),
          })
          .where(eq(t.leases.id, lease.id));
        await event(
          'lease.prepared',
          report.serviceLent
            ? 'home service lent (GPU verified free); work dir fresh'
            : 'GPU verified free; work dir fresh',
          { serviceLent: report.serviceLent },
        );
        const waiting = leases.filter((l) => l.id !== lease.id && l.preparedAt == null);
        if (waiting.length)
          return `${lease.id} prepared; waiting for ${waiting.map((l) => l.hostId).join(', ')}`;
        await advanceReservation(ledger, r.id, 'preparing', 'every host prepared', actor, tx);
        return `reservation ${r.id} preparing`;
      }
      case 'prepare_failed': {
        await tx
          .update(t.leases)
          .set({
            evidenceJson: mergeEvidence(lease, 'prepare', { failed: report.reason, ...report.evidence }),
          })
          .where(eq(t.leases.id, lease.id));
        await event(
          'lease.prepare_failed',
          `preparation failed on ${hostId}: ${report.reason}`.slice(0, 500),
        );
        if (isReleasableStatus(r.status)) {
          // the host refused before anything of the PR ran: not a test result (ADR 0177)
          await beginRelease(
            ledger,
            r.id,
            'preflight_failed',
            `preparation failed on ${hostId}: ${report.reason}`.slice(0, 500),
            actor,
            tx,
            { showCause: true },
          );
          return `reservation ${r.id} releasing (preflight_failed)`;
        }
        return `reservation ${r.id} already ${r.status}`;
      }
      case 'runner_started': {
        const h = await currentHandoff(tx, lease.id);
        if (!h || h.runnerName !== report.runnerName) {
          throw conflict(
            'unknown_runner',
            `runner ${report.runnerName} is not the current runner of ${lease.id}`,
          );
        }
        if (lease.runnerStartedAt == null) {
          await tx.update(t.leases).set({ runnerStartedAt: now }).where(eq(t.leases.id, lease.id));
        }
        if (report.executor) {
          // the backend that runs the work, named on the check run
          await tx
            .update(t.leases)
            .set({ evidenceJson: mergeEvidence(lease, 'executor', report.executor) })
            .where(eq(t.leases.id, lease.id));
        }
        await event('lease.runner_started', `runner ${report.runnerName} started`, {
          runnerName: report.runnerName,
        });
        if (r.status === 'preparing') {
          await advanceReservation(ledger, r.id, 'running', `runner started on ${hostId}`, actor, tx);
          return `reservation ${r.id} running`;
        }
        return `reservation ${r.id} ${r.status}`;
      }
      case 'runner_exited':
        return runnerExited(ledger, tx, now, { lease, r, leases, hostId, actor, report, event });
      case 'lease_active': {
        if (r.kind !== 'development') {
          throw conflict('not_development', `reservation ${r.id} is ${r.kind}, not a development lease`);
        }
        if (report.attach) {
          // the dev environment's attach command (executor dstack), shown to the requester
          await tx
            .update(t.leases)
            .set({ evidenceJson: mergeEvidence(lease, 'develop', { attach: report.attach }) })
            .where(eq(t.leases.id, lease.id));
        }
        if (r.status === 'preparing') {
          const cause = `development lease active on ${hostId}`;
          await advanceReservation(ledger, r.id, 'running', cause, actor, tx);
          return `reservation ${r.id} running`;
        }
        return `reservation ${r.id} ${r.status}`;
      }
      case 'cleaned': {
        const host = (await getHost(ledger, tx, hostId))!;
        const expired = lease.status === 'expired' || lease.expiresAt <= now;
        if (lease.status !== 'releasing' && host.phase !== 'release-required' && !expired) {
          throw conflict(
            'not_releasing',
            `${lease.id} is not being released; cleanup is reported after release`,
          );
        }
        if (lease.status !== 'releasing' && isReleasableStatus(r.status)) {
          await beginRelease(
            ledger,
            r.id,
            jobOutcome(r) ?? 'released',
            'host cleaned after the lease ended',
            actor,
            tx,
          );
        }
        if (report.facts) {
          // the report that frees the host says what its GPU shows now, in the
          // same transaction, so the next pass does not refuse the host over the GPU processes
          // of the job that just ended (the last heartbeat's) and wait up to a heartbeat for it
          await tx
            .update(t.hosts)
            .set({
              factsJson: JSON.stringify({ ...report.facts, gpuError: report.facts.gpuError ?? null }),
              updatedAt: now,
            })
            .where(eq(t.hosts.id, hostId));
        }
        const res = await confirmReleased(ledger, hostId, report.fencingToken, actor, {}, tx);
        return `${lease.id} released; reservation ${r.id} ${res.reservation.status}`;
      }
      case 'cleanup_failed': {
        const expired = lease.status === 'expired' || lease.expiresAt <= now;
        if (lease.status !== 'releasing' && !expired) {
          throw conflict('not_releasing', `${lease.id} is still current; cleanup follows its release`);
        }
        await tx
          .update(t.leases)
          .set({ evidenceJson: mergeEvidence(lease, 'cleanupFailed', report.reason) })
          .where(eq(t.leases.id, lease.id));
        return quarantineAfterFailedCleanup(ledger, tx, {
          hostId,
          fencingToken: report.fencingToken,
          reason: report.reason,
          actor,
        });
      }
      case 'processes_remain': {
        const expired = lease.status === 'expired' || lease.expiresAt <= now;
        if (lease.status !== 'releasing' && !expired) {
          throw conflict(
            'not_releasing',
            `${lease.id} is still current; processes are expected while it lasts`,
          );
        }
        await tx
          .update(t.leases)
          .set({ evidenceJson: mergeEvidence(lease, 'processesRemain', report.processes.slice(0, 20)) })
          .where(eq(t.leases.id, lease.id));
        await confirmReleased(ledger, hostId, report.fencingToken, actor, { processesRemain: true }, tx);
        return `${hostId} release-required: ${report.processes.length} GPU process(es) remain`;
      }
    }
  });
}

async function runnerExited(
  ledger: LedgerStore,
  tx: Tx,
  now: number,
  a: {
    lease: LeaseRow;
    r: ReservationRow;
    leases: LeaseRow[];
    hostId: string;
    actor: string;
    report: Extract<Report, { type: 'runner_exited' }>;
    event: LeaseEvent;
  },
): Promise<string> {
  const { lease, r, leases, hostId, actor, report } = a;
  const h = await currentHandoff(tx, lease.id);
  // Once the release began, the GitHub part may already have deregistered the runner (its
  // handoff row is marked deleted); the exit of the runner the agent stopped is still evidence.
  const releasedRunner =
    h?.runnerName !== report.runnerName &&
    lease.status === 'releasing' &&
    (
      await tx
        .select({ name: t.jitHandoffs.runnerName })
        .from(t.jitHandoffs)
        .where(and(eq(t.jitHandoffs.leaseId, lease.id), eq(t.jitHandoffs.runnerName, report.runnerName)))
    ).length > 0;
  if (!releasedRunner && (!h || h.runnerName !== report.runnerName)) {
    throw conflict('unknown_runner', `runner ${report.runnerName} is not the current runner of ${lease.id}`);
  }
  if (lease.runnerExitedAt != null) return `${lease.id} exit already recorded`;
  // a CI task's agent built the receipt itself (ADR 0110); a runner's job posts its own
  const task = ciModeOf(r) === 'task';
  if (report.receipt) {
    if (!task)
      throw conflict('not_a_task', `reservation ${r.id} runs on a JIT runner; its job posts the receipt`);
    await recordTaskReceipt(ledger, tx, now, { r, lease, leases, receipt: report.receipt, actor });
  }
  const judged = await judgeExit(tx, now, { lease, r, hostId, report });
  const lastLines = report.lastLines.slice(-50).map((l) => l.slice(0, 500));
  await tx
    .update(t.leases)
    .set({
      runnerExitedAt: now,
      exitCode: report.exitCode,
      evidenceJson: mergeEvidence(lease, 'runner', {
        runnerName: report.runnerName,
        exitCode: report.exitCode,
        lastLines,
      }),
    })
    .where(eq(t.leases.id, lease.id));
  await a.event(
    'lease.runner_exited',
    report.hostEvidence?.preflight?.ok === false && report.hostEvidence.runner.exitCode == null
      ? `runner ${report.runnerName} not started: the host preflight failed`
      : `runner ${report.runnerName} exited ${report.exitCode ?? 'by signal'}`,
    {
      runnerName: report.runnerName,
      exitCode: report.exitCode,
      // the host's own words (ADR 0160): no log lines, no tokens (the history is public)
      ...(report.hostEvidence
        ? {
            runnerResult: report.hostEvidence.runner.result,
            preflightOk: report.hostEvidence.preflight?.ok ?? null,
            workTreeSha: judged.sha,
          }
        : {}),
    },
  );
  if (!isReleasableStatus(r.status)) return `reservation ${r.id} already ${r.status}`;
  const failed = report.exitCode !== 0 || judged.refuted != null;
  // a job GitHub reported, or evidence that contradicts itself, is a result: never "not run"
  const notRun =
    failed && !judged.contradicted && jobOutcome(r) == null
      ? await notStarted(ledger, tx, { lease, r, hostId, report, task })
      : null;
  if (notRun) {
    // the PR's script never started: the check names the cause, never "failed" (ADR 0177)
    await beginRelease(ledger, r.id, notRun.outcome, notRun.cause.slice(0, 500), actor, tx, {
      showCause: true,
    });
    return `reservation ${r.id} releasing (${notRun.outcome})`;
  }
  if (failed) {
    // pairs fail as a unit: the other node's runner is stopped by its agent on `clean`; a
    // contradiction fails the work whatever GitHub said (the host's evidence is the verdict)
    const outcome: Outcome = judged.contradicted
      ? 'failed'
      : r.topology === 'pair'
        ? 'failed'
        : (jobOutcome(r) ?? judged.outcome ?? 'failed');
    await beginRelease(
      ledger,
      r.id,
      outcome,
      // the exit's own words where it failed; the host's finding where only that fails it
      judged.refuted &&
        (judged.contradicted || report.exitCode === 0 || report.hostEvidence?.preflight?.ok === false)
        ? judged.refuted.slice(0, 500)
        : task
          ? `CI task on ${hostId}: ${report.receipt?.reason ?? `exited ${report.exitCode ?? 'by signal'}`}`.slice(
              0,
              500,
            )
          : `runner on ${hostId} exited ${report.exitCode ?? 'by signal'}`,
      actor,
      tx,
      judged.contradicted ? { showCause: true } : {},
    );
    return `reservation ${r.id} releasing (failed)`;
  }
  const stillRunning = leases.filter((l) => l.id !== lease.id && l.runnerExitedAt == null);
  if (stillRunning.length) {
    return `${lease.id} runner exited 0; waiting for ${stillRunning.map((l) => l.hostId).join(', ')}`;
  }
  // a task's exit is the job's result: every node's script exited 0 at the bound commit
  await beginRelease(
    ledger,
    r.id,
    jobOutcome(r) ?? (task ? 'passed' : 'runner exited 0'),
    task
      ? `spark-test.sh passed on ${leases.map((l) => l.hostId).join(' + ')}`
      : `runner on ${hostId} exited 0`,
    actor,
    tx,
  );
  return `reservation ${r.id} releasing`;
}

/**
 * Whether a failed exit means the PR's script never started (ADR 0177): the agent's own preflight
 * refused, so it started nothing (`preflight_failed`); or dstack ended the lease's run before
 * running it — no start was ever reported for the lease, which the agent reports only once dstack
 * runs the job (ADR 0120), so the exit of a run that never ran is the only one without it
 * (`task_not_started`). A JIT runner or Slurm job reports its start when its process runs, so a
 * quick failing one is the job's own failure, never this.
 */
async function notStarted(
  ledger: LedgerStore,
  tx: Tx,
  a: {
    lease: LeaseRow;
    r: ReservationRow;
    hostId: string;
    report: Extract<Report, { type: 'runner_exited' }>;
    task: boolean;
  },
): Promise<{ outcome: Outcome; cause: string } | null> {
  const e = a.report.hostEvidence;
  if (e?.preflight?.ok === false && e.runner.exitCode == null) {
    const failing = e.preflight.checks.filter((c) => !c.ok && c.fatal);
    return {
      outcome: 'preflight_failed',
      cause: `the host preflight on ${a.hostId} refused, nothing of the PR ran: ${failing.map((c) => `${c.name}: ${c.detail}`).join('; ') || 'failed'}`,
    };
  }
  if (a.lease.runnerStartedAt != null || jobPickedUp(a.r)) return null;
  if (!a.task && !(await runsOnDstack(ledger, tx, a.r, a.hostId))) return null;
  const why = (a.report.receipt?.reason ?? a.report.lastLines.at(-1) ?? 'dstack ended the run').replace(
    /^the task never started: /,
    '',
  );
  return {
    outcome: 'task_not_started',
    cause: `the dstack task on ${a.hostId} never started: ${why}`,
  };
}

/**
 * GitHub reported the reservation's job in progress (`workflow_job`, the GitHub part's meta): a
 * runner took it, so something of the job ran, whatever the agent reported.
 */
function jobPickedUp(r: ReservationRow): boolean {
  try {
    return (JSON.parse(r.metaJson ?? '{}') as { jobPickedUpAt?: unknown }).jobPickedUpAt != null;
  } catch {
    return false;
  }
}

/** The lease's work runs on dstack: its repository chooses it, or the host's agent runs it. */
async function runsOnDstack(s: LedgerStore, tx: Tx, r: ReservationRow, hostId: string): Promise<boolean> {
  const chosen = executorForRepo(s.config, r.repo);
  if (chosen) return chosen === 'dstack';
  const host = await getHost(s, tx, hostId);
  try {
    return (host?.factsJson ? (JSON.parse(host.factsJson) as HostFacts).executor : null) === 'dstack';
  } catch {
    return false;
  }
}

/**
 * Records the host's evidence of a runner's exit (ADR 0160) and says whether it refutes a pass:
 * the host preflight failed, the runner's own job result is not a success, or the evidence
 * contradicts the admitted commit, the job's receipt or GitHub's conclusion. Only such definite
 * findings change the outcome here; a result or commit the agent could not read only keeps the
 * check from passing (functions/github/check-run.ts).
 */
async function judgeExit(
  tx: Tx,
  now: number,
  a: {
    lease: LeaseRow;
    r: ReservationRow;
    hostId: string;
    report: Extract<Report, { type: 'runner_exited' }>;
  },
): Promise<{ refuted: string | null; contradicted: boolean; outcome: Outcome | null; sha: string | null }> {
  const e = a.report.hostEvidence;
  if (!e) return { refuted: null, contradicted: false, outcome: null, sha: null };
  await recordHostEvidence(tx, now, a.lease, e);
  const facts = {
    admittedSha: a.r.headSha,
    repo: a.r.repo,
    job: parseStoredReceipts(a.r.receiptJson)?.byHost ?? {},
    github: jobOutcome(a.r),
  };
  const finding = judgeHost(a.hostId, e, facts);
  const contra = contradictionsOf(a.hostId, e, finding, facts);
  if (contra.length)
    return {
      refuted: `the host's evidence contradicts the job: ${contra.join('; ')}`,
      contradicted: true,
      outcome: 'failed',
      sha: finding.sha,
    };
  const definite =
    e.preflight?.ok === false || (e.runner.result != null && !isPassingResult(e.runner.result));
  if (!definite) return { refuted: null, contradicted: false, outcome: null, sha: finding.sha };
  return {
    refuted: finding.why,
    contradicted: false,
    outcome: finding.result === 'cancelled' ? 'cancelled' : 'failed',
    sha: finding.sha,
  };
}

async function applyRestored(
  ledger: LedgerStore,
  hostId: string,
  report: Extract<Report, { type: 'restored' }>,
  actor: string,
): Promise<string> {
  const after = await applyRestoredReport(ledger, hostId, report, actor);
  return `${hostId} ${after.phase}`;
}
