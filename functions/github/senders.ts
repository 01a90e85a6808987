import { isJobOutcome } from '../../core/model.ts';
import { EXECUTOR_NAMES } from '../../core/protocol/agent.ts';
import type { ReservationRow } from '../ledger/ledger.ts';
import type { Views } from '../views.ts';
import {
  type CheckRunView,
  checkRunKey,
  fitSummary,
  REFUSAL_CHECK_NAME,
  type RenderContext,
  renderCheckRun,
} from './check-run.ts';
import { sendMintCloneToken } from './clone-token-sender.ts';
import { sendDispatch, sendFindRun } from './dispatch-senders.ts';
import { readMeta } from './meta.ts';
import type { OutboxKind, Sender } from './outbox.ts';
import { sendCancelRun } from './run-cancel.ts';
import { sendDeleteRunner, sendGenerateJit } from './runner-senders.ts';
import { skipped } from './send-skipped.ts';
import type { GitHubService } from './service.ts';

export { cloneTokenBroaderThanAsked } from './clone-token-sender.ts';
export { FIND_RUN_ATTEMPTS } from './dispatch-senders.ts';
export { JIT_PER_HOUR, runnerLabels, runnerName } from './runner-senders.ts';

/** Builds what the check-run renderer needs from the ledger. */
/** The backend a lease's agent reported with `runner_started`, if any. */
function executorOf(evidenceJson: string | null): string[] {
  if (!evidenceJson) return [];
  try {
    const e = (JSON.parse(evidenceJson) as { executor?: unknown }).executor;
    return typeof e === 'string' && (EXECUTOR_NAMES as readonly string[]).includes(e) ? [e] : [];
  } catch {
    return [];
  }
}

export async function renderContextFor(svc: GitHubService, r: ReservationRow): Promise<RenderContext> {
  const leases = await svc.ledger.leasesOf(undefined, r.id);
  const queued =
    r.status === 'queued' ? queuedContext(await svc.views.get(), r.id) : { keptHost: null, eta: null };
  const meta = readMeta(r);
  const task = meta?.ci === 'task';
  return {
    hosts: leases.map((l) => l.hostId),
    executors: leases.flatMap((l) => executorOf(l.evidenceJson)),
    ...(task
      ? {
          mode: 'task' as const,
          taskStopped: !isJobOutcome(r.outcome) && leases.some((l) => l.runnerStartedAt != null),
        }
      : {}),
    ...queued,
    fault: meta?.fault ?? null,
    note: meta?.note ?? null,
    // the check's verdict comes from the hosts' own evidence (ADR 0160)
    ...(r.status === 'queued' ? {} : { hostEvidence: await svc.ledger.github.hostEvidenceOf(r.id) }),
  };
}

/**
 * What a queued reservation's check run shows beyond its row: the host kept for it (draining or
 * held) and the start estimate. One function for the sender and the position refresh
 * (`refreshQueuedChecks`), so the refresh compares against exactly the title the sender wrote.
 */
export function queuedContext(views: Views, reservationId: string): Pick<RenderContext, 'keptHost' | 'eta'> {
  const h = views.fleet.hosts.find(
    (x) => x.keptFor === reservationId && (x.state === 'draining' || x.state === 'held'),
  );
  return {
    keptHost: h ? { id: h.id, state: h.state as 'draining' | 'held' } : null,
    eta: views.queue.queued.find((q) => q.id === reservationId)?.eta?.text ?? null,
  };
}

function checkBody(svc: GitHubService, r: ReservationRow, view: CheckRunView, now: number) {
  return {
    name: svc.gh.checkName,
    head_sha: r.headSha!,
    external_id: r.id,
    status: view.status,
    ...(view.conclusion ? { conclusion: view.conclusion, completed_at: new Date(now).toISOString() } : {}),
    ...(svc.publicUrl ? { details_url: `${svc.publicUrl.replace(/\/+$/, '')}/` } : {}),
    output: { title: view.title, summary: fitSummary(view.summary) },
  };
}

const sendCheckRun: Sender = async (svc, _row, payload) => {
  const rid = String(payload.reservationId);
  const r = await svc.ledger.getReservation(undefined, rid);
  if (!r?.repo || !r.headSha) return skipped('reservation has no GitHub commit');
  const meta = readMeta(r);
  const view = renderCheckRun(r, await renderContextFor(svc, r));
  const body = checkBody(svc, r, view, svc.ledger.clock());
  const inst = meta?.installationId ?? null;
  let id = r.checkRunId;
  if (id == null) {
    // A create whose response was lost (timeout, 5xx after commit) must not make a second
    // check run: look for ours by external_id first.
    const list = await svc.client.request<{ check_runs: { id: number; external_id: string | null }[] }>(
      'GET',
      `/repos/${r.repo}/commits/${r.headSha}/check-runs?check_name=${encodeURIComponent(svc.gh.checkName)}&filter=all&per_page=100`,
      { installationId: inst },
    );
    id = list.data.check_runs.find((c) => c.external_id === r.id)?.id ?? null;
  }
  if (id == null) {
    const created = await svc.client.request<{ id: number }>('POST', `/repos/${r.repo}/check-runs`, {
      body,
      installationId: inst,
    });
    id = created.data.id;
  } else {
    const { head_sha: _sha, ...update } = body;
    await svc.client.request('PATCH', `/repos/${r.repo}/check-runs/${id}`, {
      body: update,
      installationId: inst,
    });
  }
  const checkRunId = id;
  const lastCheck = await checkRunKey(view);
  return {
    result: { checkRunId, status: view.status, title: view.title },
    effect: { kind: 'check-run-synced', reservationId: rid, checkRunId, lastCheck },
  };
};

const sendRefusalCheck: Sender = async (svc, row, payload) => {
  const repo = String(payload.repo);
  const headSha = String(payload.headSha);
  const view = payload.view as CheckRunView;
  const created = await svc.client.request<{ id: number }>('POST', `/repos/${repo}/check-runs`, {
    body: {
      // never the result check's name (ADR 0030): a refusal must not cover a Spark result
      name: view.name && view.name !== svc.gh.checkName ? view.name : REFUSAL_CHECK_NAME,
      head_sha: headSha,
      external_id: row.idempotencyKey.slice(0, 100),
      status: 'completed',
      conclusion: view.conclusion ?? 'neutral',
      completed_at: new Date(svc.ledger.clock()).toISOString(),
      output: { title: view.title, summary: fitSummary(view.summary) },
    },
    installationId: (payload.installationId as number | null) ?? null,
  });
  return { result: { checkRunId: created.data.id, title: view.title } };
};

export const senders: Record<OutboxKind, Sender> = {
  'check-run': sendCheckRun,
  'refusal-check': sendRefusalCheck,
  dispatch: sendDispatch,
  'find-run': sendFindRun,
  'generate-jitconfig': sendGenerateJit,
  'delete-runner': sendDeleteRunner,
  'cancel-run': sendCancelRun,
  'mint-clone-token': sendMintCloneToken,
};
