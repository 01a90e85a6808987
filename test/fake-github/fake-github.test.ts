import { createSign } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { workflowJobEvent } from '../../scripts/sim/fake-github/harness.ts';
import { type FakeGitHub, startFakeGitHub } from '../../scripts/sim/fake-github/server.ts';

/**
 * The fake GitHub's own behaviour, each rule as GitHub documents it (server.ts `DOC`), spoken to
 * over real HTTP exactly as a client would; every response is still validated against the
 * OpenAPI extract (`violations` stays empty).
 */

const PR_SHA = '7'.repeat(40);
const TIP = 'a'.repeat(40);
const NONCE = '0123456789abcdef01';

let gh: FakeGitHub;
let now: number;

beforeEach(async () => {
  gh = await startFakeGitHub();
  now = Date.UTC(2026, 10, 30, 12, 0, 0);
  gh.clock = () => now;
  gh.addRepo('acme/butter', { installationId: 77, headSha: TIP, collaborators: { Maintainer: 'maintain' } });
  gh.addRepo('acme/iron', { installationId: 77 });
  gh.addRepo('other/repo', { installationId: 88 });
});
afterEach(async () => {
  expect(gh.violations).toEqual([]);
  await gh.close();
});

function jwt(claims: Record<string, unknown>): string {
  const enc = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const body = `${enc({ alg: 'RS256', typ: 'JWT' })}.${enc(claims)}`;
  const sig = createSign('RSA-SHA256').update(body).sign(gh.privateKey).toString('base64url');
  return `${body}.${sig}`;
}

const validJwt = () =>
  jwt({ iss: gh.appId, iat: Math.floor(now / 1000) - 30, exp: Math.floor(now / 1000) + 540 });

