import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { eq } from 'drizzle-orm';
import { afterEach, describe, expect, it } from 'vitest';
import { NONCE_LOST } from '../../functions/github/workflow-contract.ts';
import * as t from '../../functions/ledger/schema.ts';
import {
  type Harness,
  REPO_SCOPE_MANIFEST,
  SPARK_RUNNER_GROUP,
  startHarness,
} from '../../scripts/sim/fake-github/harness.ts';
import { loadWorkflow } from '../../scripts/sim/fake-github/workflows.ts';
import { tempDir } from '../../scripts/sim/ledger.ts';
import {
  doctorGithub,
  enableStrict,
  heartbeatAll,
  ledgerState,
  lendAndRestore,
  readyFleet,
  snapshot,
  statuses,
} from './readiness-helpers.ts';

/**
 * `enable` is a gate (docs/adr/0165-enable-is-a-gate.md), through the operator API against the
 * strict fake GitHub (every request and answer checked against GitHub's description, every call
 * against the App's permissions): each check passes and fails, each bad input gets its message,
 * a refusal changes nothing — no ledger row, no label — and an override is recorded.
 */

const REPO = 'acme/butter';
const fixture = (name: string) =>
  readFileSync(join(import.meta.dirname, '..', 'fixtures', 'workflows', name), 'utf8');
const TEMPLATE = readFileSync(
  join(import.meta.dirname, '..', '..', 'workflows-templates', 'spark-pr-test.yml'),
  'utf8',
);

let h: Harness;
afterEach(async () => {
  // nothing here may send a request the installation cannot serve, or one GitHub would reject
  expect(h.gh.forbidden).toEqual([]);
  expect(h.gh.violations).toEqual([]);
  await h.close();
});

async function refused(res: Response) {
  expect(res.status).toBe(409);
  const body = await res.json();
  expect(body.error.code).toBe('not_ready');
  return body as {
    error: { message: string };
    readiness: { ok: boolean; checks: { id: string; status: string; summary: string; fix: string | null }[] };
  };
}

const check = (body: { readiness: { checks: { id: string }[] } }, id: string) =>
  body.readiness.checks.find((c) => c.id === id) as {
    id: string;
    status: string;
    summary: string;
    fix: string;
  };

