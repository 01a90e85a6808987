import { isReleasableStatus } from '../../core/model.ts';
import type { SentEffect } from '../ledger/ledger.ts';
import { GitHubError } from './client.ts';
import { readMeta } from './meta.ts';
import type { Sender } from './outbox.ts';
import { type DispatchedRun, findDispatchedRun } from './run-identity.ts';
import { skipped } from './send-skipped.ts';
import { whyNotWanted } from './still-wanted.ts';
import { dispatchInputs, readWorkflowContract } from './workflow-contract.ts';

/** Lookups of the dispatched run by its jobs' nonce label before the reservation fails (≈ 8 min of backoff). */
export const FIND_RUN_ATTEMPTS = 8;

/**
 * Dispatches the workflow with the inputs its file declares (docs/adr/0131: the spec's four, and
 * the nonce where declared) and records the run it created from the dispatch answer
 * (`return_run_details`); without an id in the answer, by its jobs' nonce label through a bounded
 * `find-run` outbox row — never by its name, and no polling on a runner.
 */
export const sendDispatch: Sender = async (svc, row, payload) => {
  const rid = String(payload.reservationId);
  const r = await svc.ledger.getReservation(undefined, rid);
  if (!r?.repo || !r.headSha) return skipped('reservation has no GitHub commit');
  const meta = readMeta(r);
  if (!meta) return skipped('reservation was not created by GitHub');
  if (meta.runId != null) return skipped(`run ${meta.runId} already recorded`);
  const record = (run: DispatchedRun, via: 'dispatch-response' | 'job-label', nonceLabel: boolean) =>
    runIdentified(rid, run, via, nonceLabel);
  // granted work: dispatched and registered at the grant, while the hosts prepare (ADR 0070)
  if (!isReleasableStatus(r.status)) {
    // an earlier attempt may have dispatched and lost the answer: record that run, so the hook
    // cancels it (ADR 0095), rather than leave it queued on GitHub
    const earlier = row.attempts > 0 && meta.nonce ? await findDispatchedRun(svc, r, meta) : null;
    if (earlier)
      return {
        result: { found: earlier.runId, ended: r.status },
        effect: record(earlier, 'job-label', true),
      };
    return skipped(`reservation is ${r.status}`);
  }
  // the PR's re-check and the workflow file's read go out together: two GitHub round trips in a
  // row were ~200 ms each on the handover's path (docs/adr/0275-handover-bench-finishes.md); the
  // file read is only used once the PR is still wanted, and its failure only counts then; the
  // sender never returns with it still in flight
  const contractRead = readWorkflowContract(
    svc,
    r.repo,
    meta.workflow,
    meta.defaultBranch,
    meta.installationId,
  ).then(
    (c) => ({ ok: true as const, c }),
    (e: unknown) => ({ ok: false as const, e }),
  );
  const why = await whyNotWanted(svc, r, meta).catch(async (e: unknown) => {
    await contractRead;
    throw e;
  });
  if (why) {
    await contractRead;
    return {
      result: { skipped: why },
      // the check run says why in words (reservations.reason)
      effect: { kind: 'withdrawn', reservationId: rid, why },
    };
  }
  const read = await contractRead;
  if (!meta.nonce) throw new GitHubError(0, `${rid} has no runner nonce; it cannot be dispatched`, false);
  // the workflow's own declared inputs decide what is sent (docs/adr/0131): GitHub refuses any
  // undeclared input, and a workflow that breaks the contract is refused here with the fix
  if (!read.ok) throw read.e;
  const contract = read.c;
  if (!contract.ok)
    throw new GitHubError(
      0,
      `the workflow .github/workflows/${meta.workflow} on ${meta.defaultBranch} breaks the Spark workflow contract: ${contract.problems.join('; ')}`,
      false,
    );
  if (row.attempts > 0 && contract.nonce) {
    // an earlier attempt may have dispatched and lost the answer: never start a second run
    const earlier = await findDispatchedRun(svc, r, { ...meta, nonceLabel: true });
    if (earlier) return { result: { found: earlier.runId }, effect: record(earlier, 'job-label', true) };
  }
  const res = await svc.client.request<{ workflow_run_id?: number } | null>(
    'POST',
    `/repos/${r.repo}/actions/workflows/${encodeURIComponent(meta.workflow)}/dispatches`,
    {
      body: {
        ref: meta.defaultBranch,
        inputs: dispatchInputs(contract, {
          reservationId: r.id,
          headSha: r.headSha,
          topology: r.topology,
          suite: r.suite ?? 'smoke',
          nonce: meta.nonce,
        }),
        // GitHub answers 200 with the run id and URLs (REST "Create a workflow dispatch event",
        // return_run_details; from API version 2026-03-10 the only answer): the run is known from
        // the dispatch itself
        return_run_details: true,
      },
      installationId: meta.installationId,
    },
  );
  const direct = res.data?.workflow_run_id;
  const sent = { dispatched: meta.workflow, ref: meta.defaultBranch, inputs: contract.sends };
  if (typeof direct === 'number') {
    return {
      result: { ...sent, runId: direct },
      effect: record({ runId: direct, runAttempt: 1 }, 'dispatch-response', contract.nonce),
    };
  }
  // no run id in the answer (a GitHub without return_run_details answers 204): a run whose jobs
  // ask for the nonce label is ours; without a nonce no run can be told apart from another dispatch
  if (!contract.nonce)
    throw new GitHubError(
      0,
      `GitHub answered the dispatch without the run's id (no return_run_details), and .github/workflows/${meta.workflow} declares no nonce input to find the run by; the run cannot be identified`,
      false,
    );
  const listed = await findDispatchedRun(svc, r, { ...meta, nonceLabel: true });
  if (listed) {
    return {
      result: { ...sent, runId: listed.runId },
      effect: record(listed, 'job-label', true),
    };
  }
  return {
    result: { ...sent, runId: null },
    // GitHub lists a new run after a moment: look again through the outbox (bounded), not here
    effect: { kind: 'run-not-listed-yet', reservationId: rid },
  };
};

