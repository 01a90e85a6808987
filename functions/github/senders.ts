import { fleetLabelOf, runnerGroupIdOf } from '../../core/config.ts';
import { isJobOutcome, isReleasableStatus } from '../../core/model.ts';
import { EXECUTOR_NAMES } from '../../core/protocol/agent.ts';
import { recordTaskCredential } from '../ledger/ci-task.ts';
import type { Tx } from '../ledger/db.ts';
import {
  enqueueRunnerDeletes,
  markRunnerDeleted,
  recordDispatchedRun,
  recordRunnerRegistration,
  withholdJitConfigs,
} from '../ledger/github.ts';
import { hostEvidenceOf } from '../ledger/host-evidence.ts';
import { leasesOf } from '../ledger/leases.ts';
import type { ReservationRow } from '../ledger/ledger.ts';
import { getReservation, setCheckRunId, withdrawBeforeDispatch } from '../ledger/reservations.ts';
import { buildViews } from '../views.ts';
import {
  type CheckRunView,
  checkRunKey,
  fitSummary,
  REFUSAL_CHECK_NAME,
  type RenderContext,
  renderCheckRun,
} from './check-run.ts';
import { GitHubError } from './client.ts';
import { type GitHubMeta, patchMeta, readMeta } from './meta.ts';
import { enqueue, type OutboxKind, type Sender, type SendResult } from './outbox.ts';
import { PullRequestResource } from './payloads.ts';
import { type DispatchedRun, findDispatchedRun, reservationLabel } from './run-identity.ts';
import type { GitHubService } from './service.ts';
import { dispatchInputs, readWorkflowContract } from './workflow-contract.ts';

/**
 * JIT runner labels (docs/github-app.md "Runner labels"): `self-hosted, Linux, ARM64, <fleet
 * label>, spark-single|spark-pair`, plus the reservation's nonce label `spark-r-<n>-<nonce>` where
 * the workflow declares the nonce (ADR 0040, 0131).
 */
export function runnerLabels(fleetLabel: string, topology: string, nonceLabel: string | null): string[] {
  const allocation = ['self-hosted', 'Linux', 'ARM64', fleetLabel, `spark-${topology}`];
  return nonceLabel ? [...allocation, nonceLabel] : allocation;
}

/** Lookups of the dispatched run by its jobs' nonce label before the reservation fails (≈ 8 min of backoff). */
export const FIND_RUN_ATTEMPTS = 8;

/** `spark-<hostId>-<reservationId>-a<attempt>` (unique per attempt, so a retry never collides). */
export const runnerName = (hostId: string, reservationId: string, attempt: number) =>
  `spark-${hostId}-${reservationId}-a${attempt}`;

const skipped = (reason: string): SendResult => ({ result: { skipped: reason } });

/** Builds what the check-run renderer needs from the ledger. */
/** The backend a lease's agent reported with `runner_started` (issue 15 item 5), if any. */
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
  const leases = await leasesOf(svc.ledger, undefined, r.id);
  const queued =
    r.status === 'queued' ? queuedContext(await buildViews(svc.ledger), r.id) : { keptHost: null, eta: null };
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
    ...(r.status === 'queued' ? {} : { hostEvidence: await hostEvidenceOf(svc.ledger.db, r.id) }),
  };
}

/**
 * What a queued reservation's check run shows beyond its row: the host kept for it (draining or
 * held) and the start estimate. One function for the sender and the position refresh
 * (`refreshQueuedChecks`), so the refresh compares against exactly the title the sender wrote.
 */
