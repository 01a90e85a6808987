import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { sign } from '@octokit/webhooks-methods';
import { waitFor } from '../doubles/index.ts';
import {
  example,
  installationObject,
  labelObject,
  SECRET,
  SPARK_RUNNER_GROUP,
} from '../fake-github/harness.ts';
import { type Job, startFakeGitHub } from '../fake-github/server.ts';
import type { Delivery, GitHubSim, GitHubSimOptions, JobPlan, SimJob } from './github-sim-api.ts';

export * from './github-sim-api.ts';

/**
 * GitHub, simulated for the system harness: the fake GitHub REST API (checked against GitHub's
 * OpenAPI description, scripts/sim/fake-github/server.ts), signed webhooks to the controller as GitHub
 * sends them (docs: "Validating webhook deliveries", X-Hub-Signature-256 over the raw body;
 * "Redelivering webhooks" keeps the delivery id), pull request activity, and a small GitHub
 * Actions service that hands a dispatched job to the JIT runner carrying its labels
 * (scripts/sim/harness/sim-runner.mjs) and sends the `workflow_job` queued / in_progress / completed
 * webhooks GitHub would send for it.
 */

export const REPO = 'acme/butter';
export const MAINTAINER = 'alice';

const DEFAULT_PLAN: JobPlan = {
  result: 'passed',
  exitCode: 0,
  workMs: 300,
  gates: [],
  receipt: true,
  lastLines: ['ok 1 - cuda kernels match reference', 'ok 2 - model loads from the managed cache'],
};

async function readBody(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const text = Buffer.concat(chunks).toString('utf8');
  return text ? JSON.parse(text) : null;
}

function send(res: ServerResponse, status: number, body: unknown) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

let deliverySeq = 0;

/** The default branch tip: the `head_sha` of every dispatched run and its jobs. */
export const DEFAULT_BRANCH_TIP = 'dead'.repeat(10);

