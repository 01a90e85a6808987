import { createSign } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PERMISSIONS_SOURCE } from '../../scripts/sim/fake-github/permissions.ts';
import { type FakeGitHub, startFakeGitHub } from '../../scripts/sim/fake-github/server.ts';
import { loadWorkflow } from '../../scripts/sim/fake-github/workflows.ts';

/**
 * The fake GitHub's App permissions and Actions rules (server.ts `DOC`, permissions.ts), spoken to
 * over real HTTP as a client would. A refusal for a missing permission is also a violation (a
 * controller that sends it is broken), so each test that provokes one takes exactly those out.
 */

const NONCE = '0123456789abcdef01';
const SPEC_WORKFLOW = readFileSync(
  join(import.meta.dirname, '..', 'fixtures', 'workflows', 'spec-spark-pr-test.yml'),
  'utf8',
);

let gh: FakeGitHub;
const now = Date.UTC(2026, 10, 30, 12, 0, 0);

async function start(manifest?: string) {
  gh = await startFakeGitHub(manifest ? { manifest } : {});
  gh.clock = () => now;
  gh.addRepo('acme/butter', { installationId: 77 });
  gh.addRepo('acme/iron', { installationId: 77 });
}
beforeEach(() => start());
afterEach(async () => {
  expect(gh.violations).toEqual([]);
  await gh.close();
});

const jwt = () => {
  const enc = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const claims = { iss: gh.appId, iat: Math.floor(now / 1000) - 30, exp: Math.floor(now / 1000) + 540 };
  const body = `${enc({ alg: 'RS256', typ: 'JWT' })}.${enc(claims)}`;
  return `Bearer ${body}.${createSign('RSA-SHA256').update(body).sign(gh.privateKey).toString('base64url')}`;
};