export function queuedContext(
  views: Awaited<ReturnType<typeof buildViews>>,
  reservationId: string,
): Pick<RenderContext, 'keptHost' | 'eta'> {
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
    apply: async (tx) => {
      const cur = await getReservation(svc.ledger, tx, rid);
      if (!cur) return;
      await setCheckRunId(tx, cur, checkRunId);
      await patchMeta(tx, cur, { lastCheck });
    },
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

/**
 * Re-checks that the work is still wanted (DESIGN.md "Timings": PR open, label present, SHA
 * current) and returns why not, or null. Webhook-cached facts answer first; the API confirms.
 */
async function whyNotWanted(svc: GitHubService, r: ReservationRow, meta: GitHubMeta): Promise<string | null> {
  if (r.pr == null) return null;
  if (meta.prOpen === false) return `PR #${r.pr} was closed`;
  if (meta.currentHeadSha && meta.currentHeadSha !== r.headSha)
    return `PR #${r.pr} head moved to ${meta.currentHeadSha.slice(0, 7)}`;
  const res = await svc.client.request('GET', `/repos/${r.repo}/pulls/${r.pr}`, {
    installationId: meta.installationId,
  });
  const pr = PullRequestResource.parse(res.data);
  if (pr.state !== 'open') return `PR #${r.pr} is ${pr.state}`;
  if (pr.head.sha !== r.headSha) return `PR #${r.pr} head moved to ${pr.head.sha.slice(0, 7)}`;
  if (meta.trigger === 'label' && meta.label && !pr.labels.some((l) => l.name === meta.label))
    return `label "${meta.label}" was removed from PR #${r.pr}`;
  return null;
}

/**
 * Dispatches the workflow with the inputs its file declares (docs/adr/0131: the spec's four, and
 * the nonce where declared) and records the run it created from the dispatch answer
 * (`return_run_details`); without an id in the answer, by its jobs' nonce label through a bounded
 * `find-run` outbox row — never by its name, and no polling on a runner.
 */
const sendDispatch: Sender = async (svc, row, payload) => {
  const rid = String(payload.reservationId);
  const r = await svc.ledger.getReservation(undefined, rid);
  if (!r?.repo || !r.headSha) return skipped('reservation has no GitHub commit');
  const meta = readMeta(r);
  if (!meta) return skipped('reservation was not created by GitHub');
  if (meta.runId != null) return skipped(`run ${meta.runId} already recorded`);
  const record =
    (run: DispatchedRun, via: 'dispatch-response' | 'job-label', nonceLabel: boolean) => (tx: Tx) =>
      recordDispatchedRun(svc.ledger, tx, rid, { ...run, via, meta: { nonceLabel } }).then(() => undefined);
  // granted work: dispatched and registered at the grant, while the hosts prepare (ADR 0070)
  if (!isReleasableStatus(r.status)) {
    // an earlier attempt may have dispatched and lost the answer: record that run, so the hook
    // cancels it (ADR 0095), rather than leave it queued on GitHub
    const earlier = row.attempts > 0 && meta.nonce ? await findDispatchedRun(svc, r, meta) : null;
    if (earlier)
      return { result: { found: earlier.runId, ended: r.status }, apply: record(earlier, 'job-label', true) };
    return skipped(`reservation is ${r.status}`);
  }
  const why = await whyNotWanted(svc, r, meta);
  if (why) {
    return {
      result: { skipped: why },
      // the check run says why in words (reservations.reason)
      apply: (tx) => withdrawBeforeDispatch(svc.ledger, rid, why, tx),
    };
  }
  if (!meta.nonce) throw new GitHubError(0, `${rid} has no runner nonce; it cannot be dispatched`, false);
  // the workflow's own declared inputs decide what is sent (docs/adr/0131): GitHub refuses any
  // undeclared input, and a workflow that breaks the contract is refused here with the fix
  const contract = await readWorkflowContract(
    svc,
    r.repo,
    meta.workflow,
    meta.defaultBranch,
    meta.installationId,
  );
  if (!contract.ok)
    throw new GitHubError(
      0,
      `the workflow .github/workflows/${meta.workflow} on ${meta.defaultBranch} breaks the Spark workflow contract: ${contract.problems.join('; ')}`,
      false,
    );
  if (row.attempts > 0 && contract.nonce) {
    // an earlier attempt may have dispatched and lost the answer: never start a second run
    const earlier = await findDispatchedRun(svc, r, { ...meta, nonceLabel: true });
    if (earlier) return { result: { found: earlier.runId }, apply: record(earlier, 'job-label', true) };
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
      apply: record({ runId: direct, runAttempt: 1 }, 'dispatch-response', contract.nonce),
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
      apply: record(listed, 'job-label', true),
    };
  }
  return {
    result: { ...sent, runId: null },
    // GitHub lists a new run after a moment: look again through the outbox (bounded), not here
    apply: async (tx, now) => {
      await patchMetaOf(svc, tx, rid, { nonceLabel: true });
      await enqueue(tx, now, {
        kind: 'find-run',
        key: `find-run:${rid}`,
        reservationId: rid,
        payload: { reservationId: rid },
        notBefore: now + 2000,
      });
    },
  };
};