describe('enable is a gate', () => {
  it('a ready repository passes every check and is enabled; the permissions are the installation’s own', async () => {
    h = await startHarness();
    h.gh.addRepo(REPO, { installationId: 9, defaultBranch: 'trunk' });
    h.gh.installationSelection.set(9, 'selected');
    await readyFleet(h.c.ledger);
    const res = await enableStrict(h, REPO, { pairEnabled: true });
    const body = await res.json();
    expect(res.status, JSON.stringify(body)).toBe(200);
    expect(statuses(body.readiness.checks)).toEqual({
      installation: 'ok',
      permissions: 'ok',
      'runner-group': 'ok',
      workflow: 'ok',
      // Issues: read only (docs/github-app-manifest.json): a maintainer creates them, exactly so
      labels: 'warn',
      hosts: 'ok',
      dstack: 'ok',
      deckard: 'ok',
    });
    expect(body).toMatchObject({
      repository: {
        fullName: REPO,
        installationId: 9,
        defaultBranch: 'trunk',
        pairEnabled: true,
        enabled: true,
      },
      overridden: [],
      labelsCreated: [],
      labelsToCreate: [
        { name: 'spark-test', color: '76b900' },
        { name: 'spark-test-long', color: '4b8b00' },
        { name: 'spark-pair-test', color: '2e5c00' },
      ],
    });
    expect(check(body, 'permissions').summary).toBe(
      'installation 9 holds Actions: write, Checks: write, Contents: read, Metadata: read, Pull requests: read, Issues: read, Organization → Self-hosted runners: write; subscribed to pull_request, issue_comment, push, workflow_job',
    );
    expect(check(body, 'runner-group').summary).toBe(
      'runner group "spark" (2) is restricted to selected repositories and includes acme/butter',
    );
    expect(check(body, 'deckard').summary).toMatch(
      /^deckard on spark-1 lent by r-1 and restored \d+ s ago \(model-ready health passed\)$/,
    );
    // the permissions were read from the installation with the App's JWT, never guessed
    const inst = h.gh.calls('GET', /^\/app\/installations\/9$/);
    expect(inst.map((r) => [r.status, r.auth])).toEqual([[200, 'app']]);
    expect(h.gh.calls('POST', /\/labels$/)).toEqual([]);
    const ev = await h.c.ledger.db.select().from(t.events).where(eq(t.events.type, 'repository.enabled'));
    expect(ev).toHaveLength(1);
    expect(ev[0]).toMatchObject({
      subjectId: REPO,
      actor: 'api:test-operator',
      cause: 'enabled by test-operator with pair tests',
    });
    expect(JSON.parse(ev[0]!.dataJson!).checks).toMatchObject({ hosts: 'ok', deckard: 'ok' });
  });

  it('refuses an unready fleet with each fix; nothing changes: no ledger row, no label', async () => {
    // an App that may create labels: a refused enable still creates none
    h = await startHarness({ manifest: 'scripts/sim/fixtures/github-apps/manifest-issues-write.json' });
    h.gh.addRepo(REPO);
    const before = await snapshot(h);
    const body = await refused(await enableStrict(h, REPO));
    expect(statuses(body.readiness.checks)).toMatchObject({
      installation: 'ok',
      'runner-group': 'ok',
      workflow: 'ok',
      labels: 'ok',
      hosts: 'fail',
      deckard: 'fail',
    });
    expect(check(body, 'hosts')).toEqual({
      id: 'hosts',
      status: 'fail',
      summary:
        'spark-1 is not adopted; spark-1 never sent a heartbeat; spark-2 is not adopted; spark-2 never sent a heartbeat',
      fix: 'adopt it once its agent heartbeats: sparkctl host adopt spark-1; install and start spark-agent on spark-1 with its agent token (docs/agent.md "Install"); adopt it once its agent heartbeats: sparkctl host adopt spark-2; install and start spark-agent on spark-2 with its agent token (docs/agent.md "Install")',
    });
    expect(check(body, 'deckard')).toMatchObject({
      summary: 'no restore of deckard on spark-1 verified yet: it was never lent and restored',
      fix: expect.stringMatching(/^run a restore drill: sparkctl deckard drill --host spark-1 /),
    });
    expect(body.error.message).toMatch(
      /^enable refused for acme\/butter, nothing was changed: 2 checks failed: hosts: spark-1 is not adopted.* — fix: adopt it .* \| deckard: no restore of deckard on spark-1 verified yet/,
    );
    expect(await ledgerState(h.c.ledger)).toEqual(before);
    expect(h.gh.calls('POST', /\/labels$/)).toEqual([]);
    expect(h.gh.repos.get(REPO)!.labels.size).toBe(0);

    // once the fleet is ready the same App creates the labels
    await readyFleet(h.c.ledger);
    const ok = await (await enableStrict(h, REPO)).json();
    expect(ok).toMatchObject({
      labelsCreated: ['spark-test', 'spark-test-long', 'spark-pair-test'],
      labelsToCreate: [],
    });
  });

  it('a host that never sent a heartbeat, or whose heartbeat is stale, is not ready', async () => {
    h = await startHarness();
    h.gh.addRepo(REPO);
    for (const host of h.c.ledger.config.hosts) await h.c.ledger.setManaged(host.id, true, 'test');
    let body = await refused(await enableStrict(h, REPO));
    expect(check(body, 'hosts').summary).toBe(
      'spark-1 never sent a heartbeat; spark-2 never sent a heartbeat',
    );
    await heartbeatAll(h.c.ledger);
    h.clock.advance(41_000);
    body = await refused(await enableStrict(h, REPO, { override: ['deckard'] }));
    expect(check(body, 'hosts')).toMatchObject({
      summary:
        "spark-1's last heartbeat was 41 s ago (offline after 40 s); spark-2's last heartbeat was 41 s ago (offline after 40 s)",
      fix: expect.stringContaining('check spark-agent on spark-1 (systemctl status spark-agent)'),
    });
    await heartbeatAll(h.c.ledger);
    expect((await enableStrict(h, REPO, { override: ['deckard'] })).status).toBe(200);
  });

  it('an explicit override enables past the checks it names and is recorded; the installation cannot be overridden', async () => {
    h = await startHarness();
    h.gh.addRepo(REPO);
    // naming only one of two failing checks still refuses
    const partial = await refused(await enableStrict(h, REPO, { override: ['hosts'] }));
    expect(partial.error.message).toMatch(/: 1 check failed \(1 overridden\): deckard: /);
    const res = await enableStrict(h, REPO, { override: ['hosts', 'deckard', 'workflow'] });
    const body = await res.json();
    expect(res.status).toBe(200);
    expect(body.overridden.map((o: { id: string }) => o.id)).toEqual(['hosts', 'deckard']);
    const ev = await h.c.ledger.db.select().from(t.events).where(eq(t.events.type, 'repository.enabled'));
    expect(ev[0]!.cause).toMatch(
      /^enabled by test-operator; readiness checks overridden: hosts \(spark-1 is not adopted; .*\); deckard \(no restore of deckard on spark-1 verified yet: .*\)$/,
    );
    expect(JSON.parse(ev[0]!.dataJson!).overridden.map((o: { id: string }) => o.id)).toEqual([
      'hosts',
      'deckard',
    ]);

    const bad = await enableStrict(h, REPO, { override: ['installation'] });
    expect(bad.status).toBe(400);
    expect((await bad.json()).error.message).toMatch(/override names checks among permissions, runner-group/);
  });
});

