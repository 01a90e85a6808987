import { randomBytes } from 'node:crypto';
import { DOC, type Job, type Runner, type WorkflowRun } from './model.ts';
import { exampleOf, overlay } from './schema.ts';
import type { WorkflowDef } from './workflows.ts';
import type { GitHubWorld, RestHandler } from './world.ts';

/**
 * The fake GitHub's Actions area: workflow dispatch, runs and jobs, cancellation, JIT runners,
 * runners and runner groups. server.ts authenticates each call and dispatches it here by
 * `method path`.
 */

/** POST /repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches */
const dispatchWorkflow: RestHandler = (w, c) => {
  const { send, notFound, full, params, body, repo } = c;
  if (!repo) return notFound();
  const b = body as { ref: string; inputs?: Record<string, unknown>; return_run_details?: boolean };
  const wf = repo.workflows[params.workflow_id!];
  if (!wf) return notFound();
  const refused = (message: string) => send(422, { message, documentation_url: DOC.dispatchApi });
  // the run is created on the tip of the dispatched ref, whatever the inputs say (DOC.dispatchEvent)
  const branch = String(b.ref ?? '').replace(/^refs\/heads\//, '');
  const tip = branch === repo.defaultBranch ? repo.headSha : repo.branches[branch];
  if (!tip) return refused(`No ref found for: ${b.ref}`);
  const given = b.inputs ?? {};
  const unexpected = Object.keys(given).filter((k) => !(k in wf.inputs));
  if (unexpected.length) return refused(`Unexpected inputs provided: ${JSON.stringify(unexpected)}`);
  const inputs: Record<string, string> = {};
  for (const [name, def] of Object.entries(wf.inputs)) {
    const v = name in given ? String(given[name]) : def.default;
    if (v == null || (def.required && v === '')) return refused(`Required input '${name}' not provided`);
    if (def.options && !def.options.includes(v))
      return refused(`Provided value '${v}' for input '${name}' not in the list of allowed values`);
    inputs[name] = v;
  }
  const full_name = `${params.owner}/${params.repo}`;
  w.dispatches.push({ repo: full_name, workflow: params.workflow_id!, ref: b.ref, inputs });
  const run = createRun(w, full_name, params.workflow_id!, wf, branch, tip, inputs);
  if (b.return_run_details) {
    return send(
      200,
      full(
        {
          workflow_run_id: run.id,
          run_url: `${w.url}/repos/${full_name}/actions/runs/${run.id}`,
          html_url: `https://github.com/${full_name}/actions/runs/${run.id}`,
        },
        200,
      ),
    );
  }
  return send(204, null);
};

/** POST /repos/{owner}/{repo}/actions/runners/generate-jitconfig · POST /orgs/{org}/actions/runners/generate-jitconfig */
const generateJitConfig: RestHandler = (w, c) => {
  const { send, notFound, full, params, body, repo } = c;
  const scope = params.org ? `org:${params.org}` : `repo:${params.owner}/${params.repo}`;
  if (!params.org && !repo) return notFound();
  const b = body as { name: string; labels: string[]; runner_group_id: number };
  if (w.runners.some((r) => r.name === b.name && r.scope === scope))
    return send(409, {
      message: 'Already exists - A runner with the same name already exists',
      documentation_url: 'x',
    });
  const runner: Runner = {
    id: w.nextId++,
    name: b.name,
    labels: b.labels,
    scope,
    runnerGroupId: b.runner_group_id,
    busy: false,
    encodedJitConfig: `JITCONFIG-SECRET-${randomBytes(16).toString('hex')}`,
    jobId: null,
  };
  w.runners.push(runner);
  return send(
    201,
    full(
      {
        runner: {
          id: runner.id,
          name: runner.name,
          os: 'linux',
          status: 'offline',
          busy: false,
          labels: runner.labels.map((name) => ({ name, type: 'custom' })),
        },
        encoded_jit_config: runner.encodedJitConfig,
      },
      201,
    ),
  );
};

/** DELETE /repos/{owner}/{repo}/actions/runners/{runner_id} · DELETE /orgs/{org}/actions/runners/{runner_id} */
const deleteRunner: RestHandler = (w, c) => {
  const { send, notFound, params } = c;
  const scope = params.org ? `org:${params.org}` : `repo:${params.owner}/${params.repo}`;
  const i = w.runners.findIndex((r) => r.id === Number(params.runner_id) && r.scope === scope);
  // a JIT runner that ran its job has removed itself: 404 (DOC.jit)
  if (i < 0) return notFound();
  if (w.runners[i]!.busy)
    return send(422, {
      message: 'Bad request - Runner is currently running a job',
      documentation_url: 'x',
    });
  w.runners.splice(i, 1);
  return send(204, null);
};

/** GET /repos/{owner}/{repo}/actions/runners · GET /orgs/{org}/actions/runners */
const listRunners: RestHandler = (w, c) => {
  const { send, notFound, full, paged, params, repo, url, op } = c;
  if (!params.org && !repo) return notFound();
  const name = url.searchParams.get('name');
  const scope = params.org ? `org:${params.org}` : `repo:${params.owner}/${params.repo}`;
  const rs = w.runners.filter((r) => r.scope === scope && (!name || r.name === name));
  const item = op.responses['200']?.properties?.runners?.items;
  const p = paged(rs);
  return send(
    200,
    full(
      {
        total_count: rs.length,
        runners: p.items.map((r) =>
          overlay(exampleOf(item), {
            id: r.id,
            name: r.name,
            busy: r.busy,
            status: r.busy ? 'online' : 'offline',
            labels: r.labels.map((l) => ({ name: l, type: 'custom' })),
          }),
        ),
      },
      200,
    ),
    p.headers,
  );
};

/** GET /orgs/{org}/actions/runner-groups/{runner_group_id} */
const getRunnerGroup: RestHandler = (w, c) => {
  const { send, notFound, full, params } = c;
  const g = w.runnerGroups.get(Number(params.runner_group_id));
  return g
    ? send(200, full({ id: Number(params.runner_group_id), name: g.name, visibility: g.visibility }, 200))
    : notFound();
};

/** GET /orgs/{org}/actions/runner-groups/{runner_group_id}/repositories */
const listRunnerGroupRepositories: RestHandler = (w, c) => {
  const { send, notFound, full, paged, params, op } = c;
  const g = w.runnerGroups.get(Number(params.runner_group_id));
  if (!g) return notFound();
  const item = op.responses['200']?.properties?.repositories?.items;
  const p = paged(g.repositories);
  return send(
    200,
    full(
      {
        total_count: g.repositories.length,
        repositories: p.items.map((full_name) => overlay(exampleOf(item), { full_name })),
      },
      200,
    ),
    p.headers,
  );
};

/** GET /repos/{owner}/{repo}/actions/runs · GET /repos/{owner}/{repo}/actions/workflows/{workflow_id}/runs */
const listRuns: RestHandler = (w, c) => {
  const { send, notFound, full, paged, params, repo, url, op } = c;
  if (!repo) return notFound();
  if (params.workflow_id && !repo.workflows[params.workflow_id]) return notFound();
  const q = url.searchParams;
  const rs = w.runs
    .filter(
      (r) =>
        r.repo.toLowerCase() === `${params.owner}/${params.repo}`.toLowerCase() &&
        (!params.workflow_id || r.workflow === params.workflow_id) &&
        (!q.get('event') || r.event === q.get('event')) &&
        (!q.get('branch') || r.headBranch === q.get('branch')) &&
        (!q.get('head_sha') || r.headSha === q.get('head_sha')) &&
        (!q.get('status') || r.status === q.get('status') || r.conclusion === q.get('status')),
    )
    .reverse(); // newest first, as GitHub lists them
  const item = op.responses['200']?.properties?.workflow_runs?.items;
  const p = paged(rs);
  return send(
    200,
    full(
      {
        total_count: rs.length,
        workflow_runs: p.items.map((r) => overlay(exampleOf(item), runBody(w, r))),
      },
      200,
    ),
    p.headers,
  );
};

/** GET /repos/{owner}/{repo}/actions/runs/{run_id} */
const getRun: RestHandler = (w, c) => {
  const { send, notFound, full, params } = c;
  const run = w.runs.find(
    (r) =>
      r.id === Number(params.run_id) &&
      r.repo.toLowerCase() === `${params.owner}/${params.repo}`.toLowerCase(),
  );
  return run ? send(200, full(runBody(w, run), 200)) : notFound();
};

/** GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs */
const listRunJobs: RestHandler = (w, c) => {
  const { send, notFound, full, paged, params, op } = c;
  const run = w.runs.find(
    (r) =>
      r.id === Number(params.run_id) &&
      r.repo.toLowerCase() === `${params.owner}/${params.repo}`.toLowerCase(),
  );
  if (!run) return notFound();
  const js = w.jobs.filter((j) => j.runId === run.id);
  const item = op.responses['200']?.properties?.jobs?.items;
  const p = paged(js);
  return send(
    200,
    full(
      {
        total_count: js.length,
        jobs: p.items.map((j) => overlay(exampleOf(item), jobBody(w, j, run))),
      },
      200,
    ),
    p.headers,
  );
};

/** POST /repos/{owner}/{repo}/actions/runs/{run_id}/cancel */
const cancelRun: RestHandler = (w, c) => {
  const { send, notFound, params } = c;
  // 202 and the run's unfinished jobs end cancelled afterwards; a completed run is a 409 (DOC.cancelRun)
  const run = w.runs.find(
    (r) =>
      r.id === Number(params.run_id) &&
      r.repo.toLowerCase() === `${params.owner}/${params.repo}`.toLowerCase(),
  );
  if (!run) return notFound();
  if (run.status === 'completed')
    return send(409, {
      message: 'Cannot cancel a workflow run that is completed.',
      documentation_url: DOC.cancelRun,
    });
  // accepted, not done: the run keeps its status until its jobs end (DOC.cancelling)
  run.cancelRequestedAt ??= w.clock();
  const timer = setTimeout(() => {
    w.cancelTimers.delete(timer);
    w.settleCancellations();
  }, w.cancelDelayMs);
  timer.unref?.();
  w.cancelTimers.add(timer);
  return send(202, {});
};

/** This area's operations, by `method path`. */
export const ACTIONS_REST: Record<string, RestHandler> = {
  'post /repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches': dispatchWorkflow,
  'post /repos/{owner}/{repo}/actions/runners/generate-jitconfig': generateJitConfig,
  'post /orgs/{org}/actions/runners/generate-jitconfig': generateJitConfig,
  'delete /repos/{owner}/{repo}/actions/runners/{runner_id}': deleteRunner,
  'delete /orgs/{org}/actions/runners/{runner_id}': deleteRunner,
  'get /repos/{owner}/{repo}/actions/runners': listRunners,
  'get /orgs/{org}/actions/runners': listRunners,
  'get /orgs/{org}/actions/runner-groups/{runner_group_id}': getRunnerGroup,
  'get /orgs/{org}/actions/runner-groups/{runner_group_id}/repositories': listRunnerGroupRepositories,
  'get /repos/{owner}/{repo}/actions/runs': listRuns,
  'get /repos/{owner}/{repo}/actions/workflows/{workflow_id}/runs': listRuns,
  'get /repos/{owner}/{repo}/actions/runs/{run_id}': getRun,
  'get /repos/{owner}/{repo}/actions/runs/{run_id}/jobs': listRunJobs,
  'post /repos/{owner}/{repo}/actions/runs/{run_id}/cancel': cancelRun,
};

function createRun(
  w: GitHubWorld,
  repo: string,
  workflow: string,
  wf: WorkflowDef,
  branch: string,
  tip: string,
  inputs: Record<string, string>,
): WorkflowRun {
  const key = `${repo.toLowerCase()}/${workflow}`;
  const runNumber = (w.runNumbers.get(key) ?? 0) + 1;
  w.runNumbers.set(key, runNumber);
  const createdAt = new Date(w.clock()).toISOString();
  const run: WorkflowRun = {
    id: w.nextId++,
    repo,
    workflow,
    name: wf.name,
    displayTitle: wf.renderRunName(inputs),
    runNumber,
    runAttempt: 1,
    event: 'workflow_dispatch',
    headSha: tip,
    headBranch: branch,
    inputs,
    status: 'queued',
    conclusion: null,
    createdAt,
  };
  w.runs.push(run);
  for (const j of wf.jobsFor(inputs)) {
    w.jobs.push({
      id: w.nextId++,
      runId: run.id,
      repo,
      name: j.name,
      labels: j.labels,
      headSha: tip,
      headBranch: branch,
      status: 'queued',
      conclusion: null,
      runnerId: null,
      runnerName: null,
      createdAt,
      startedAt: null,
      completedAt: null,
    });
  }
  // each job is queued with its run, whether or not a runner exists (DOC.workflowJobEvent)
  for (const j of w.jobs.filter((x) => x.runId === run.id)) w.onWorkflowJob?.(j, 'queued');
  return run;
}

function runBody(w: GitHubWorld, r: WorkflowRun) {
  return {
    id: r.id,
    name: r.name,
    display_title: r.displayTitle,
    run_number: r.runNumber,
    run_attempt: r.runAttempt,
    event: r.event,
    status: r.status,
    conclusion: r.conclusion,
    head_sha: r.headSha,
    head_branch: r.headBranch,
    path: `.github/workflows/${r.workflow}`,
    created_at: r.createdAt,
    updated_at: r.createdAt,
    html_url: `https://github.com/${r.repo}/actions/runs/${r.id}`,
    url: `${w.url}/repos/${r.repo}/actions/runs/${r.id}`,
    head_commit: null,
    pull_requests: [],
  };
}

function jobBody(w: GitHubWorld, j: Job, run: WorkflowRun) {
  return {
    id: j.id,
    run_id: j.runId,
    run_attempt: run.runAttempt,
    name: j.name,
    workflow_name: run.name,
    labels: j.labels,
    head_sha: j.headSha,
    head_branch: j.headBranch,
    status: j.status,
    conclusion: j.conclusion,
    runner_id: j.runnerId,
    runner_name: j.runnerName,
    runner_group_id: j.runnerId == null ? null : 1,
    runner_group_name: j.runnerId == null ? null : 'Default',
    created_at: j.createdAt,
    started_at: j.startedAt ?? j.createdAt,
    completed_at: j.completedAt,
    html_url: `https://github.com/${j.repo}/actions/runs/${j.runId}/job/${j.id}`,
    url: `${w.url}/repos/${j.repo}/actions/jobs/${j.id}`,
    run_url: `${w.url}/repos/${j.repo}/actions/runs/${j.runId}`,
  };
}