/** Merges `patch` into reservation `rid`'s GitHub meta inside `tx`. */
async function patchMetaOf(svc: GitHubService, tx: Tx, rid: string, patch: Partial<GitHubMeta>) {
  const cur = await getReservation(svc.ledger, tx, rid);
  if (cur) await patchMeta(tx, cur, patch);
}

/** Looks for the dispatched run by its jobs' nonce label until found, at most {@link FIND_RUN_ATTEMPTS} times. */
const sendFindRun: Sender = async (svc, row, payload) => {
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
    apply: (tx) =>
      recordDispatchedRun(svc.ledger, tx, rid, { ...run, via: 'job-label', meta: { nonceLabel: true } }).then(
        () => undefined,
      ),
  };
};

function runnersPath(svc: GitHubService, repo: string): string {
  return svc.gh.runnerScope === 'org'
    ? `/orgs/${repo.split('/')[0]}/actions/runners`
    : `/repos/${repo}/actions/runners`;
}

/** GitHub allows 10,000 JIT registrations per hour per App (DESIGN.md "Timings"). */
export const JIT_PER_HOUR = 10_000;
const JIT_BUCKET_KEY = 'github:jit_bucket';

/**
 * Takes one registration from the App-wide hourly bucket (kept in the ledger, so every
 * controller process shares it); an empty bucket defers the row to the next hour.
 */
async function takeJitToken(svc: GitHubService): Promise<void> {
  const refill = await svc.ledger.write(async (tx, now) => {
    const hour = Math.floor(now / 3_600_000);
    const mark = await svc.ledger.getMark(tx, JIT_BUCKET_KEY);
    const cur = mark ? (JSON.parse(mark) as { hour: number; used: number }) : { hour, used: 0 };
    const used = cur.hour === hour ? cur.used : 0;
    if (used >= JIT_PER_HOUR) return (hour + 1) * 3_600_000;
    await svc.ledger.setMark(tx, JIT_BUCKET_KEY, JSON.stringify({ hour, used: used + 1 }));
    return null;
  });
  if (refill != null)
    throw new GitHubError(0, `JIT registration budget (${JIT_PER_HOUR}/h per App) used up`, true, refill);
}

const sendGenerateJit: Sender = async (svc, _row, payload) => {
  const rid = String(payload.reservationId);
  const leaseId = String(payload.leaseId);
  const attempt = Number(payload.attempt ?? 0);
  const r = await svc.ledger.getReservation(undefined, rid);
  if (!r?.repo) return skipped('reservation has no repository');
  if (!isReleasableStatus(r.status)) return skipped(`reservation is ${r.status}`);
  const lease = (await svc.ledger.leasesOf(undefined, rid)).find((l) => l.id === leaseId);
  if (lease?.status !== 'active') return skipped(`lease ${leaseId} is ${lease?.status ?? 'gone'}`);
  const meta = readMeta(r);
  if (!meta?.nonce)
    throw new GitHubError(0, `${rid} has no runner nonce; no runner can be registered`, false);
  // a runner exists only once its run is known, so any job on it can be checked against the run
  if (meta.runId == null)
    throw new GitHubError(0, `waiting for the dispatched run of ${rid} to be identified`, true);
  const name = runnerName(lease.hostId, rid, attempt);
  // the nonce label only where the dispatched workflow asks for it (docs/adr/0131); else the
  // allocation labels alone, and a job of another run on the runner is stopped as foreign
  const labels = runnerLabels(
    fleetLabelOf(svc.config, r.pool),
    r.topology,
    meta.nonceLabel === false ? null : reservationLabel(rid, meta.nonce),
  );
  const inst = meta?.installationId ?? null;
  await takeJitToken(svc);
  let res: { data: { runner: { id: number; name: string }; encoded_jit_config: string } };
  try {
    res = await svc.client.request('POST', `${runnersPath(svc, r.repo)}/generate-jitconfig`, {
      body: { name, runner_group_id: runnerGroupIdOf(svc.config), labels, work_folder: '_work' },
      installationId: inst,
    });
  } catch (e) {
    if (e instanceof GitHubError && e.status === 409) {
      // a runner with this name exists: an earlier attempt's response was lost. Remove it and
      // register again on the next try, so the config we hand over is one we actually hold.
      const list = await svc.client.request<{ runners: { id: number; name: string }[] }>(
        'GET',
        `${runnersPath(svc, r.repo)}?name=${encodeURIComponent(name)}`,
        { installationId: inst },
      );
      for (const old of list.data.runners.filter((x) => x.name === name)) {
        await svc.client.request('DELETE', `${runnersPath(svc, r.repo)}/${old.id}`, { installationId: inst });
      }
      throw new GitHubError(409, `runner ${name} already existed; removed, registering again`, true);
    }
    throw e;
  }
  const runnerId = res.data.runner.id;
  const jitConfig = res.data.encoded_jit_config;
  return {
    // never the config itself: results are stored and may be shown to operators
    result: { runnerId, runnerName: name, attempt },
    apply: async (tx, now, changed) => {
      await recordRunnerRegistration(svc.ledger, tx, now, {
        runnerName: name,
        leaseId,
        reservationId: rid,
        hostId: lease.hostId,
        attempt,
        runnerId,
        jitConfig,
      });
      const cur = await getReservation(svc.ledger, tx, rid);
      if (cur && !isReleasableStatus(cur.status)) {
        // released while we were registering: the runner must go again, config never handed out
        await withholdJitConfigs(tx, { runnerName: name });
        await enqueueRunnerDeletes(tx, now, cur);
      }
      changed.add(`host:${lease.hostId}`);
    },
  };
};

