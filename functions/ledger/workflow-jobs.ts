import { isActiveStatus } from '../../core/model.ts';
import type { Tx } from './db.ts';
import { cancelRunKey, recordUnknownJob } from './github.ts';
import { patchMeta, readMeta } from './github-meta.ts';
import { outboxKeyExists } from './outbox.ts';
import { handoffByRunnerName } from './queries.ts';
import {
  advanceReservation,
  getReservation,
  noteReservation,
  recordJobOutcome,
  stopForeignJob,
} from './reservations.ts';
import type { ReservationRow } from './rows.ts';
import type { LedgerStore } from './store.ts';

/**
 * The `workflow_job` command: one delivery's whole effect on the ledger, in its transaction
 * (docs/adr/0220-one-ledger-front-door.md). The GitHub part parses the payload — the reservation
 * labels the job asks for, the outcome its conclusion means — and hands it over as a
 * {@link WorkflowJobReport}; which case applies (a job on one of our runners, a job asking for one
 * of our labels, a label never issued) is decided here, from the handoff and the reservation the
 * ledger holds, and each case is one named step below.
 */

/** A reservation label `spark-<id>-<nonce>` as the GitHub part parsed it (both lower case). */
export interface ReservationLabel {
  reservationId: string;
  nonce: string;
}

/** A `workflow_job` delivery, parsed by the GitHub part. */
export interface WorkflowJobReport {
  /** `queued`, `in_progress`, `completed` or any other action GitHub sends (`waiting`). */
  action: string;
  /** The repository the job runs in, as the delivery names it. */
  repo: string;
  jobId: number;
  runId: number;
  /** 1 when the payload has none (older payloads). */
  runAttempt: number;
  /** The runner that took the job, or null while none has. */
  runnerName: string | null;
  conclusion: string | null;
  /** The outcome `conclusion` means, for a completed job. */
  outcome: 'passed' | 'failed' | 'cancelled';
  htmlUrl: string | null;
  /** The reservation labels the job asks for, in the order of its labels. */
  labels: ReservationLabel[];
}

/**
 * Why `job` is not the admitted job of `r`, or null when it is: same repository, the recorded run
 * and attempt, and the reservation's nonce label. Never `head_sha`: a dispatched run's `head_sha`
 * is the default branch tip, not the PR commit tested (docs/adr/0131-workflow-contract-and-run-identity.md).
 */
function notAdmitted(r: ReservationRow, job: WorkflowJobReport): string | null {
  const meta = readMeta(r);
  if ((r.repo ?? '').toLowerCase() !== job.repo.toLowerCase())
    return `repository ${job.repo} is not ${r.repo}`;
  if (meta?.runId == null) return `no run is recorded for ${r.id} yet`;
  if (job.runId !== meta.runId) return `run ${job.runId} is not the dispatched run ${meta.runId}`;
  if (job.runAttempt !== (meta.runAttempt ?? 1))
    return `run attempt ${job.runAttempt} is not ${meta.runAttempt ?? 1}`;
  // a workflow without the nonce input asks for the allocation labels only (docs/adr/0131)
  if (meta.nonceLabel === false) return null;
  const id = r.id.toLowerCase();
  const nonce = meta.nonce?.toLowerCase();
  if (!nonce || !job.labels.some((l) => l.reservationId === id && l.nonce === nonce))
    return `the job does not ask for ${r.id}'s runner label`;
  return null;
}

/**
 * Whether a `cancelled` report of the admitted job is the echo of the controller's own
 * cancellation of the run (ADR 0095): the release began first and said why, so its outcome stays.
 */
async function ourCancellation(tx: Tx, r: ReservationRow, job: WorkflowJobReport): Promise<boolean> {
  const runId = readMeta(r)?.runId;
  if (r.status !== 'releasing' || job.conclusion !== 'cancelled' || runId == null) return false;
  return outboxKeyExists(tx, cancelRunKey(r.id, runId));
}

/**
 * A job belongs to a reservation when it runs on a JIT runner registered for it, in the recorded
 * run (and attempt), in the same repository. A different job on one of our runners is foreign: the
 * runner is stopped, the reservation fails and an alert fires. A job that asks for a reservation's
 * label but is not ours changes nothing and is audited without echoing the label (it may carry a
 * guessed or leaked nonce). Returns the delivery's result in words.
 */
export async function recordWorkflowJob(
  s: LedgerStore,
  tx: Tx,
  now: number,
  job: WorkflowJobReport,
): Promise<string> {
  const runner = job.runnerName ? await handoffByRunnerName(tx, job.runnerName) : null;
  if (runner) return jobOnOurRunner(s, tx, now, job, runner.reservationId);
  const named = job.labels[0];
  if (!named) return 'ignored: not a Spark job';
  const r = await getReservation(s, tx, named.reservationId);
  if (!r || readMeta(r)?.nonce !== named.nonce) return unknownJobLabel(s, tx, job, named.reservationId);
  return jobForOurLabel(s, tx, job, r);
}

/** A job asks for a reservation label that was never issued: audited, nothing changes. */
async function unknownJobLabel(
  s: LedgerStore,
  tx: Tx,
  job: WorkflowJobReport,
  reservationId: string,
): Promise<string> {
  await recordUnknownJob(
    s,
    tx,
    job.repo,
    `workflow job ${job.jobId} (${job.action}) asks for a runner label of ${reservationId} that was never issued`,
    { jobId: job.jobId, runId: job.runId, reservationId },
  );
  return `fault: no such reservation label (${reservationId})`;
}