/** Starts the fake GitHub with {@link REPO} (installed; {@link MAINTAINER} is an admin) and the Actions service. */
export async function startGitHubSim(opts: GitHubSimOptions): Promise<GitHubSim> {
  const note = opts.onNote ?? (() => undefined);
  const given = opts.github ?? null;
  const gh = given?.gh ?? (await startFakeGitHub(opts.latency ? { latency: opts.latency } : {}));
  /** The App whose webhook sends the deliveries: the operator's, or none (the harness's). */
  const hookApp = () => {
    if (!given) return null;
    const app = gh.apps.get(given.app() ?? Number.NaN);
    if (!app?.hookUrl || !app.webhookSecret) throw new TypeError('no App with a webhook was created yet');
    return app;
  };
  if (!given) {
    // the spec's path: an organization runner group restricted to the enabled repositories
    gh.addRunnerGroup(SPARK_RUNNER_GROUP, 'spark', 'selected');
    gh.joinRunnerGroup = SPARK_RUNNER_GROUP;
  }
  const repoState =
    (given && gh.repos.get(REPO)) ||
    gh.addRepo(REPO, {
      installationId: 77,
      collaborators: { [MAINTAINER]: 'admin', mallory: 'read' },
      // the default branch tip differs from every PR commit the tests use, so a controller that
      // matched jobs by the run's head_sha (the tip, for workflow_dispatch) could not pass
      headSha: DEFAULT_BRANCH_TIP,
    });
  const jobs: SimJob[] = [];
  const jitConfigsSeen: string[] = [];
  const deliveries: Delivery[] = [];
  const failed = new Map<string, { event: string; body: string }>();

  // ------------------------------------------------------------ webhooks

  const deliverRaw = async (
    id: string,
    event: string,
    body: string,
    redelivery = false,
  ): Promise<Delivery> => {
    let d: Delivery;
    const app = hookApp();
    // an App's webhook gets only the events it subscribes to, and a repository's events only
    // where the App is installed (https://docs.github.com/en/webhooks/types-of-webhooks: "A
    // webhook can only access events that are available in the … GitHub App where it is
    // installed"): anything else is never sent
    if (app && (!app.events.includes(event) || gh.appOfInstallation(repoState.installationId) !== app.id)) {
      d = {
        id,
        event,
        status: 0,
        result: `not sent: ${app.name} is not installed on ${REPO} or not subscribed to ${event}`,
      };
      deliveries.push(d);
      return d;
    }
    try {
      const res = await fetch(app?.hookUrl ?? `${opts.controllerUrl}/github/webhooks`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-github-event': event,
          'x-github-delivery': id,
          'x-hub-signature-256': await sign(app?.webhookSecret ?? SECRET, body),
        },
        body,
        signal: AbortSignal.timeout(10_000),
      });
      const text = await res.text();
      let result: string | null = null;
      try {
        result = (JSON.parse(text) as { result?: string }).result ?? null;
      } catch {
        result = text.slice(0, 200);
      }
      d = { id, event, status: res.status, result };
      if (res.status === 202 && sim.processed) {
        const lookup = sim.processed;
        // acknowledged is delivered, as far as GitHub is concerned: a slow inbox is a result, not a failure
        d.result = await waitFor(
          `delivery ${id} (${event}) to be processed`,
          async () => {
            const p = await lookup(id);
            return p && p.state !== 'pending' ? p : null;
          },
          // a claim left by a killed controller expires after INBOX_CLAIM_MS (20 s)
          60_000,
          25,
        ).then(
          (p) => p.result,
          (e: Error) => `not processed: ${e.message}`,
        );
      }
    } catch (e) {
      // what GitHub shows as a failed delivery: the controller did not answer
      // with fetch's cause ("fetch failed" alone does not say refused, reset or timed out)
      const cause = (e as { cause?: { code?: string; message?: string } }).cause;
      const why = cause ? ` (${[cause.code, cause.message].filter(Boolean).join(' ')})` : '';
      d = { id, event, status: 0, result: `not delivered: ${(e as Error).message}${why}` };
    }
    if (d.status >= 200 && d.status < 300) failed.delete(id);
    else failed.set(id, { event, body });
    // the App's delivery log, which the controller reads to ask for redeliveries (ADR 0091)
    let action: string | null = null;
    try {
      action = (JSON.parse(body) as { action?: string }).action ?? null;
    } catch {
      action = null;
    }
    gh.recordHookDelivery({
      guid: id,
      event,
      action,
      redelivery,
      statusCode: d.status,
      body,
      ...(app ? { appId: app.id } : {}),
    });
    deliveries.push(d);
    note(`github → controller: ${event} ${d.status ? d.status : 'refused'} ${d.result ?? ''}`.trim());
    return d;
  };
  gh.redeliver = async (d) => {
    note(`GitHub: redelivery of ${d.event} ${d.guid} requested`);
    await deliverRaw(d.guid, d.event, d.body, true);
  };
  // every payload is checked against GitHub's webhook description before it is sent (a payload
  // GitHub would not send is the fake's violation); a redelivery resends a checked body. GitHub
  // delivers it its modelled delay after the event (`latency`; none by default)
  const deliver = async (event: string, payload: unknown, id?: string, due?: number) => {
    gh.checkWebhook(event, payload);
    const wait = (due ?? Date.now() + gh.webhookDelayMs(event)) - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    return deliverRaw(id ?? `sys-${process.pid}-${++deliverySeq}`, event, JSON.stringify(payload));
  };

  // ------------------------------------------------------------ GitHub Actions

  // GitHub sends each job's workflow_job webhooks as the fake's Actions service moves it: queued
  // with its run (at dispatch, before any runner exists), in_progress at pickup, completed when it
  // ends or a cancellation ends it. One at a time, in the order GitHub sent them, each its
  // modelled delay after its event.
  let webhooks: Promise<unknown> = Promise.resolve();
  gh.onWorkflowJob = (j: Job, action) => {
    const due = Date.now() + gh.webhookDelayMs('workflow_job');
    const p = example('workflow_job', action);
    p.repository.full_name = j.repo;
    p.repository.name = j.repo.split('/')[1];
    p.installation = installationObject(repoState.installationId);
    Object.assign(p.workflow_job, {
      id: j.id,
      run_id: j.runId,
      head_sha: j.headSha,
      head_branch: j.headBranch,
      status: action,
      conclusion: action === 'completed' ? j.conclusion : null,
      labels: [...j.labels],
      runner_id: action === 'queued' ? null : j.runnerId,
      runner_name: action === 'queued' ? null : j.runnerName,
      html_url: `https://github.com/${j.repo}/actions/runs/${j.runId}/job/${j.id}`,
    });
    note(
      `GitHub Actions: job ${j.id} (run ${j.runId}) ${action}${action === 'completed' ? `: ${j.conclusion}` : ''}`,
    );
    webhooks = webhooks.then(() => deliver('workflow_job', p, undefined, due));
  };
  // Without modelled latency the Actions service answers the runner only once the webhook of its
  // move was delivered, so a test sees the controller's reaction in a fixed order; with latency a
  // runner goes on at once, as a real one does, and the webhook arrives when GitHub delivers it.
  const delivered = () => (gh.latency ? Promise.resolve() : webhooks);

  const actions: Server = createServer((req, res) => {
    void (async () => {
      const url = new URL(req.url ?? '/', 'http://x');
      if (req.method === 'POST' && url.pathname === '/runner/acquire') {
        const b = (await readBody(req)) as { jitConfig: string; pid: number; hostId: string };
        const runner = gh.runners.find((r) => r.encodedJitConfig === b.jitConfig);
        if (!runner) return send(res, 401, { message: 'this runner is not registered (JIT config unknown)' });
        if (!jitConfigsSeen.includes(b.jitConfig)) jitConfigsSeen.push(b.jitConfig);
        const existing = jobs.find((j) => j.runnerName === runner.name);
        if (existing) return send(res, 200, existing);
        // GitHub hands the runner the oldest queued job whose runs-on labels it carries (the
        // fake's dispatch queued the run's jobs); none yet: a real runner just keeps listening
        const taken = gh.pickUp(runner.name);
        const run = taken ? gh.runs.find((r) => r.id === taken.runId) : undefined;
        if (!taken || !run) return send(res, 202, { waiting: true });
        // a run the controller did not dispatch (a test's foreign workflow) has no Spark inputs:
        // its job runs in the environment of the reservation whose runner it took
        const foreign = !run.inputs.reservation_id;
        const rid = run.inputs.reservation_id ?? /-(r-\d+)-a\d+$/.exec(runner.name)?.[1];
        const dispatch = foreign
          ? gh.dispatches.find((d) => d.inputs.reservation_id === rid)
          : { repo: run.repo, inputs: run.inputs };
        if (!rid || !dispatch) return send(res, 202, { waiting: true });
        const job: SimJob = {
          id: taken.id,
          runId: taken.runId,
          reservationId: rid,
          hostId: b.hostId,
          runnerName: runner.name,
          headSha: dispatch.inputs.head_sha!,
          runHeadSha: taken.headSha,
          repo: dispatch.repo,
          topology: dispatch.inputs.topology!,
          suite: dispatch.inputs.suite!,
          pid: b.pid,
          seenAt: Date.now(),
          plan: {
            ...DEFAULT_PLAN,
            ...(opts.plan?.({
              reservationId: rid,
              hostId: b.hostId,
              headSha: dispatch.inputs.head_sha!,
              runnerName: runner.name,
            }) ?? {}),
            // the foreign job keeps the runner until someone stops it
            ...(foreign ? { gates: ['work' as const] } : {}),
          },
          labels: [...taken.labels],
          gates: new Set(),
          conclusion: null,
        };
        jobs.push(job);
        note(
          `GitHub Actions: ${foreign ? `FOREIGN job ${job.id} (run ${run.id})` : `job ${job.id} of ${rid}`} assigned to runner ${runner.name}`,
        );
        // the pickup's in_progress webhook reaches the controller before the runner starts the job
        await delivered();
        return send(res, 200, job);
      }
      const gate = /^\/jobs\/(\d+)\/gates\/(work|exit)$/.exec(url.pathname);
      if (req.method === 'GET' && gate) {
        const job = jobs.find((j) => j.id === Number(gate[1]));
        return send(res, job ? 200 : 404, { open: job?.gates.has(gate[2]!) ?? false });
      }
      const done = /^\/jobs\/(\d+)\/complete$/.exec(url.pathname);
      if (req.method === 'POST' && done) {
        const job = jobs.find((j) => j.id === Number(done[1]));
        if (!job) return send(res, 404, { message: 'no such job' });
        const b = (await readBody(req)) as { conclusion: string };
        if (job.conclusion == null && gh.jobs.find((j) => j.id === job.id)?.status !== 'completed') {
          job.conclusion = b.conclusion;
          note(
            `GitHub Actions: job ${job.id} of ${job.reservationId} on ${job.hostId} completed: ${b.conclusion}`,
          );
          // a JIT runner removes itself after its one job (the fake's completeJob, DOC.jit)
          gh.completeJob(
            job.id,
            b.conclusion === 'success' ? 'success' : b.conclusion === 'cancelled' ? 'cancelled' : 'failure',
          );
          await delivered();
        }
        return send(res, 200, { ok: true });
      }
      send(res, 404, { message: 'not found' });
    })().catch((e) => send(res, 500, { message: String(e) }));
  });
  try {
    await new Promise<void>((r) => actions.listen(0, '127.0.0.1', r));
  } catch (e) {
    await gh.close();
    throw e;
  }
  const actionsUrl = `http://127.0.0.1:${(actions.address() as AddressInfo).port}`;

  // ------------------------------------------------------------ pull requests

  const prs = repoState.pulls;
  const prPayload = (action: string, n: number, sender: string) => {
    const pr = prs[n];
    if (!pr) throw new TypeError(`PR #${n} was not opened with openPr()`);
    const p = example('pull_request', action);
    p.action = action;
    p.number = n;
    p.repository.full_name = REPO;
    p.repository.name = REPO.split('/')[1];
    p.repository.default_branch = 'main';
    p.installation = installationObject(repoState.installationId);
    p.sender.login = sender;
    p.sender.type = 'User';
    p.pull_request.number = n;
    p.pull_request.state = pr.state;
    p.pull_request.labels = pr.labels.map((name, i) => labelObject(REPO, name, i + 1));
    p.pull_request.head.sha = pr.headSha;
    p.pull_request.head.ref = `topic-${n}`;
    p.pull_request.head.repo = pr.headRepo ? { ...p.pull_request.base.repo, full_name: pr.headRepo } : null;
    p.pull_request.base.ref = 'main';
    p.pull_request.base.repo = { ...p.pull_request.base.repo, full_name: REPO };
    return p;
  };

  const sim: GitHubSim = {
    processed: null,
    gh,
    repo: repoState,
    actionsUrl,
    jobs,
    deliveries,
    jitConfigsSeen,
    openPr(n, o) {
      const headRepo = o.fork ? `mallory/${REPO.split('/')[1]}` : REPO;
      prs[n] = { state: 'open', headSha: o.sha, headRepo, labels: [] };
      return { number: n, headSha: o.sha, headRepo, labels: [], state: 'open' };
    },
    async label(n, label, sender = MAINTAINER) {
      prs[n]!.labels = [...new Set([...prs[n]!.labels, label])];
      const p = prPayload('labeled', n, sender);
      p.label = labelObject(REPO, label, 99);
      return deliver('pull_request', p);
    },
    async unlabel(n, label, sender = MAINTAINER) {
      prs[n]!.labels = prs[n]!.labels.filter((l) => l !== label);
      const p = prPayload('unlabeled', n, sender);
      p.label = labelObject(REPO, label, 99);
      return deliver('pull_request', p);
    },
    async closePr(n, sender = MAINTAINER) {
      prs[n]!.state = 'closed';
      return deliver('pull_request', prPayload('closed', n, sender));
    },
    async push(n, sha, sender = MAINTAINER) {
      prs[n]!.headSha = sha;
      return deliver('pull_request', prPayload('synchronize', n, sender));
    },
    deliver,
    async redeliverFailed() {
      const out: Delivery[] = [];
      for (const [id, f] of [...failed]) out.push(await deliverRaw(id, f.event, f.body));
      return out;
    },
    openGate(reservationId, gate, hostId) {
      const js = jobs.filter((j) => j.reservationId === reservationId && (!hostId || j.hostId === hostId));
      if (!js.length) throw new TypeError(`no job of ${reservationId}${hostId ? ` on ${hostId}` : ''} yet`);
      for (const j of js) j.gates.add(gate);
    },
    checkRun(reservationId) {
      return gh.checkRuns.find((c) => c.external_id === reservationId);
    },
    waitCheck(reservationId, title, timeoutMs = 60_000) {
      return waitFor(
        `check run of ${reservationId} to read ${String(title)} (now: ${sim.checkRun(reservationId)?.output.title ?? 'none'})`,
        () => {
          const c = sim.checkRun(reservationId);
          const ti = c?.output.title ?? '';
          return c && (typeof title === 'string' ? ti === title : title.test(ti)) ? c : null;
        },
        timeoutMs,
        100,
      );
    },
    waitJob(reservationId, hostId, timeoutMs = 60_000) {
      return waitFor(
        `a job of ${reservationId}${hostId ? ` on ${hostId}` : ''}`,
        () => jobs.find((j) => j.reservationId === reservationId && (!hostId || j.hostId === hostId)),
        timeoutMs,
        100,
      );
    },
    async close() {
      actions.closeAllConnections();
      await new Promise<void>((r) => actions.close(() => r()));
      await gh.close();
    },
  };
  return sim;
}