async function call(method: string, path: string, auth: string | null, body?: unknown) {
  const res = await fetch(`${gh.url}${path}`, {
    method,
    headers: { ...(auth ? { authorization: auth } : {}), 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

async function mint(ask?: unknown) {
  const r = await call('POST', '/app/installations/77/access_tokens', jwt(), ask);
  return r;
}
const tokenOf = (r: { body: { token: string } }) => `token ${r.body.token}`;
/** Takes the permission refusals out of the violations, for a test that provoked them on purpose. */
const takeForbidden = () => {
  const mine = gh.violations.filter((v) => v.startsWith('permission: '));
  gh.violations = gh.violations.filter((v) => !v.startsWith('permission: '));
  return mine;
};

describe(`App permissions (DOC.permissions; ${PERMISSIONS_SOURCE})`, () => {
  it('the App holds exactly the manifest docs/github-app.md tells operators to use', () => {
    const manifest = JSON.parse(
      readFileSync(join(import.meta.dirname, '..', '..', 'docs', 'github-app-manifest.json'), 'utf8'),
    ) as { default_permissions: Record<string, string> };
    expect(gh.appPermissions).toEqual(manifest.default_permissions);
  });

  it('refuses a repository runner to that App: 403 "Resource not accessible by integration"', async () => {
    const t = tokenOf(await mint());
    const r = await call('POST', '/repos/acme/butter/actions/runners/generate-jitconfig', t, {
      name: 'x',
      runner_group_id: 1,
      labels: ['self-hosted'],
    });
    expect(r.status).toBe(403);
    expect(r.body).toMatchObject({
      message: 'Resource not accessible by integration',
      documentation_url:
        'https://docs.github.com/rest/actions/self-hosted-runners#create-configuration-for-a-just-in-time-runner-for-a-repository',
    });
    expect(gh.runners).toEqual([]);
    expect(takeForbidden()).toHaveLength(1);
    // the organization runner it does hold is registered
    const org = await call('POST', '/orgs/acme/actions/runners/generate-jitconfig', t, {
      name: 'x',
      runner_group_id: 1,
      labels: ['self-hosted'],
    });
    expect(org.status).toBe(201);
  });

  it('the repository-scope manifest holds Administration, so repository runners register', async () => {
    await gh.close();
    await start('docs/github-app-manifest.repo-scope.json');
    expect(gh.appPermissions.administration).toBe('write');
    expect(gh.appPermissions.organization_self_hosted_runners).toBeUndefined();
    const t = tokenOf(await mint());
    const r = await call('POST', '/repos/acme/butter/actions/runners/generate-jitconfig', t, {
      name: 'x',
      runner_group_id: 1,
      labels: ['self-hosted'],
    });
    expect(r.status).toBe(201);
  });
});

describe('installation tokens narrowed (DOC.accessTokens)', () => {
  it('a token narrowed to one repository with contents: read opens nothing else', async () => {
    const minted = await mint({ repositories: ['butter'], permissions: { contents: 'read' } });
    expect(minted.status).toBe(201);
    expect(minted.body).toMatchObject({
      permissions: { contents: 'read' },
      repository_selection: 'selected',
      repositories: [{ full_name: 'acme/butter', name: 'butter' }],
    });
    const t = tokenOf(minted);
    expect((await call('GET', '/repos/acme/butter/commits/main', t)).status).toBe(200);
    // another repository of the same installation, and a check run on its own repository
    const other = await call('GET', '/repos/acme/iron/commits/main', t);
    expect(other).toMatchObject({ status: 403, body: { message: 'Resource not accessible by integration' } });
    const check = await call('POST', '/repos/acme/butter/check-runs', t, {
      name: 'x',
      head_sha: 'a'.repeat(40),
    });
    expect(check.status).toBe(403);
    expect(gh.checkRuns).toEqual([]);
    expect(takeForbidden()).toHaveLength(2);
  });

  it('narrows by repository_ids too, and refuses more than the App holds (422)', async () => {
    const iron = gh.repos.get('acme/iron')!;
    const byId = await mint({ repository_ids: [iron.id] });
    expect(byId.body.repositories.map((r: { id: number }) => r.id)).toEqual([iron.id]);
    expect(byId.body.permissions).toEqual(gh.appPermissions);
    const more = await mint({ permissions: { contents: 'write' } });
    expect(more).toMatchObject({
      status: 422,
      body: { message: 'The permissions requested are not granted to this installation.' },
    });
    const absent = await mint({ permissions: { administration: 'read' } });
    expect(absent.status).toBe(422);
    const outside = await mint({ repositories: ['elsewhere'] });
    expect(outside.status).toBe(422);
  });

  it('an unnarrowed token reports every App permission and the installation selection', async () => {
    const r = await mint();
    expect(r.body).toMatchObject({ permissions: gh.appPermissions, repository_selection: 'all' });
    expect(r.body.repositories).toBeUndefined();
  });
});

describe('runner scope (DOC.runnerScope, DOC.runnerGroups)', () => {
  const labels = ['self-hosted', 'Linux', 'ARM64', 'waffuru-spark', 'spark-single', `spark-r-1-${NONCE}`];
  async function dispatchIron(t: string) {
    const r = await call('POST', '/repos/acme/iron/actions/workflows/spark-pr-test.yml/dispatches', t, {
      ref: 'main',
      inputs: {
        reservation_id: 'r-1',
        nonce: NONCE,
        head_sha: 'b'.repeat(40),
        topology: 'single',
        suite: 'smoke',
      },
    });
    expect(r.status).toBe(204);
  }

  it('an organization runner takes only jobs of repositories its runner group selects', async () => {
    const t = tokenOf(await mint());
    gh.addRunnerGroup(2, 'spark', 'selected', ['acme/butter']);
    await dispatchIron(t);
    const reg = (name: string, group: number) =>
      call('POST', '/orgs/acme/actions/runners/generate-jitconfig', t, {
        name,
        runner_group_id: group,
        labels,
      });
    await reg('in-spark-group', 2);
    expect(gh.pickUp('in-spark-group')).toBeNull();
    gh.addToRunnerGroup(2, 'acme/iron');
    expect(gh.pickUp('in-spark-group')).toMatchObject({ repo: 'acme/iron', runnerName: 'in-spark-group' });
  });

  it('a repository runner takes only its own repository’s jobs', async () => {
    await gh.close();
    await start('docs/github-app-manifest.repo-scope.json');
    const t = tokenOf(await mint());
    await dispatchIron(t);
    await call('POST', '/repos/acme/butter/actions/runners/generate-jitconfig', t, {
      name: 'butter-runner',
      runner_group_id: 1,
      labels,
    });
    expect(gh.pickUp('butter-runner')).toBeNull();
    await call('POST', '/repos/acme/iron/actions/runners/generate-jitconfig', t, {
      name: 'iron-runner',
      runner_group_id: 1,
      labels,
    });
    expect(gh.pickUp('iron-runner')).toMatchObject({ repo: 'acme/iron' });
  });
});

describe("each repository's own workflow files (DOC.dispatchApi, DOC.contents)", () => {
  it('checks a dispatch against that repository’s declared inputs: the spec’s four-input workflow', async () => {
    gh.repos.get('acme/iron')!.workflows['spark-pr-test.yml'] = loadWorkflow(SPEC_WORKFLOW);
    const t = tokenOf(await mint());
    const four = { reservation_id: 'r-1', head_sha: 'b'.repeat(40), topology: 'single', suite: 'smoke' };
    const fifth = await call('POST', '/repos/acme/iron/actions/workflows/spark-pr-test.yml/dispatches', t, {
      ref: 'main',
      inputs: { ...four, nonce: NONCE },
    });
    expect(fifth).toMatchObject({ status: 422, body: { message: 'Unexpected inputs provided: ["nonce"]' } });
    const bad = await call('POST', '/repos/acme/iron/actions/workflows/spark-pr-test.yml/dispatches', t, {
      ref: 'main',
      inputs: { ...four, suite: 'everything' },
    });
    expect(bad.status).toBe(422);
    const ok = await call('POST', '/repos/acme/iron/actions/workflows/spark-pr-test.yml/dispatches', t, {
      ref: 'main',
      inputs: four,
      return_run_details: true,
    });
    expect(ok.status).toBe(200);
    expect(ok.body).toMatchObject({
      workflow_run_id: gh.runs[0]!.id,
      run_url: `${gh.url}/repos/acme/iron/actions/runs/${gh.runs[0]!.id}`,
      html_url: `https://github.com/acme/iron/actions/runs/${gh.runs[0]!.id}`,
    });
    // the spec's runs-on expression yields the single label array; butter keeps the template
    expect(gh.jobs.map((j) => j.labels)).toEqual([
      ['self-hosted', 'Linux', 'ARM64', 'waffuru-spark', 'spark-single'],
    ]);
    const butter = await call(
      'POST',
      '/repos/acme/butter/actions/workflows/spark-pr-test.yml/dispatches',
      t,
      {
        ref: 'main',
        inputs: four,
      },
    );
    expect(butter.body.message).toBe(`Required input 'nonce' not provided`);
  });

  it('serves a workflow file base64-encoded on a ref; a token without contents: read gets 403', async () => {
    gh.repos.get('acme/iron')!.workflows['spark-pr-test.yml'] = loadWorkflow(SPEC_WORKFLOW);
    const t = tokenOf(await mint());
    const r = await call('GET', '/repos/acme/iron/contents/.github/workflows/spark-pr-test.yml?ref=main', t);
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({
      type: 'file',
      encoding: 'base64',
      path: '.github/workflows/spark-pr-test.yml',
    });
    expect(Buffer.from(r.body.content, 'base64').toString('utf8')).toBe(SPEC_WORKFLOW);
    expect((await call('GET', '/repos/acme/iron/contents/.github/workflows/none.yml', t)).status).toBe(404);
    expect(
      (await call('GET', '/repos/acme/iron/contents/.github/workflows/spark-pr-test.yml?ref=nope', t)).status,
    ).toBe(404);
    const checksOnly = tokenOf(await mint({ permissions: { checks: 'write' } }));
    expect(
      (await call('GET', '/repos/acme/iron/contents/.github/workflows/spark-pr-test.yml', checksOnly)).status,
    ).toBe(403);
    expect(takeForbidden()).toHaveLength(1);
  });
});