describe('bad input: a clear message, nothing changes', () => {
  it('the App is not installed on the repository', async () => {
    h = await startHarness();
    h.gh.addRepo('acme/iron');
    await readyFleet(h.c.ledger);
    const before = await snapshot(h);
    const body = await refused(await enableStrict(h, 'acme/nothing'));
    expect(check(body, 'installation')).toEqual({
      id: 'installation',
      status: 'fail',
      summary: 'the GitHub App is not installed on acme/nothing',
      fix: "install it there (the App's page → Install App → acme → Only select repositories: add acme/nothing), then run this again",
    });
    // what depends on the installation says it was not checked, and why
    expect(check(body, 'runner-group')).toMatchObject({
      status: 'fail',
      summary: 'not checked: the GitHub App is not installed on acme/nothing',
    });
    // an override cannot make up for it
    expect(
      (await h.enable('acme/nothing', { override: ['permissions', 'runner-group', 'workflow'] })).status,
    ).toBe(409);
    expect(await ledgerState(h.c.ledger)).toEqual(before);
    // only the App-JWT lookup was sent, answered 404
    expect(
      h.gh.requests.filter((r) => r.path.includes('nothing')).map((r) => [r.method, r.path, r.status]),
    ).toEqual([
      ['GET', '/repos/acme/nothing/installation', 404],
      ['GET', '/repos/acme/nothing/installation', 404],
    ]);
  });

  it('a runner group id that does not exist, one open to all repositories, one without the repository', async () => {
    h = await startHarness({ config: { github: { runnerGroupId: 9 } } });
    h.gh.addRepo(REPO);
    await readyFleet(h.c.ledger);
    const before = await snapshot(h);
    const missing = await refused(await enableStrict(h, REPO));
    expect(check(missing, 'runner-group')).toEqual({
      id: 'runner-group',
      status: 'fail',
      summary: 'runner group 9 (github.runnerGroupId) does not exist in acme',
      fix: "create a runner group for the Spark runners (acme's settings → Actions → Runner groups → New runner group, Repository access: selected repositories, add acme/butter) and set github.runnerGroupId to its id (the number in the group's URL), then restart the controller (it reads its config when it starts)",
    });
    h.gh.addRunnerGroup(9, 'Everyone', 'all');
    expect(check(await refused(await enableStrict(h, REPO)), 'runner-group').summary).toBe(
      'runner group "Everyone" (9) is open to all repositories of acme: any of them could take a Spark runner',
    );
    h.gh.addRunnerGroup(9, 'spark', 'selected', ['acme/iron']);
    const without = await refused(await enableStrict(h, REPO));
    expect(check(without, 'runner-group')).toMatchObject({
      summary:
        'runner group "spark" (9) does not include acme/butter, so its runners would never take the repository\'s jobs',
      fix: "add it: acme's settings → Actions → Runner groups → spark → Repository access: Selected repositories, with acme/butter among them",
    });
    expect(await ledgerState(h.c.ledger)).toEqual(before);
    // a group of many repositories is read page by page (100 a page): this one is on the second
    for (let i = 0; i < 120; i++) h.gh.addToRunnerGroup(9, `acme/r-${i}`);
    h.gh.addToRunnerGroup(9, REPO);
    expect((await enableStrict(h, REPO)).status).toBe(200);
    expect(
      h.gh
        .calls('GET', /runner-groups\/9\/repositories/)
        .slice(-2)
        .map((r) => r.path),
    ).toEqual([
      '/orgs/acme/actions/runner-groups/9/repositories?per_page=100&page=1',
      '/orgs/acme/actions/runner-groups/9/repositories?per_page=100&page=2',
    ]);
  });

  it('a workflow missing a spec input, or with a required input the controller cannot fill', async () => {
    h = await startHarness();
    await readyFleet(h.c.ledger);
    const missing = TEMPLATE.replace(/\n {6}suite:\n(?: {8}.*\n)+/, '\n');
    expect(missing).not.toContain('suite:\n');
    h.gh.addRepo(REPO, { workflows: { 'spark-pr-test.yml': loadWorkflow(missing) } });
    const before = await snapshot(h);
    const a = await refused(await enableStrict(h, REPO));
    expect(check(a, 'workflow')).toEqual({
      id: 'workflow',
      status: 'fail',
      summary: '.github/workflows/spark-pr-test.yml on main breaks the workflow contract: 1 problem',
      fix: 'input `suite` is not declared: the Spark workflow contract needs reservation_id, head_sha, topology, suite (docs/github-app.md)',
    });
    const ticket = TEMPLATE.replace(
      /\n {4}inputs:\n/,
      '\n    inputs:\n      ticket:\n        description: Change ticket\n        required: true\n        type: string\n',
    );
    h.gh.repos.get(REPO)!.workflows['spark-pr-test.yml'] = loadWorkflow(ticket);
    const b = await refused(await enableStrict(h, REPO));
    expect(check(b, 'workflow').fix).toBe(
      'input `ticket` is required and the controller cannot fill it: give it a default or make it optional',
    );
    expect(await ledgerState(h.c.ledger)).toEqual(before);
    expect(h.gh.dispatches).toEqual([]);
  });

  it("the spec's four-input workflow passes with a warning: the nonce protection is lost", async () => {
    h = await startHarness();
    await readyFleet(h.c.ledger);
    h.gh.addRepo(REPO, {
      workflows: { 'spark-pr-test.yml': loadWorkflow(fixture('spec-spark-pr-test.yml')) },
    });
    const res = await enableStrict(h, REPO);
    const body = await res.json();
    expect(res.status).toBe(200);
    expect(check(body, 'workflow')).toMatchObject({ status: 'warn' });
    expect(check(body, 'workflow').summary).toContain(NONCE_LOST);
    expect(check(body, 'workflow').fix).toMatch(/declare a string input `nonce`/);
  });
});