/**
 * Mints a CI task's credential (issue 15, ADR 0110): a GitHub App installation token scoped to the
 * reservation's one repository with `contents: read` only (REST "Create an installation access
 * token for an app": `repositories` names, `permissions`), asked outside any write transaction,
 * stored as the lease's one-time hand-over and never put in a result, an event or a log.
 */
const sendMintCloneToken: Sender = async (svc, _row, payload) => {
  const rid = String(payload.reservationId);
  const leaseId = String(payload.leaseId);
  const r = await svc.ledger.getReservation(undefined, rid);
  if (!r?.repo) return skipped('reservation has no repository');
  if (!isReleasableStatus(r.status)) return skipped(`reservation is ${r.status}`);
  const lease = (await svc.ledger.leasesOf(undefined, rid)).find((l) => l.id === leaseId);
  if (lease?.status !== 'active') return skipped(`lease ${leaseId} is ${lease?.status ?? 'gone'}`);
  const meta = readMeta(r);
  if (!meta) return skipped('reservation was not created by GitHub');
  // the task's stand-in for the dispatch re-check (DESIGN.md "Timings"): PR open, label, SHA current
  const why = await whyNotWanted(svc, r, meta);
  if (why)
    return { result: { skipped: why }, apply: (tx) => withdrawBeforeDispatch(svc.ledger, rid, why, tx) };
  const inst = meta.installationId ?? null;
  if (inst == null)
    throw new GitHubError(
      0,
      `${r.repo} has no App installation recorded; enable the repository again`,
      false,
    );
  const name = r.repo.split('/')[1]!;
  const res = await svc.client.request<{
    token: string;
    expires_at: string;
    permissions?: Record<string, string>;
    repository_selection?: string;
    repositories?: { full_name: string }[];
  }>('POST', `/app/installations/${inst}/access_tokens`, {
    as: 'app',
    body: { repositories: [name], permissions: { contents: 'read' } },
  });
  // fail closed (docs/github-app.md): the task runs the PR's code, so the token must be exactly
  // what was asked — `contents: read` (metadata: read is implied) on this one repository, as GitHub
  // answers it (REST "Create an installation access token for an app": permissions,
  // repository_selection, repositories). Anything broader or unstated is revoked and refused.
  const broader = cloneTokenBroaderThanAsked(res.data, r.repo);
  if (broader) {
    const revoked = await revokeToken(svc, res.data.token);
    throw new GitHubError(
      0,
      `the clone token GitHub minted for ${r.repo} is broader than contents: read on that repository (${broader}); ${revoked}; refusing to hand it out`,
      false,
    );
  }
  const taskName = runnerName(lease.hostId, rid, 0);
  const cloneToken = res.data.token;
  return {
    result: { taskName, expiresAt: res.data.expires_at },
    apply: async (tx, now, changed) => {
      await recordTaskCredential(svc.ledger, tx, now, {
        taskName,
        leaseId,
        reservationId: rid,
        hostId: lease.hostId,
        cloneToken,
        repo: r.repo!,
        expiresAt: res.data.expires_at ?? null,
      });
      const cur = await getReservation(svc.ledger, tx, rid);
      // released while GitHub answered: the token is never handed out
      if (cur && !isReleasableStatus(cur.status)) await withholdJitConfigs(tx, { runnerName: taskName });
      changed.add(`host:${lease.hostId}`);
    },
  };
};

