import { isActiveStatus } from '../../../core/model.ts';
import type { Tx } from '../../ledger/db.ts';
import { recordUnknownJob } from '../../ledger/github.ts';
import type { ReservationRow } from '../../ledger/ledger.ts';
import { outboxKeyExists } from '../../ledger/outbox.ts';
import { handoffByRunnerName } from '../../ledger/queries.ts';
import {
  advanceReservation,
  getReservation,
  noteReservation,
  recordJobOutcome,
  stopForeignJob,
} from '../../ledger/reservations.ts';
import { patchMeta, readMeta } from '../meta.ts';
import { WorkflowJobEvent } from '../payloads.ts';
import { parseReservationLabel, reservationLabel } from '../run-identity.ts';
import { cancelRunKey } from '../senders.ts';
import type { GitHubService } from '../service.ts';
import { type Delivery, type IntakeResult, noOp, withDelivery } from './delivery.ts';

const CONCLUSION_OUTCOME: Record<string, 'passed' | 'failed' | 'cancelled'> = {
  success: 'passed',
  failure: 'failed',
  cancelled: 'cancelled',
};

type Job = WorkflowJobEvent['workflow_job'];

/**
 * Why `job` is not the admitted job of `r`, or null when it is: same
 * repository, the recorded run and attempt, and the reservation's nonce label. Never `head_sha`:
 * a dispatched run's `head_sha` is the default branch tip, not the PR commit tested.
 */
function notAdmitted(r: ReservationRow, repo: string, job: Job): string | null {
  const meta = readMeta(r);
  if ((r.repo ?? '').toLowerCase() !== repo.toLowerCase()) return `repository ${repo} is not ${r.repo}`;
  if (meta?.runId == null) return `no run is recorded for ${r.id} yet`;
  if (job.run_id !== meta.runId) return `run ${job.run_id} is not the dispatched run ${meta.runId}`;
  const attempt = job.run_attempt ?? 1;
  if (attempt !== (meta.runAttempt ?? 1)) return `run attempt ${attempt} is not ${meta.runAttempt ?? 1}`;
  // a workflow without the nonce input asks for the allocation labels only (docs/adr/0131)
  if (meta.nonceLabel === false) return null;
  const want = meta.nonce ? reservationLabel(r.id, meta.nonce).toLowerCase() : null;
  if (!want || !job.labels.some((l) => l.toLowerCase() === want))
    return `the job does not ask for ${r.id}'s runner label`;
  return null;
}

/**
 * Whether a `cancelled` report of the admitted job is the echo of the controller's own
 * cancellation of the run (ADR 0095): the release began first and said why, so its outcome stays.
 */
async function ourCancellation(tx: Tx, r: ReservationRow, job: Job): Promise<boolean> {
  const runId = readMeta(r)?.runId;
  if (r.status !== 'releasing' || job.conclusion !== 'cancelled' || runId == null) return false;
  return outboxKeyExists(tx, cancelRunKey(r.id, runId));
}

/**
 * `workflow_job`: a job belongs to a reservation when it runs on a JIT runner registered for it,
 * in the recorded run (and attempt), in the same repository. A different job
 * on one of our runners is foreign: the runner is stopped, the reservation fails and an alert
 * fires. A job that asks for a reservation's label but is not ours changes nothing and
 * is audited without echoing the label (it may carry a guessed or leaked nonce).
 */