describe('the installation’s permissions against what the runner scope needs', () => {
  it('organization runners with the repository-runner App: lacks Organization → Self-hosted runners; the group is not asked', async () => {
    h = await startHarness({ manifest: REPO_SCOPE_MANIFEST });
    h.gh.addRepo(REPO);
    await readyFleet(h.c.ledger);
    const body = await refused(await enableStrict(h, REPO));
    expect(check(body, 'permissions')).toMatchObject({
      status: 'fail',
      summary: 'the installation lacks Organization → Self-hosted runners: read and write',
      fix: expect.stringMatching(
        /^grant it in the App's settings \(Permissions & events; docs\/github-app\.md "Minimum permissions"\), then accept the new permissions on the installation on acme$/,
      ),
    });
    expect(check(body, 'runner-group').summary).toMatch(
      /^not checked: reading runner group 2 of acme needs Organization → Self-hosted runners/,
    );
    expect(h.gh.calls('GET', /runner-groups/)).toEqual([]);
  });

  it('repository runners with the organization-runner App: lacks Administration; no runner list is read', async () => {
    h = await startHarness({
      config: { github: { runnerScope: 'repo' } },
      manifest: 'docs/github-app-manifest.json',
    });
    h.gh.addRepo(REPO);
    await readyFleet(h.c.ledger);
    const body = await refused(await enableStrict(h, REPO));
    expect(check(body, 'permissions').summary).toBe('the installation lacks Administration: read and write');
    expect(check(body, 'runner-group')).toMatchObject({
      status: 'ok',
      summary:
        'repository runners (runnerScope "repo") take jobs of acme/butter only; no runner group to restrict',
    });
    expect(h.gh.calls('GET', /\/actions\/runners/)).toEqual([]);
  });

  it('an App created with too little: Actions read only, not subscribed to issue comments', async () => {
    h = await startHarness({ manifest: 'scripts/sim/fixtures/github-apps/manifest-actions-read.json' });
    h.gh.addRepo(REPO);
    await readyFleet(h.c.ledger);
    const body = await refused(await enableStrict(h, REPO));
    expect(check(body, 'permissions')).toEqual({
      id: 'permissions',
      status: 'fail',
      summary:
        'the installation lacks Actions: read and write (holds read); the App is not subscribed to issue_comment',
      fix: 'grant it in the App\'s settings (Permissions & events; docs/github-app.md "Minimum permissions"), then accept the new permissions on the installation on acme; subscribe it in the App\'s settings (Permissions & events → Subscribe to events; docs/github-app.md "Webhook events")',
    });
    // the other checks the installation's permissions do cover still ran
    expect(statuses(body.readiness.checks)).toMatchObject({ 'runner-group': 'ok', workflow: 'ok' });
  });

  it('a suspended installation: refused without asking for a token GitHub would not give', async () => {
    h = await startHarness();
    h.gh.addRepo(REPO);
    await readyFleet(h.c.ledger);
    h.gh.suspendedInstallations.set(77, '2026-12-01T10:00:00Z');
    const body = await refused(await enableStrict(h, REPO));
    expect(check(body, 'permissions')).toMatchObject({
      summary: 'the installation on acme is suspended (since 2026-12-01T10:00:00Z)',
      fix: "unsuspend it (acme's settings → GitHub Apps → Configure)",
    });
    expect(check(body, 'workflow').summary).toMatch(/^not checked: the installation on acme is suspended/);
    expect(h.gh.calls('POST', /access_tokens$/)).toEqual([]);
  });

  it('an App installed on every repository of the account is a warning, not a refusal', async () => {
    h = await startHarness();
    h.gh.addRepo(REPO);
    await readyFleet(h.c.ledger);
    const res = await enableStrict(h, REPO);
    const body = await res.json();
    expect(res.status).toBe(200);
    expect(check(body, 'permissions')).toMatchObject({
      status: 'warn',
      summary: expect.stringMatching(/but it is installed on every repository of acme$/),
      fix: expect.stringMatching(/Only select repositories\)$/),
    });
  });
});