/**
 * Why a clone token's answer is broader than `contents: read` on `repo`, or null when it is
 * exactly that. A missing field counts as broader: the answer must state what the token opens.
 */
export function cloneTokenBroaderThanAsked(
  answer: {
    permissions?: Record<string, string>;
    repository_selection?: string;
    repositories?: { full_name: string }[];
  },
  repo: string,
): string | null {
  const why: string[] = [];
  if (answer.repository_selection !== 'selected')
    why.push(`repository_selection ${JSON.stringify(answer.repository_selection ?? null)}`);
  const repos = (answer.repositories ?? []).map((x) => x.full_name.toLowerCase());
  if (repos.length !== 1 || repos[0] !== repo.toLowerCase())
    why.push(`repositories ${repos.length ? repos.join(', ') : 'not listed'}`);
  const perms = answer.permissions;
  const extra = Object.entries(perms ?? {}).filter(
    ([k, v]) => !((k === 'contents' || k === 'metadata') && v === 'read'),
  );
  if (perms?.contents !== 'read') why.push('no contents: read stated');
  if (extra.length) why.push(extra.map(([k, v]) => `${k}: ${v}`).join(', '));
  return why.length ? why.join('; ') : null;
}

/** Revokes an installation token with itself (REST "Revoke an installation access token"); says how it went. */
async function revokeToken(svc: GitHubService, token: string): Promise<string> {
  try {
    await svc.client.request('DELETE', '/installation/token', { token });
    return 'it was revoked';
  } catch (e) {
    svc.log.warn('revoking a refused clone token failed', {
      error: e instanceof GitHubError ? e.message : String(e),
    });
    return `revoking it failed (${e instanceof GitHubError ? e.status : 'error'}); it expires within the hour`;
  }
}

const sendDeleteRunner: Sender = async (svc, _row, payload) => {
  const name = String(payload.runnerName);
  const repo = String(payload.repo);
  const runnerId = Number(payload.runnerId);
  try {
    await svc.client.request('DELETE', `${runnersPath(svc, repo)}/${runnerId}`, {
      installationId: (payload.installationId as number | null) ?? null,
    });
  } catch (e) {
    // 404: already gone (a JIT runner deregisters itself after its one job)
    if (!(e instanceof GitHubError && e.status === 404)) {
      // 422 = the runner is busy with its job; GitHub refuses until the job ends, so retry
      if (e instanceof GitHubError && e.status === 422)
        throw new GitHubError(422, `runner ${name} is busy; deletion retried later`, true, e.retryAt);
      throw e;
    }
  }
  return {
    result: { deleted: name },
    apply: (tx, now) => markRunnerDeleted(tx, now, name),
  };
};

/**
 * Cancels the admitted workflow run of a reservation that ended before its job did (ADR 0090,
 * 0095: a foreign job took its runner, preparation failed, the runner was not picked up, the
 * work was released or its pair lost a node): its job can never run on a runner of ours now, and
 * left alone it would stay queued on GitHub for 24 h. GitHub answers 202 when the cancellation is accepted and 409 when the run can
 * no longer be cancelled (it completed meanwhile): a definitive answer, recorded as the row's
 * result and never retried (REST "Cancel a workflow run").
 */
const sendCancelRun: Sender = async (svc, _row, payload) => {
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

// queued by the ledger's own commands in their transactions (docs/adr/0220-one-ledger-front-door.md)
export { cancelRunKey, enqueueRunCancel, enqueueRunnerDeletes } from '../ledger/github.ts';

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