/** The ledger effect of an identified run (the first identification wins, `recordDispatchedRun`). */
const runIdentified = (
  rid: string,
  run: DispatchedRun,
  via: 'dispatch-response' | 'job-label',
  nonceLabel: boolean,
): SentEffect => ({
  kind: 'run-identified',
  reservationId: rid,
  runId: run.runId,
  runAttempt: run.runAttempt,
  via,
  nonceLabel,
});

/** Looks for the dispatched run by its jobs' nonce label until found, at most {@link FIND_RUN_ATTEMPTS} times. */
export const sendFindRun: Sender = async (svc, row, payload) => {
  const rid = String(payload.reservationId);
  const r = await svc.ledger.getReservation(undefined, rid);
  if (!r?.repo) return skipped('reservation has no repository');
  // ended work is looked up too: its dispatch was sent, so a run exists that must be recorded
  // to be cancelled (the GitHub hook queues the cancellation on `reservation.run_recorded`)
  const meta = readMeta(r);
  if (!meta) return skipped('reservation was not created by GitHub');
  if (meta.runId != null) return skipped(`run ${meta.runId} already recorded`);
  const run = await findDispatchedRun(svc, r, meta);
  if (!run) {
    const last = row.attempts + 1 >= FIND_RUN_ATTEMPTS;
    // the message never names the label: it carries the nonce
    throw new GitHubError(
      0,
      `the dispatched workflow run of ${rid} is not listed by GitHub${last ? ` after ${FIND_RUN_ATTEMPTS} lookups` : ' yet'}`,
      !last,
    );
  }
  return {
    result: { found: run.runId, runAttempt: run.runAttempt },
    effect: runIdentified(rid, run, 'job-label', true),
  };
};