describe('dstack enrolment where the repository’s CI runs on dstack', () => {
  const config = { repositories: { [REPO]: { executor: 'dstack' as const, ci: 'task' as const } } };

  it('fails until every host reports its fleet active, then passes; a repository on the runners does not ask', async () => {
    h = await startHarness({ config });
    h.gh.addRepo(REPO);
    h.gh.addRepo('acme/iron');
    await readyFleet(h.c.ledger);
    // the agents report no dstack section
    await heartbeatAll(h.c.ledger, () => ({ executor: 'jit-runner', dstack: null }));
    let body = await refused(await enableStrict(h, REPO));
    expect(check(body, 'dstack')).toMatchObject({
      summary: "spark-1's agent has no dstack section; spark-2's agent has no dstack section",
      fix: expect.stringMatching(
        /^add "dstack" \(url, project, tokenFile, fleet, image\) to spark-1's agent\.json/,
      ),
    });
    // a CI task needs no workflow, no runner group, no Actions
    expect(statuses(body.readiness.checks)).toMatchObject({ workflow: 'ok', 'runner-group': 'ok' });
    await heartbeatAll(h.c.ledger, (id) => ({
      executor: 'dstack',
      dstack:
        id === 'spark-2'
          ? { fleet: 'spark-2', ok: false, detail: 'dstack has no fleet "spark-2" in project main' }
          : { fleet: 'spark-1', ok: true, detail: 'fleet "spark-1" active; instance spark-1-0 idle' },
    }));
    body = await refused(await enableStrict(h, REPO));
    expect(check(body, 'dstack')).toMatchObject({
      summary: 'spark-2: dstack has no fleet "spark-2" in project main',
      fix: expect.stringMatching(
        /^enrol spark-2 in dstack: an on-prem SSH fleet "spark-2" holding only spark-2/,
      ),
    });
    await heartbeatAll(h.c.ledger, (id) => ({
      executor: 'jit-runner',
      dstack: { fleet: id, ok: true, detail: `fleet "${id}" active; instance ${id}-0 idle` },
    }));
    const ok = await (await enableStrict(h, REPO)).json();
    expect(check(ok, 'dstack')).toMatchObject({
      status: 'ok',
      summary:
        'acme/butter\'s CI runs on dstack; spark-1: fleet "spark-1" active; instance spark-1-0 idle; spark-2: fleet "spark-2" active; instance spark-2-0 idle',
    });
    const iron = await (await enableStrict(h, 'acme/iron')).json();
    expect(check(iron, 'dstack')).toMatchObject({
      status: 'ok',
      summary: "not used: acme/iron's CI does not run on dstack (each host's own executor, none dstack)",
    });
  });
});

