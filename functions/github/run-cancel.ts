import { GitHubError } from './client.ts';
import type { Sender } from './outbox.ts';

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