async function call(method: string, path: string, auth: string | null, body?: unknown) {
  const res = await fetch(`${gh.url}${path}`, {
    method,
    headers: { ...(auth ? { authorization: auth } : {}), 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : null };
}

async function token(installation = 77): Promise<string> {
  const r = await call('POST', `/app/installations/${installation}/access_tokens`, `Bearer ${validJwt()}`);
  expect(r.status).toBe(201);
  return `token ${r.body.token as string}`;
}

const inputs = (over: Record<string, string> = {}) => ({
  reservation_id: 'r-12',
  nonce: NONCE,
  head_sha: PR_SHA,
  topology: 'single',
  suite: 'smoke',
  ...over,
});

describe('workflow_dispatch (DOC.dispatchEvent, DOC.dispatchApi)', () => {
  it('runs on the default branch tip, not on the PR commit passed as an input', async () => {
    const t = await token();
    const r = await call('POST', '/repos/acme/butter/actions/workflows/spark-pr-test.yml/dispatches', t, {
      ref: 'main',
      inputs: inputs(),
      return_run_details: true,
    });
    expect(r.status).toBe(200);
    const runId = r.body.workflow_run_id as number;
    const run = await call('GET', `/repos/acme/butter/actions/runs/${runId}`, t);
    expect(run.body).toMatchObject({
      id: runId,
      event: 'workflow_dispatch',
      head_sha: TIP,
      head_branch: 'main',
      display_title: 'Spark test r-12',
      path: '.github/workflows/spark-pr-test.yml',
    });
    expect(run.body.head_sha).not.toBe(PR_SHA);
    const jobs = await call('GET', `/repos/acme/butter/actions/runs/${runId}/jobs`, t);
    expect(
      jobs.body.jobs.map((j: { name: string; labels: string[]; head_sha: string }) => [
        j.name,
        j.labels,
        j.head_sha,
      ]),
    ).toEqual([
      [
        'Spark test (single)',
        ['self-hosted', 'Linux', 'ARM64', 'waffuru-spark', 'spark-single', `spark-r-12-${NONCE}`],
        TIP,
      ],
    ]);
    // listed among the workflow's dispatched runs, as a controller without run details looks
    const list = await call(
      'GET',
      '/repos/acme/butter/actions/workflows/spark-pr-test.yml/runs?event=workflow_dispatch',
      t,
    );
    expect(list.body.workflow_runs.map((x: { id: number }) => x.id)).toEqual([runId]);
    // a plain dispatch answers 204; a pair queues one job per node
    const pair = await call('POST', '/repos/acme/butter/actions/workflows/spark-pr-test.yml/dispatches', t, {
      ref: 'main',
      inputs: inputs({ reservation_id: 'r-13', topology: 'pair' }),
    });
    expect(pair.status).toBe(204);
    expect(
      gh.jobs
        .filter((j) => j.runId === gh.runs.find((r) => r.inputs.reservation_id === 'r-13')!.id)
        .map((j) => j.name),
    ).toEqual(['Spark test (pair, node 1)', 'Spark test (pair, node 2)']);
  });

  it('refuses an unknown workflow (404), ref, undeclared, missing or out-of-options input (422), creating no run', async () => {
    const t = await token();
    const dispatch = (workflow: string, body: unknown) =>
      call('POST', `/repos/acme/butter/actions/workflows/${workflow}/dispatches`, t, body);
    expect((await dispatch('nope.yml', { ref: 'main', inputs: inputs() })).status).toBe(404);
    const cases: [unknown, string][] = [
      [{ ref: 'feature-x', inputs: inputs() }, 'No ref found for: feature-x'],
      [{ ref: 'main', inputs: { ...inputs(), pr: '4' } }, 'Unexpected inputs provided: ["pr"]'],
      [
        {
          ref: 'main',
          inputs: { reservation_id: 'r-12', head_sha: PR_SHA, topology: 'single', suite: 'smoke' },
        },
        "Required input 'nonce' not provided",
      ],
      [
        { ref: 'main', inputs: inputs({ topology: 'triple' }) },
        "Provided value 'triple' for input 'topology' not in the list of allowed values",
      ],
    ];
    for (const [body, message] of cases) {
      const r = await dispatch('spark-pr-test.yml', body);
      expect(r.status).toBe(422);
      expect(r.body.message).toBe(message);
    }
    expect(gh.runs).toEqual([]);
    expect(gh.dispatches).toEqual([]);
    expect(gh.refused.map((x) => x.status)).toEqual([404, 422, 422, 422, 422]);
  });
});

describe('JIT runners (DOC.jit, DOC.runnerLabels)', () => {
  it('take one job whose labels they all carry (case-insensitively), then remove themselves: DELETE is 404', async () => {
    const t = await token();
    await call('POST', '/repos/acme/butter/actions/workflows/spark-pr-test.yml/dispatches', t, {
      ref: 'main',
      inputs: inputs(),
    });
    // organization runners in the "Default" group (open to every repository of acme): the
    // documented App holds organization self-hosted runners, not Administration
    const register = (name: string, labels: string[]) =>
      call('POST', '/orgs/acme/actions/runners/generate-jitconfig', t, {
        name,
        runner_group_id: 1,
        labels,
        work_folder: '_work',
      });
    const guessed = await register('spark-2-r-12-a0', [
      'self-hosted',
      'linux',
      'arm64',
      'waffuru-spark',
      'spark-single',
      'spark-r-12',
    ]);
    expect(gh.pickUp('spark-2-r-12-a0')).toBeNull();
    const ok = await register('spark-2-r-12-a1', [
      'self-hosted',
      'linux',
      'arm64',
      'WAFFURU-SPARK',
      'spark-single',
      `spark-r-12-${NONCE}`,
    ]);
    const job = gh.pickUp('spark-2-r-12-a1')!;
    expect(job).toMatchObject({ status: 'in_progress', runnerName: 'spark-2-r-12-a1', headSha: TIP });
    const busy = await call('DELETE', `/orgs/acme/actions/runners/${ok.body.runner.id}`, t);
    expect(busy.status).toBe(422);
    gh.completeJob(job.id, 'success');
    const gone = await call('DELETE', `/orgs/acme/actions/runners/${ok.body.runner.id}`, t);
    expect(gone.status).toBe(404);
    const left = await call('GET', '/orgs/acme/actions/runners', t);
    expect(left.body.runners.map((r: { id: number }) => r.id)).toEqual([guessed.body.runner.id]);
    expect(gh.runs[0]).toMatchObject({ status: 'completed', conclusion: 'success' });
    // the webhook a test sends for this job carries the run's head_sha (the branch tip), not the PR's
    const event = workflowJobEvent(job, 'completed');
    expect(event.workflow_job).toMatchObject({
      id: job.id,
      run_id: gh.runs[0]!.id,
      head_sha: TIP,
      head_branch: 'main',
      runner_name: 'spark-2-r-12-a1',
      conclusion: 'success',
      labels: ['self-hosted', 'Linux', 'ARM64', 'waffuru-spark', 'spark-single', `spark-r-12-${NONCE}`],
    });
    expect(event.repository.full_name).toBe('acme/butter');
  });
});

describe('collaborator permission (DOC.permission)', () => {
  it('answers none for an existing non-collaborator, read on a public repository, 404 only for a missing user', async () => {
    const t = await token();
    const perm = async (repo: string, user: string) =>
      call('GET', `/repos/${repo}/collaborators/${user}/permission`, t);
    expect((await perm('acme/butter', 'maintainer')).body).toMatchObject({
      permission: 'write',
      role_name: 'maintain',
    });
    expect((await perm('acme/butter', 'stranger')).body).toMatchObject({
      permission: 'none',
      role_name: 'none',
    });
    gh.repos.get('acme/iron')!.visibility = 'public';
    expect((await perm('acme/iron', 'stranger')).body).toMatchObject({ permission: 'read' });
    gh.ghostUsers.add('deleted-user');
    expect((await perm('acme/butter', 'deleted-user')).status).toBe(404);
  });
});

describe('App JWT and installation tokens (DOC.jwt, DOC.installationToken)', () => {
  it('refuses a JWT whose exp is more than 10 minutes ahead, an iat in the future, an expired one', async () => {
    const s = Math.floor(now / 1000);
    const post = (j: string) => call('POST', '/app/installations/77/access_tokens', `Bearer ${j}`);
    expect((await post(jwt({ iss: gh.appId, iat: s - 60, exp: s + 660 }))).body.message).toBe(
      "'Expiration time' claim ('exp') is too far in the future",
    );
    expect((await post(jwt({ iss: gh.appId, iat: s + 120, exp: s + 300 }))).status).toBe(401);
    expect((await post(jwt({ iss: gh.appId, iat: s - 700, exp: s - 100 }))).status).toBe(401);
    expect((await post(jwt({ iss: 1, iat: s - 30, exp: s + 300 }))).status).toBe(401);
    expect((await post(validJwt())).status).toBe(201);
    expect((await call('POST', '/app/installations/999/access_tokens', `Bearer ${validJwt()}`)).status).toBe(
      404,
    );
  });

  it('opens only its installation’s repositories and expires after one hour', async () => {
    const t = await token(77);
    expect((await call('GET', '/repos/acme/iron', t)).status).toBe(200);
    expect((await call('GET', '/repos/other/repo', t)).status).toBe(404);
    expect((await call('GET', '/orgs/other/actions/runners', t)).status).toBe(404);
    now += 3600_000;
    expect((await call('GET', '/repos/acme/iron', t)).status).toBe(401);
  });

  it('DELETE /installation/token revokes the token it is called with: 204, then 401 everywhere (DOC.revokeToken)', async () => {
    const t = await token(77);
    const other = await token(77);
    const raw = t.slice('token '.length);
    expect(gh.tokenScope(raw)).not.toBeNull();
    // GitHub accepts an installation token as `Bearer` too; it is recorded as an installation call
    const revoke = await call('DELETE', '/installation/token', `Bearer ${raw}`);
    expect(revoke).toMatchObject({ status: 204, body: null });
    expect(gh.calls('DELETE', /^\/installation\/token$/)).toMatchObject([
      { status: 204, auth: 'installation', token: raw },
    ]);
    expect((await call('GET', '/repos/acme/iron', t)).status).toBe(401);
    expect((await call('DELETE', '/installation/token', t)).status).toBe(401);
    // git over HTTP asks tokenScope: a revoked token opens nothing
    expect(gh.tokenScope(raw)).toBeNull();
    // only that token: another token of the same installation still works
    expect((await call('GET', '/repos/acme/iron', other)).status).toBe(200);
    // an unknown token, no token, or the App's JWT cannot revoke anything
    expect((await call('DELETE', '/installation/token', 'token ghs_unknown')).status).toBe(401);
    expect((await call('DELETE', '/installation/token', null)).status).toBe(401);
    expect((await call('DELETE', '/installation/token', `Bearer ${validJwt()}`)).status).toBe(401);
  });
});

describe('pagination (DOC.pagination) and labels (DOC.labels)', () => {
  it('pages list endpoints with per_page (30 by default, at most 100) and a Link header', async () => {
    const t = await token();
    for (let i = 0; i < 35; i++)
      await call('POST', '/orgs/acme/actions/runners/generate-jitconfig', t, {
        name: `r${i}`,
        runner_group_id: 1,
        labels: ['self-hosted'],
      });
    const first = await call('GET', '/orgs/acme/actions/runners', t);
    expect(first.body.total_count).toBe(35);
    expect(first.body.runners).toHaveLength(30);
    const link = first.headers.get('link')!;
    expect(link).toContain('page=2');
    expect(link).toContain('rel="next"');
    expect(link).toContain('rel="last"');
    const second = await call('GET', '/orgs/acme/actions/runners?page=2', t);
    expect(second.body.runners.map((r: { name: string }) => r.name)).toEqual([
      'r30',
      'r31',
      'r32',
      'r33',
      'r34',
    ]);
    expect(second.headers.get('link')).toContain('rel="prev"');
    const big = await call('GET', '/orgs/acme/actions/runners?per_page=500', t);
    expect(big.body.runners).toHaveLength(35);
    expect(big.headers.get('link')).toBeNull();
  });

  it('treats label names case-insensitively', async () => {
    // an App that may create labels (Issues: write), unlike the documented one
    await gh.close();
    gh = await startFakeGitHub({ manifest: 'scripts/sim/fixtures/github-apps/manifest-issues-write.json' });
    gh.clock = () => now;
    gh.addRepo('acme/butter', { installationId: 77 });
    const t = await token();
    expect((await call('POST', '/repos/acme/butter/labels', t, { name: 'spark-test' })).status).toBe(201);
    const again = await call('POST', '/repos/acme/butter/labels', t, { name: 'Spark-Test' });
    expect(again.status).toBe(422);
    expect(again.body.errors[0].code).toBe('already_exists');
  });

  it('cancels a run asynchronously: 202, the run unchanged until its jobs end cancelled; then 409', async () => {
    const t = await token();
    const events: string[] = [];
    gh.onWorkflowJob = (j, action) => events.push(`${action}:${j.conclusion ?? '-'}`);
    gh.cancelDelayMs = 60_000; // ended by settleCancellations below, not by the timer
    await call('POST', '/repos/acme/butter/actions/workflows/spark-pr-test.yml/dispatches', t, {
      ref: 'main',
      inputs: inputs(),
    });
    // GitHub reports the job queued with its run, before any runner exists (DOC.workflowJobEvent)
    expect(events).toEqual(['queued:-']);
    const run = gh.runs[0]!;
    expect((await call('POST', `/repos/acme/butter/actions/runs/${run.id}/cancel`, t)).status).toBe(202);
    // accepted, not done: the API has no "cancelling" status; the run is as it was (DOC.cancelling)
    const during = await call('GET', `/repos/acme/butter/actions/runs/${run.id}`, t);
    expect(during.body).toMatchObject({ status: 'queued', conclusion: null });
    expect(gh.jobs.map((j) => j.status)).toEqual(['queued']);
    // a cancelled run's job is never handed to a runner
    await call('POST', '/orgs/acme/actions/runners/generate-jitconfig', t, {
      name: 'late',
      runner_group_id: 1,
      labels: ['self-hosted', 'Linux', 'ARM64', 'waffuru-spark', 'spark-single', `spark-r-12-${NONCE}`],
    });
    expect(gh.pickUp('late')).toBeNull();
    gh.settleCancellations();
    expect(gh.jobs.map((j) => j.conclusion)).toEqual(['cancelled']);
    expect(events).toEqual(['queued:-', 'completed:cancelled']);
    const after = await call('GET', `/repos/acme/butter/actions/runs/${run.id}`, t);
    expect(after.body).toMatchObject({ status: 'completed', conclusion: 'cancelled' });
    expect((await call('POST', `/repos/acme/butter/actions/runs/${run.id}/cancel`, t)).status).toBe(409);
  });

  it('ends an accepted cancellation by itself shortly after', async () => {
    const t = await token();
    await call('POST', '/repos/acme/butter/actions/workflows/spark-pr-test.yml/dispatches', t, {
      ref: 'main',
      inputs: inputs(),
    });
    const run = gh.runs[0]!;
    expect((await call('POST', `/repos/acme/butter/actions/runs/${run.id}/cancel`, t)).status).toBe(202);
    for (let i = 0; i < 200 && run.status !== 'completed'; i++) await new Promise((r) => setTimeout(r, 10));
    expect(run).toMatchObject({ status: 'completed', conclusion: 'cancelled' });
  });
});