describe('a verified Deckard restore on the host that serves it', () => {
  it('never lent, being restored, failed past its retries, then restored', async () => {
    h = await startHarness({ config: { timings: { restoreRetries: 0 } } });
    h.gh.addRepo(REPO);
    await heartbeatAll(h.c.ledger);
    const id = await lendAndRestore(h.c.ledger, 'spark-1', { restore: false });
    let body = await refused(await enableStrict(h, REPO));
    expect(check(body, 'deckard')).toMatchObject({
      summary: `deckard on spark-1 is being restored after ${id}; its model-ready check has not passed yet`,
    });
    await h.c.ledger.recordRestore('spark-1', false, 'model-ready check: HTTP 503', 'agent:spark-1');
    body = await refused(await enableStrict(h, REPO));
    expect(check(body, 'deckard')).toMatchObject({
      // the host's note says how many attempts failed (ADR 0175), then the health output
      summary: `the restore of deckard on spark-1 after ${id} failed: deckard restore failed 1 times: model-ready check: HTTP 503`,
      fix: expect.stringMatching(
        /^repair deckard on spark-1, sparkctl host clear-quarantine spark-1, then run a restore drill: sparkctl deckard drill --host spark-1/,
      ),
    });
    await h.c.ledger.clearQuarantine('spark-1', 'test');
    await h.c.ledger.recordRestore('spark-1', true, 'model-ready check: HTTP 200', 'agent:spark-1');
    body = await (await enableStrict(h, REPO)).json();
    expect(check(body, 'deckard').status).toBe('ok');
  });
});

