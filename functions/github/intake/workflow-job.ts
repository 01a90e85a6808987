import { isActiveStatus } from '../../../core/model.ts';
import { recordUnknownJob } from '../../ledger/github.ts';
import { handoffsOf } from '../../ledger/queries.ts';
import {
  advanceReservation,
  getReservation,
  noteReservation,
  recordJobOutcome,
} from '../../ledger/reservations.ts';
import { patchMeta } from '../meta.ts';
import { WorkflowJobEvent } from '../payloads.ts';
import type { GitHubService } from '../service.ts';
import { type Delivery, type IntakeResult, noOp, withDelivery } from './delivery.ts';

const CONCLUSION_OUTCOME: Record<string, 'passed' | 'failed' | 'cancelled'> = {
  success: 'passed',
  failure: 'failed',
  cancelled: 'cancelled',
};

/**
 * `workflow_job`: matches a job to its reservation by the unique reservation label, then checks
 * repo, SHA and runner name. A mismatch is an audited fault shown on the check run; it changes
 * no state. `in_progress` moves preparing work to running; `completed` records the job outcome.
 */
export async function onWorkflowJob(svc: GitHubService, d: Delivery, raw: unknown): Promise<IntakeResult> {
  const p = WorkflowJobEvent.parse(raw);
  const job = p.workflow_job;
  const label = job.labels.find((l) => /^spark-r-\d+$/.test(l));
  if (!label) return noOp(svc, d, p.action, 'ignored: job without a Spark reservation label');
  const rid = label.slice('spark-'.length);
  return withDelivery(svc, d, p.action, async (tx, now) => {
    const r = await getReservation(svc.ledger, tx, rid);
    if (!r) {
      await recordUnknownJob(
        svc.ledger,
        tx,
        p.repository.full_name,
        `workflow job ${job.id} asks for ${label} but no such reservation exists`,
        { jobId: job.id, runId: job.run_id, headSha: job.head_sha },
      );
      return 'fault: unknown reservation';
    }
    const handoffs = await handoffsOf(tx, rid);
    const problems: string[] = [];
    if ((r.repo ?? '').toLowerCase() !== p.repository.full_name.toLowerCase())
      problems.push(`repository ${p.repository.full_name} ≠ ${r.repo}`);
    if (job.head_sha !== r.headSha)
      problems.push(`SHA ${job.head_sha.slice(0, 7)} ≠ admitted ${r.headSha?.slice(0, 7)}`);
    if (job.runner_name && !handoffs.some((h) => h.runnerName === job.runner_name))
      problems.push(`runner "${job.runner_name}" was not registered for ${rid}`);
    if (problems.length) {
      const fault = `workflow job ${job.id} (${p.action}) does not match ${rid}: ${problems.join('; ')}`;
      await patchMeta(tx, r, { fault });
      await noteReservation(svc.ledger, tx, r, 'reservation.job_mismatch', fault, 'github', {
        jobId: job.id,
        runId: job.run_id,
      });
      return `fault: ${problems.join('; ')}`;
    }
    if (p.action === 'in_progress') {
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
    if (p.action === 'completed') {
      if (!isActiveStatus(r.status)) return `job completed; ${rid} already ${r.status}`;
      const outcome = await recordJobOutcome(
        svc.ledger,
        tx,
        r,
        CONCLUSION_OUTCOME[job.conclusion ?? ''] ?? 'failed',
        `workflow job ${job.id} completed: ${job.conclusion ?? 'no conclusion'}`,
        { jobId: job.id, conclusion: job.conclusion },
      );
      return `${rid} outcome ${outcome}`;
    }
    return `ignored: workflow_job.${p.action}`;
  });
}
