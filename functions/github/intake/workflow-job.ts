import type { ReservationLabel } from '../../ledger/ledger.ts';
import { WorkflowJobEvent } from '../payloads.ts';
import { parseReservationLabel } from '../run-identity.ts';
import type { GitHubService } from '../service.ts';
import { type Delivery, type IntakeResult, noOp, withDelivery } from './delivery.ts';

const CONCLUSION_OUTCOME: Record<string, 'passed' | 'failed' | 'cancelled'> = {
  success: 'passed',
  failure: 'failed',
  cancelled: 'cancelled',
};

/**
 * `workflow_job`: the payload parsed here — the reservation labels the job asks for (ADR 0040),
 * the outcome its conclusion means — and judged in one ledger command, `recordWorkflowJob`
 * (`functions/ledger/workflow-jobs.ts`; docs/adr/0220-one-ledger-front-door.md): a job on a JIT
 * runner registered for a reservation, in the recorded run, advances it or, when it is not the
 * admitted job, is stopped as foreign; a job asking for a label changes nothing but the audit.
 */
export async function onWorkflowJob(svc: GitHubService, d: Delivery, raw: unknown): Promise<IntakeResult> {
  const p = WorkflowJobEvent.parse(raw);
  const job = p.workflow_job;
  const labels = job.labels.map(parseReservationLabel).filter((x): x is ReservationLabel => x != null);
  if (!labels.length && !job.runner_name) return noOp(svc, d, p.action, 'ignored: not a Spark job');
  return withDelivery(svc, d, p.action, (tx, now) =>
    svc.ledger.recordWorkflowJob(tx, now, {
      action: p.action,
      repo: p.repository.full_name,
      jobId: job.id,
      runId: job.run_id,
      runAttempt: job.run_attempt ?? 1,
      runnerName: job.runner_name || null,
      conclusion: job.conclusion,
      outcome: CONCLUSION_OUTCOME[job.conclusion ?? ''] ?? 'failed',
      htmlUrl: job.html_url ?? null,
      labels,
    }),
  );
}
