import type { Tx } from '../ledger/db.ts';
import { admittedJobFinished } from '../ledger/github.ts';
import type { ReservationRow } from '../ledger/ledger.ts';
import { GitHubError } from './client.ts';
import { readMeta } from './meta.ts';
import { enqueue, type Sender } from './outbox.ts';

/**
 * Cancels the admitted workflow run of a reservation that ended before its job did (ADR 0090,
 * 0095: a foreign job took its runner, preparation failed, the runner was not picked up, the
 * work was released or its pair lost a node): its job can never run on a runner of ours now, and
 * left alone it would stay queued on GitHub for 24 h. GitHub answers 202 when the cancellation is accepted and 409 when the run can
 * no longer be cancelled (it completed meanwhile): a definitive answer, recorded as the row's
 * result and never retried (REST "Cancel a workflow run").
 */
export const sendCancelRun: Sender = async (svc, _row, payload) => {
  const repo = String(payload.repo);
  const runId = Number(payload.runId);
  if (!/^[^/\s]+\/[^/\s]+$/.test(repo) || !Number.isSafeInteger(runId) || runId <= 0)
    throw new GitHubError(
      0,
      `cancel-run row names no valid run (${repo} run ${String(payload.runId)})`,
      false,
    );
  try {
    await svc.client.request('POST', `/repos/${repo}/actions/runs/${runId}/cancel`, {
      installationId: (payload.installationId as number | null) ?? null,
    });
  } catch (e) {
    if (e instanceof GitHubError && e.status === 409)
      return { result: { runId, cancelled: false, status: 409, message: e.ghMessage ?? e.message } };
    throw e;
  }
  return { result: { runId, cancelled: true } };
};

/** The outbox key of the one cancellation of a reservation's recorded run. */
export const cancelRunKey = (reservationId: string, runId: number) => `cancel-run:${reservationId}:${runId}`;

/**
 * Queues the cancellation of `r`'s recorded workflow run (ADR 0090, 0095) unless its admitted
 * job is already over. Called when the reservation's release begins and when a run is recorded
 * for work that already ended: no runner of ours takes a job of ended work, so the run would
 * stay queued on GitHub for 24 h, or run on with a stopped runner. Idempotent (one key per run).
 */
export async function enqueueRunCancel(tx: Tx, now: number, r: ReservationRow): Promise<boolean> {
  const meta = readMeta(r);
  if (meta?.runId == null || !r.repo) return false;
  if (await admittedJobFinished(tx, r.id)) return false;
  return enqueue(tx, now, {
    kind: 'cancel-run',
    key: cancelRunKey(r.id, meta.runId),
    reservationId: r.id,
    payload: {
      reservationId: r.id,
      repo: r.repo,
      runId: meta.runId,
      installationId: meta.installationId ?? null,
    },
  });
}