/** A job asks for `r`'s label and no runner of ours has it (yet). */
async function jobForOurLabel(
  s: LedgerStore,
  tx: Tx,
  job: WorkflowJobReport,
  r: ReservationRow,
): Promise<string> {
  // GitHub reports a job queued as soon as the dispatch creates it, which may be before the
  // dispatch answer recorded the run: nothing to judge yet, and nothing to audit
  if (job.action === 'queued' && !job.runnerName && readMeta(r)?.runId == null)
    return `job ${job.jobId} queued; ${r.id}'s run is not recorded yet`;
  const why = notAdmitted(r, job);
  const data = { jobId: job.jobId, runId: job.runId };
  if (job.runnerName) {
    // our label, yet a runner we never registered took it: nothing of ours runs there
    const fault = `workflow job ${job.jobId} (${job.action}) runs on runner "${job.runnerName}", which was not registered for ${r.id}`;
    await patchMeta(tx, r, { fault });
    await noteReservation(s, tx, r, 'reservation.job_mismatch', fault, 'github', data);
    return `fault: ${fault}`;
  }
  if (why) {
    // a job queued for our label in another run: it can only race for the runner, and a
    // job that wins the race is stopped when it starts (jobOnOurRunner)
    await noteReservation(
      s,
      tx,
      r,
      'reservation.job_mismatch',
      `workflow job ${job.jobId} (${job.action}) asks for ${r.id}'s runner but is not its job: ${why}`,
      'github',
      data,
    );
    return `not admitted: ${why}`;
  }
  if (job.action === 'completed' && isActiveStatus(r.status)) {
    // the admitted job ended before any runner took it (e.g. the run was cancelled)
    const outcome = await completeAdmittedJob(
      s,
      tx,
      r,
      job,
      `workflow job ${job.jobId} completed before a runner took it: ${job.conclusion ?? 'no conclusion'}`,
    );
    return `${r.id} outcome ${outcome}`;
  }
  return `job ${job.jobId} ${job.action}; ${r.id} is ${r.status}`;
}

/** A job on a JIT runner registered for `rid`: the admitted job advances; any other is stopped. */
async function jobOnOurRunner(
  s: LedgerStore,
  tx: Tx,
  now: number,
  job: WorkflowJobReport,
  rid: string,
): Promise<string> {
  const r = await getReservation(s, tx, rid);
  if (!r) return `ignored: runner of unknown reservation ${rid}`;
  const why = notAdmitted(r, job);
  if (why) return foreignJob(s, tx, job, r, why);
  if (job.action === 'in_progress') return startAdmittedJob(s, tx, now, job, r);
  if (job.action === 'completed') {
    if (!isActiveStatus(r.status)) return `job completed; ${rid} already ${r.status}`;
    const outcome = await completeAdmittedJob(
      s,
      tx,
      r,
      job,
      `workflow job ${job.jobId} completed: ${job.conclusion ?? 'no conclusion'}`,
    );
    return `${rid} outcome ${outcome}`;
  }
  return `ignored: workflow_job.${job.action}`;
}

/** A job that is not `r`'s admitted one runs on `r`'s runner: the runner is stopped (ADR 0090). */
async function foreignJob(
  s: LedgerStore,
  tx: Tx,
  job: WorkflowJobReport,
  r: ReservationRow,
  why: string,
): Promise<string> {
  const detail = `workflow job ${job.jobId} (run ${job.runId}, ${job.repo}) on runner "${job.runnerName}": ${why}`;
  if (job.action === 'completed' && !isActiveStatus(r.status))
    return `foreign job ended; ${r.id} is ${r.status}`;
  const acted = await stopForeignJob(s, tx, r.id, detail, {
    jobId: job.jobId,
    runId: job.runId,
    runnerName: job.runnerName,
    repository: job.repo,
  });
  if (!acted) return `foreign job on ended work: ${detail}`;
  // the admitted job can never run on a runner of ours now: the release's effects cancel its run
  // instead of leaving it queued on GitHub until GitHub gives up on it after 24 h (ADR 0090)
  return `foreign job stopped: ${detail}`;
}

/** The admitted job started on our runner: noted, and preparing work is running. */
async function startAdmittedJob(
  s: LedgerStore,
  tx: Tx,
  now: number,
  job: WorkflowJobReport,
  r: ReservationRow,
): Promise<string> {
  await patchMeta(tx, r, { jobPickedUpAt: now, jobUrl: job.htmlUrl });
  if (r.status !== 'preparing') return `job started; ${r.id} is ${r.status}`;
  await advanceReservation(
    s,
    r.id,
    'running',
    `workflow job ${job.jobId} started on ${job.runnerName}`,
    'github',
    tx,
  );
  return `running ${r.id}`;
}

/** The admitted job's result, unless it is the echo of our own cancellation (ADR 0095). */
async function completeAdmittedJob(
  s: LedgerStore,
  tx: Tx,
  r: ReservationRow,
  job: WorkflowJobReport,
  cause: string,
): Promise<string> {
  return recordJobOutcome(
    s,
    tx,
    r,
    job.outcome,
    cause,
    { jobId: job.jobId, runId: job.runId, conclusion: job.conclusion },
    await ourCancellation(tx, r, job),
  );
}