export async function onWorkflowJob(svc: GitHubService, d: Delivery, raw: unknown): Promise<IntakeResult> {
  const p = WorkflowJobEvent.parse(raw);
  const job = p.workflow_job;
  const named = job.labels.map(parseReservationLabel).find((x) => x != null) ?? null;
  if (!named && !job.runner_name) return noOp(svc, d, p.action, 'ignored: not a Spark job');
  const repo = p.repository.full_name;
  return withDelivery(svc, d, p.action, async (tx, now) => {
    const runner = job.runner_name ? await handoffByRunnerName(tx, job.runner_name) : null;
    if (runner) return onOurRunner(svc, tx, now, p.action, repo, job, runner.reservationId);
    if (!named) return 'ignored: not a Spark job';
    const r = await getReservation(svc.ledger, tx, named.reservationId);
    const nonceOk = r != null && readMeta(r)?.nonce === named.nonce;
    if (!r || !nonceOk) {
      await recordUnknownJob(
        svc.ledger,
        tx,
        repo,
        `workflow job ${job.id} (${p.action}) asks for a runner label of ${named.reservationId} that was never issued`,
        { jobId: job.id, runId: job.run_id, reservationId: named.reservationId },
      );
      return `fault: no such reservation label (${named.reservationId})`;
    }
    // GitHub reports a job queued as soon as the dispatch creates it, which may be before the
    // dispatch answer recorded the run: nothing to judge yet, and nothing to audit
    if (p.action === 'queued' && !job.runner_name && readMeta(r)?.runId == null)
      return `job ${job.id} queued; ${r.id}'s run is not recorded yet`;
    const why = notAdmitted(r, repo, job);
    if (job.runner_name) {
      // our label, yet a runner we never registered took it: nothing of ours runs there
      const fault = `workflow job ${job.id} (${p.action}) runs on runner "${job.runner_name}", which was not registered for ${r.id}`;
      await patchMeta(tx, r, { fault });
      await noteReservation(svc.ledger, tx, r, 'reservation.job_mismatch', fault, 'github', {
        jobId: job.id,
        runId: job.run_id,
      });
      return `fault: ${fault}`;
    }
    if (why) {
      // a job queued for our label in another run: it can only race for the runner, and a
      // job that wins the race is stopped when it starts (onOurRunner)
      await noteReservation(
        svc.ledger,
        tx,
        r,
        'reservation.job_mismatch',
        `workflow job ${job.id} (${p.action}) asks for ${r.id}'s runner but is not its job: ${why}`,
        'github',
        { jobId: job.id, runId: job.run_id },
      );
      return `not admitted: ${why}`;
    }
    if (p.action === 'completed' && isActiveStatus(r.status)) {
      // the admitted job ended before any runner took it (e.g. the run was cancelled)
      const outcome = await recordJobOutcome(
        svc.ledger,
        tx,
        r,
        CONCLUSION_OUTCOME[job.conclusion ?? ''] ?? 'failed',
        `workflow job ${job.id} completed before a runner took it: ${job.conclusion ?? 'no conclusion'}`,
        { jobId: job.id, runId: job.run_id, conclusion: job.conclusion },
        await ourCancellation(tx, r, job),
      );
      return `${r.id} outcome ${outcome}`;
    }
    return `job ${job.id} ${p.action}; ${r.id} is ${r.status}`;
  });
}

/** A job on a JIT runner registered for `rid`: the admitted job advances; any other is stopped. */
async function onOurRunner(
  svc: GitHubService,
  tx: Tx,
  now: number,
  action: string,
  repo: string,
  job: Job,
  rid: string,
): Promise<string> {
  const r = await getReservation(svc.ledger, tx, rid);
  if (!r) return `ignored: runner of unknown reservation ${rid}`;
  const why = notAdmitted(r, repo, job);
  if (why) {
    const detail = `workflow job ${job.id} (run ${job.run_id}, ${repo}) on runner "${job.runner_name}": ${why}`;
    if (action === 'completed' && !isActiveStatus(r.status))
      return `foreign job ended; ${rid} is ${r.status}`;
    const acted = await stopForeignJob(svc.ledger, tx, rid, detail, {
      jobId: job.id,
      runId: job.run_id,
      runnerName: job.runner_name,
      repository: repo,
    });
    if (!acted) return `foreign job on ended work: ${detail}`;
    // the admitted job can never run on a runner of ours now: the release's hook cancels its run
    // instead of leaving it queued on GitHub until GitHub gives up on it after 24 h (ADR 0090)
    return `foreign job stopped: ${detail}`;
  }
  if (action === 'in_progress') {
    await patchMeta(tx, r, { jobPickedUpAt: now, jobUrl: job.html_url ?? null });
    if (r.status === 'preparing') {
      await advanceReservation(
        svc.ledger,
        rid,
        'running',
        `workflow job ${job.id} started on ${job.runner_name}`,
        'github',
        tx,
      );
      return `running ${rid}`;
    }
    return `job started; ${rid} is ${r.status}`;
  }
  if (action === 'completed') {
    if (!isActiveStatus(r.status)) return `job completed; ${rid} already ${r.status}`;
    const outcome = await recordJobOutcome(
      svc.ledger,
      tx,
      r,
      CONCLUSION_OUTCOME[job.conclusion ?? ''] ?? 'failed',
      `workflow job ${job.id} completed: ${job.conclusion ?? 'no conclusion'}`,
      { jobId: job.id, runId: job.run_id, conclusion: job.conclusion },
      await ourCancellation(tx, r, job),
    );
    return `${rid} outcome ${outcome}`;
  }
  return `ignored: workflow_job.${action}`;
}