describe('doctor github: the same checks, read-only', () => {
  it('one repository: the checks enable would run, and nothing changes (no label, no ledger row)', async () => {
    h = await startHarness({ manifest: 'scripts/sim/fixtures/github-apps/manifest-issues-write.json' });
    h.gh.addRepo(REPO);
    const before = await snapshot(h);
    const { status, body } = await doctorGithub(h, REPO);
    expect(status).toBe(200);
    expect(body.ok).toBe(false);
    expect(statuses(body.fleet.checks)).toEqual({ hosts: 'fail', deckard: 'fail' });
    expect(body.repositories.map((r) => [r.repository, r.ok, statuses(r.checks)])).toEqual([
      [
        REPO,
        true,
        {
          installation: 'ok',
          permissions: 'warn',
          'runner-group': 'ok',
          workflow: 'ok',
          labels: 'ok',
          dstack: 'ok',
        },
      ],
    ]);
    // the same words as a refused enable
    const refusal = await refused(await enableStrict(h, REPO));
    expect(refusal.readiness.checks.filter((c) => c.id === 'hosts' || c.id === 'deckard')).toEqual(
      body.fleet.checks,
    );
    expect((await snapshot(h)).changes).toEqual(before.changes);
    expect((await snapshot(h)).repositories).toEqual([]);
    expect(h.gh.calls('POST', /\/labels$/)).toEqual([]);
  });

  it('every enabled repository: each one’s own checks, the fleet once; a change on GitHub shows', async () => {
    h = await startHarness();
    h.gh.addRepo(REPO);
    h.gh.addRepo('acme/iron');
    await readyFleet(h.c.ledger);
    expect((await enableStrict(h, REPO)).status).toBe(200);
    expect((await enableStrict(h, 'acme/iron')).status).toBe(200);
    let d = (await doctorGithub(h)).body;
    expect(d.ok).toBe(true);
    expect(d.repositories.map((r) => r.repository)).toEqual([REPO, 'acme/iron']);
    expect(statuses(d.fleet.checks)).toEqual({ hosts: 'ok', deckard: 'ok' });
    // an organization owner takes acme/iron out of the Spark runner group
    const g = h.gh.runnerGroups.get(2)!;
    g.repositories = g.repositories.filter((r) => r !== 'acme/iron');
    d = (await doctorGithub(h)).body;
    expect(d.ok).toBe(false);
    expect(d.repositories.map((r) => [r.repository, r.ok])).toEqual([
      [REPO, true],
      ['acme/iron', false],
    ]);
    expect(d.repositories[1]!.checks.find((c) => c.id === 'runner-group')!.summary).toMatch(
      /does not include acme\/iron/,
    );
  });
});

/** `npm run admin -- ARGS` from the repository root, as a process. */
function admin(args: string[], env: Record<string, string>) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', 'scripts/admin.ts', ...args],
      { env: { PATH: process.env.PATH ?? '', ...env }, timeout: 60_000 },
      (err, stdout, stderr) => {
        if (err && typeof err.code !== 'number') return reject(err);
        resolve({ code: err ? (err.code as number) : 0, stdout, stderr });
      },
    );
  });
}

describe('npm run admin -- check', () => {
  it('the same report from the controller’s own settings, without the API; exit 1 while a check fails, 0 once ready; --json', async () => {
    h = await startHarness();
    h.gh.addRepo(REPO);
    h.gh.installationSelection.set(77, 'selected');
    const { dir, cleanup } = tempDir('spark-admin-check-');
    try {
      const config = join(dir, 'spark.config.json');
      writeFileSync(
        config,
        JSON.stringify({ github: { apiUrl: h.gh.url, runnerGroupId: SPARK_RUNNER_GROUP } }),
      );
      const env = {
        SPARK_LEDGER_URL: h.c.ctx.settings.ledgerUrl,
        SPARK_CONFIG: config,
        SPARK_GITHUB_APP_ID: String(h.gh.appId),
        SPARK_GITHUB_PRIVATE_KEY: h.gh.privateKey,
      };
      const before = await snapshot(h);
      const bad = await admin(['check', REPO], env);
      expect(bad.stderr).toBe('');
      expect(bad.code).toBe(1);
      expect(bad.stdout).toMatch(/^fleet\n {2}fail hosts {9}spark-1 is not adopted/);
      expect(bad.stdout).toMatch(/^acme\/butter\n {2}ok {3}installation {2}installed on acme\/butter/m);
      expect(bad.stdout).toMatch(
        /^doctor github: 2 of 8 checks failed, 1 warning; enable acme\/butter would refuse$/m,
      );
      expect((await snapshot(h)).changes).toEqual(before.changes);
      await readyFleet(h.c.ledger);
      const good = await admin(['check', REPO, '--json'], env);
      expect(good.code).toBe(0);
      expect(JSON.parse(good.stdout)).toMatchObject({
        ok: true,
        repositories: [{ repository: REPO, ok: true }],
      });
      const usage = await admin(['check', 'not-a-repo'], env);
      expect(usage.code).toBe(2);
      expect(usage.stderr).toMatch(/invalid repository 'not-a-repo': expected OWNER\/NAME/);
    } finally {
      cleanup();
    }
  });
});
