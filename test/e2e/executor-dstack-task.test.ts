import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, type TestContext } from 'vitest';
import type { StoredReceipts } from '../../core/protocol/receipt.ts';
import {
  type DstackStandIn,
  envOf,
  MULTI_ARCH_IMAGE,
  outputOf,
  startDstackStandIn,
} from '../../scripts/sim/doubles/dstack/server.ts';
import { NO_LIVENESS_TIMINGS } from '../../scripts/sim/doubles/fleet.ts';
import { type GitServer, startGitServer } from '../../scripts/sim/doubles/git-http-server.ts';
import { waitFor } from '../../scripts/sim/doubles/index.ts';
import type { FakeGitHub } from '../../scripts/sim/fake-github/server.ts';
import { REPO } from '../../scripts/sim/harness/github-sim.ts';
import {
  FAST_TICK_MS,
  queuedId,
  type SparkSystem,
  type SystemHost,
  startSystem,
} from '../../scripts/sim/harness/system.ts';

/**
 * CI as a dstack task (ADR 0110), end to end: the real controller and agent processes,
 * the fake GitHub (no workflow is dispatched, no runner registered: the controller mints a
 * read-only installation token for the one repository), the dstack stand-in really running the
 * task on this machine, and a real git repository served over HTTP by `git http-backend` behind a
 * server that accepts only a token the fake GitHub minted for that repository with `contents:
 * read` (scripts/sim/doubles/git-http-server.ts). The task checks out exactly the admitted SHA, binds it,
 * runs the repository's scripts/ci/spark-test.sh, and the agent reports the outcome and receipt.
 */

const SCRIPT_OK = `#!/usr/bin/env bash
set -eu
echo "spark-test.sh $1 suite=$SPARK_TEST_SUITE lane=$SPARK_LANE head=$(git rev-parse HEAD)"
env | grep -c CLONE_TOKEN > "$TASK_MARKER_DIR/$SPARK_HOST_ID-token-visible" || true
date +%s%3N > "$TASK_MARKER_DIR/$SPARK_HOST_ID-script-started-ms"
# look for a token the way a hostile PR would: its own environment and every /proc/<pid>/environ it
# can read (installation tokens look like ghs_…); the test checks none of them is one of this run's
{ env; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < "$f" 2>/dev/null || true; done; } | grep -ao 'ghs_[0-9A-Za-z]*' | sort -u > "$TASK_MARKER_DIR/$SPARK_HOST_ID-tokens-seen" || true
# the control: the task's first process (dstack started it with the token in its environment; it
# is the grandparent here, through timeout) is readable, and what its environment holds now
gp=$(cut -d' ' -f4 "/proc/$PPID/stat")
tr '\\0' '\\n' < "/proc/$gp/environ" | cut -d= -f1 | sort > "$TASK_MARKER_DIR/$SPARK_HOST_ID-first-process-env" || true
echo "$(git rev-parse HEAD) $1 $SPARK_TEST_SUITE $SPARK_LANE $SPARK_LANE_TARGET_MINUTES" >> "$TASK_MARKER_DIR/$SPARK_HOST_ID-ran"
git rev-parse HEAD > "$SPARK_MODEL_CACHE/seen-by-$SPARK_HOST_ID"
if [ "$1" = pair ]; then bash "$SPARK_DISTRIBUTED_ASSERTION"; fi
sleep "\${TASK_SLEEP_S:-0}"
echo "all good on $SPARK_HOST_ID"
`;

const ASSERT_PAIR = `#!/usr/bin/env bash
echo "both hosts computed together" > "$TASK_MARKER_DIR/$SPARK_HOST_ID-asserted"
`;

const SCRIPT_FAIL = `#!/usr/bin/env bash
echo "$(git rev-parse HEAD) $1 $SPARK_TEST_SUITE" >> "$TASK_MARKER_DIR/$SPARK_HOST_ID-ran"
echo "cuda_smoke: expected 42, got 41"
exit 3
`;

interface TaskSystem {
  sys: SparkSystem;
  dstack: DstackStandIn;
  git: GitServer;
  markers: string;
}

/**
 * A system whose {@link REPO} runs CI as a dstack task, served from a local git repository. Each
 * test has its own (controller, agents, dstack stand-in, git server, dirs), so the tests run
 * concurrently: they mostly wait on processes. What was checked after each test is checked when
 * this one finishes.
 */
async function taskSystem(
  ctx: TestContext,
  hosts: SystemHost[],
  o: { shimDir?: string; sleepS?: number } = {},
): Promise<TaskSystem> {
  let sys: SparkSystem | null = null;
  let git: GitServer | null = null;
  const d = await startDstackStandIn();
  ctx.onTestFinished(async () => {
    // every request the controller made to GitHub matched GitHub's description
    const violations = sys?.gh.violations ?? [];
    await sys?.close();
    const invalid = d.invalid;
    const active = d.active().map((r) => r.name);
    await d.close();
    await git?.close();
    expect(violations).toEqual([]);
    expect(invalid).toEqual([]);
    expect(active).toEqual([]);
  });
  let gh: FakeGitHub | null = null;
  const root = mkdtempSync(join(process.env.TMPDIR ?? '/tmp', 'spark-git-'));
  git = await startGitServer(root, (token, repo) => {
    const scope = gh?.tokenScope(token);
    // GitHub's rule: the token opens only the repositories it was minted for, contents read or write
    return (
      !!scope && (scope.repositories?.includes(repo.toLowerCase()) ?? false) && !!scope.permissions.contents
    );
  });
  const g = git;
  const markers = join(root, 'markers');
  mkdirSync(markers, { recursive: true });
  const tokenFile = join(root, 'dstack-token');
  writeFileSync(tokenFile, `${d.token}\n`, { mode: 0o600 });
  sys = await startSystem({
    // only completed checks' summaries are read (see FAST_TICK_MS)
    tickMs: FAST_TICK_MS,
    hosts,
    // no case here is about a lost host: a heartbeat late on a busy machine must not end a pair
    timings: NO_LIVENESS_TIMINGS,
    controllerConfig: (c, fake) => {
      gh = fake;
      return {
        ...c,
        repositories: {
          [REPO]: {
            executor: 'dstack',
            ci: 'task',
            cloneUrl: g.cloneUrl(REPO),
            distributedAssertion: 'scripts/ci/assert-pair.sh',
          },
        },
      };
    },
    agentConfig: (hostId, c) => {
      const runner = c.runner as { passEnv: string[] };
      return {
        ...c,
        // the host's own backend stays the JIT runner: the repository's config moves its CI to dstack
        runner: { ...runner, passEnv: [...runner.passEnv, 'TASK_MARKER_DIR', 'TASK_SLEEP_S'] },
        dstack: {
          url: d.url,
          project: d.project,
          tokenFile,
          fleet: hostId,
          image: MULTI_ARCH_IMAGE,
          requestTimeoutS: 2,
        },
      };
    },
    agentEnv: (_h, env) => ({
      ...env,
      TASK_MARKER_DIR: markers,
      TASK_SLEEP_S: String(o.sleepS ?? 0),
      ...(o.shimDir ? { PATH: `${o.shimDir}:${env.PATH}` } : {}),
    }),
  });
  // the agents' own dirs are the host's, not the job container's (scripts/sim/doubles/dstack/container.ts)
  for (const h of hosts) d.hostOnly.push(...['work', 'state', 'models'].map((x) => join(sys.dir, h.id, x)));
  return { sys, dstack: d, git: g, markers };
}

/** Waits for the reservation to end; on a timeout the error carries what to look at. */
async function settled(t: TaskSystem, id: string, timeoutMs = 90_000) {
  return t.sys.waitReservation(id, ['done', 'failed'], timeoutMs).catch(async (e) => {
    const runs = runsOf(t.dstack, id).map(
      (r) =>
        `${r.name}: ${r.history.join('→')} exit ${r.job.exitStatus} (${r.job.terminationReason})\n${outputOf(r).slice(-1500)}`,
    );
    throw new Error(`${(e as Error).message}\n${await t.sys.diagnostics()}\n--- dstack\n${runs.join('\n')}`);
  });
}

const receiptsOf = async (s: SparkSystem, id: string): Promise<StoredReceipts['byHost']> => {
  const r = await s.reservation(id);
  return r.receiptJson ? (JSON.parse(r.receiptJson) as StoredReceipts).byHost : {};
};

const runsOf = (d: DstackStandIn, id: string) =>
  [...d.runs.values()].filter((r) => r.name.startsWith(`spark-${id}-`));

/** Every clone token GitHub minted, from the fake's token table (secrets: for leak checks only). */
const mintedTokens = (gh: FakeGitHub) =>
  [...gh.tokens.entries()].filter(([, t]) => t.repositories).map(([k]) => k);

/** No surface but the task's own environment ever shows a clone token. */
async function tokenNowhere(t: TaskSystem, id: string) {
  const tokens = mintedTokens(t.sys.gh);
  expect(tokens.length).toBeGreaterThan(0);
  const surfaces: Record<string, string> = {
    fleet: JSON.stringify((await t.sys.api('GET', '/api/v1/fleet', undefined, null)).body),
    queue: JSON.stringify((await t.sys.api('GET', '/api/v1/queue', undefined, null)).body),
    reservation: JSON.stringify((await t.sys.api('GET', `/api/v1/reservations/${id}`)).body),
    dashboard: String((await t.sys.api('GET', '/', undefined, null)).body),
    controllerLog: t.sys.controller.output(),
    history: JSON.stringify(await t.sys.reader.history(id)),
    ledgerRow: JSON.stringify(await t.sys.reservation(id)),
    leases: JSON.stringify(await t.sys.leases(id)),
    checkRuns: JSON.stringify(t.sys.gh.checkRuns),
    taskCommands: JSON.stringify(
      runsOf(t.dstack, id).map((r) => r.spec.configuration.type === 'task' && r.spec.configuration.commands),
    ),
    taskOutput: runsOf(t.dstack, id).map(outputOf).join(''),
    ...Object.fromEntries(Object.entries(t.sys.agents).map(([h, a]) => [`agent ${h}`, a.output()])),
  };
  for (const [where, text] of Object.entries(surfaces))
    for (const tok of tokens) expect(text.includes(tok), `${where} shows a clone token`).toBe(false);
}

// concurrent: every test has a system of its own (see taskSystem) and mostly waits on processes
describe.concurrent('CI as a dstack task (stand-in dstack, fake GitHub, real git)', {
  timeout: 180_000,
}, () => {
  it('runs spark-test.sh at the exact SHA as a dstack task: passed and failed land on the check run with the receipt', async (ctx) => {
    const t = await taskSystem(ctx, [{ id: 'spark-2' }]);
    const s = t.sys;
    const good = await t.git.commit(REPO, { 'scripts/ci/spark-test.sh': SCRIPT_OK, 'README.md': 'v1\n' });
    // a later commit on the same branch: the task must test the PR's commit, not the tip
    await t.git.commit(REPO, { 'README.md': 'v2\n' });
    s.openPr(1, { sha: good });
    const rid = queuedId(await s.label(1, 'spark-test'));
    const done = await settled(t, rid);
    expect(done, await s.diagnostics()).toMatchObject({ status: 'done', outcome: 'passed', headSha: good });
    const check = await s.waitCheck(rid, 'Spark test passed — evidence receipt recorded');
    expect(check).toMatchObject({ status: 'completed', conclusion: 'success', head_sha: good });
    expect(check.output.summary).toContain(
      '- Backend: dstack (task: scripts/ci/spark-test.sh, no GitHub job)',
    );
    expect(s.gh.checkRuns.filter((c) => c.external_id === rid)).toHaveLength(1);
    // no workflow dispatched, no runner registered: the task is the job
    expect(s.gh.dispatches).toEqual([]);
    expect(s.gh.calls('POST', /generate-jitconfig$/)).toEqual([]);
    // one token, asked with the App's JWT, for this repository only, contents: read
    const minted = s.gh.calls('POST', /\/app\/installations\/\d+\/access_tokens$/).filter((c) => c.body);
    expect(minted.map((c) => c.body)).toEqual([
      { repositories: ['butter'], permissions: { contents: 'read' } },
    ]);
    expect(minted[0]!.auth).toBe('app');
    // the git server saw that token, and only for reads of this repository
    const served = t.git.requests.filter((q) => q.status === 200);
    expect(served.length).toBeGreaterThan(0);
    expect(new Set(served.map((q) => q.repo))).toEqual(new Set([REPO]));
    expect(new Set(served.map((q) => q.token))).toEqual(new Set(mintedTokens(s.gh)));
    // the script really ran at that SHA, with the spark-test action's environment, without the token
    expect(readFileSync(join(t.markers, 'spark-2-ran'), 'utf8')).toBe(`${good} single smoke spark-test 30\n`);
    expect(readFileSync(join(t.markers, 'spark-2-token-visible'), 'utf8').trim()).toBe('0');
    // ADR 0115: the token was revoked with itself (DELETE /installation/token → 204) after the
    // fetch and before the script started, and the task said so before its first phase
    const [token] = mintedTokens(s.gh);
    const revokes = s.gh.calls('DELETE', /^\/installation\/token$/);
    expect(revokes.map((c) => ({ status: c.status, auth: c.auth, token: c.token }))).toEqual([
      { status: 204, auth: 'installation', token },
    ]);
    expect(Math.max(...served.map((q) => q.at))).toBeLessThanOrEqual(revokes[0]!.at);
    const scriptStarted = Number(readFileSync(join(t.markers, 'spark-2-script-started-ms'), 'utf8'));
    expect(revokes[0]!.at).toBeLessThanOrEqual(scriptStarted);
    // the token is dead: GitHub's API and its git endpoint both refuse it now
    const api = await fetch(`${s.gh.url}/repos/${REPO}`, { headers: { authorization: `token ${token}` } });
    expect(api.status).toBe(401);
    const refs = await fetch(`${t.git.cloneUrl(REPO)}/info/refs?service=git-upload-pack`, {
      headers: { authorization: `Basic ${Buffer.from(`x-access-token:${token}`).toString('base64')}` },
    });
    expect(refs.status).toBe(401);
    // what the PR's code could find: no token of this run in its environment or any readable
    // /proc/<pid>/environ — and the scan was real: the task's first process, which dstack started
    // with the token, was readable and holds the task's variables but no token any more
    const seen = readFileSync(join(t.markers, 'spark-2-tokens-seen'), 'utf8').split('\n');
    for (const k of mintedTokens(s.gh)) expect(seen, "the PR's code found a clone token").not.toContain(k);
    const firstEnv = readFileSync(join(t.markers, 'spark-2-first-process-env'), 'utf8').split('\n');
    expect(firstEnv).toContain('SPARK_HEAD_SHA');
    expect(firstEnv).toContain('SPARK_REVOKE_URL');
    expect(firstEnv).not.toContain('SPARK_CLONE_TOKEN');
    const [run] = runsOf(t.dstack, rid);
    // dstack's runner runs the task on a pty: the output's lines end \r\n
    const out = outputOf(run!);
    const revokedAt = out.indexOf(
      `spark-task: clone token revoked: HTTP 204 from ${s.gh.url}/installation/token (curl)\r\n`,
    );
    expect(revokedAt, out).toBeGreaterThan(out.indexOf('spark-task: fetching '));
    expect(revokedAt).toBeLessThan(out.indexOf('spark-task: phase smoke start'));
    expect(run!.history).toEqual(['submitted', 'provisioning', 'running', 'terminating', 'done']);
    const c = run!.spec.configuration;
    expect(c.type === 'task' && c.fleets).toEqual(['spark-2']);
    // the image has an arm64 build (the fleet is aarch64), and the host's model cache is mounted
    expect(c.image).toBe(MULTI_ARCH_IMAGE);
    const models = join(s.dir, 'spark-2', 'models');
    expect(c.volumes).toEqual([{ instance_path: models, path: models }]);
    // the job's environment has no path of the agent's host but what the config passes
    expect(envOf(run!).HOME).toBeUndefined();
    expect(envOf(run!).TMPDIR).toBeUndefined();
    // …and the task's writes to the model cache land in the host's cache dir
    expect(readFileSync(join(models, 'seen-by-spark-2'), 'utf8').trim()).toBe(good);
    const receipt = (await receiptsOf(s, rid))['spark-2']!;
    expect(receipt).toMatchObject({
      result: 'passed',
      headSha: good,
      repo: REPO,
      executor: 'dstack',
      mode: 'task',
      suite: 'smoke',
      topology: 'single',
      exitCode: 0,
      phases: [{ suite: 'smoke', exitCode: 0 }],
      lane: { name: 'spark-test', targetMinutes: 30, withinTarget: true },
      toolchain: {
        source: good,
        cloneToken: `revoked: HTTP 204 from ${s.gh.url}/installation/token (curl)`,
      },
    });
    expect(receipt.lastLines).toBeUndefined();
    // the log hash covers the task's whole output as dstack stored it
    const { createHash } = await import('node:crypto');
    const text = Buffer.from(outputOf(run!), 'utf8');
    expect(receipt.log).toEqual({
      sha256: createHash('sha256').update(text.toString('utf8')).digest('hex'),
      bytes: text.length,
      lines: text
        .toString('utf8')
        .split('\n')
        .filter((_, i, a) => i < a.length - 1 || a[i] !== '').length,
    });
    const types = (await s.history(rid)).map((e) => e.type);
    for (const ty of [
      'reservation.allocated',
      'reservation.runner_registered',
      'reservation.running',
      'reservation.receipt',
      'reservation.done',
    ])
      expect(types, ty).toContain(ty);
    await s.waitHostPhase('spark-2', ['idle']);

    // a failing commit: the check fails with the script's exit, the receipt keeps the last lines
    const bad = await t.git.commit(REPO, { 'scripts/ci/spark-test.sh': SCRIPT_FAIL });
    s.openPr(2, { sha: bad });
    const rid2 = queuedId(await s.label(2, 'spark-test'));
    const failed = await settled(t, rid2);
    expect(failed, await s.diagnostics()).toMatchObject({ outcome: 'failed', headSha: bad });
    const check2 = await s.waitCheck(rid2, `Spark test failed — exact SHA ${bad.slice(0, 7)}`);
    expect(check2).toMatchObject({ status: 'completed', conclusion: 'failure', head_sha: bad });
    expect(check2.output.summary).toContain('Evidence receipt recorded');
    const r2 = (await receiptsOf(s, rid2))['spark-2']!;
    expect(r2).toMatchObject({
      result: 'failed',
      exitCode: 3,
      reason: 'smoke phase exited 3',
      mode: 'task',
      executor: 'dstack',
      phases: [{ suite: 'smoke', exitCode: 3 }],
    });
    expect(r2.lastLines).toContain('cuda_smoke: expected 42, got 41');
    expect(readFileSync(join(t.markers, 'spark-2-ran'), 'utf8')).toContain(`${bad} single smoke\n`);
    await s.waitHostPhase('spark-2', ['idle']);
    await tokenNowhere(t, rid);
    await tokenNowhere(t, rid2);

    // a report with a stale fencing token changes nothing (here: a receipt that would flip the result)
    const [lease] = await s.leases(rid2);
    const agentToken = readFileSync(join(s.dir, 'spark-2', 'agent.token'), 'utf8').trim();
    const stale = await fetch(`${s.controllerUrl}/agent/v1/report`, {
      method: 'POST',
      headers: { authorization: `Bearer ${agentToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        type: 'runner_exited',
        fencingToken: lease!.fencingToken,
        runnerName: `spark-spark-2-${rid2}-a0`,
        exitCode: 0,
        lastLines: [],
        receipt: { ...r2, result: 'passed', exitCode: 0, reason: undefined, lastLines: undefined },
      }),
    });
    expect(stale.status).toBe(409);
    expect((await s.reservation(rid2)).receiptJson).toBe(failed.receiptJson);
    expect((await s.reservation(rid2)).outcome).toBe('failed');
  });

  it('a checkout that lands on another commit fails the commit binding before the script runs; an unknown SHA fails the checkout', async (ctx) => {
    // a git that checks out the branch tip whatever it was asked for (a tampered or broken checkout)
    const shim = mkdtempSync(join(process.env.TMPDIR ?? '/tmp', 'spark-git-shim-'));
    const realGit = '/usr/bin/git';
    writeFileSync(
      join(shim, 'git'),
      `#!/bin/sh\nif [ "$1" = "-c" ] && [ "$3" = checkout ]; then "${realGit}" fetch -q --depth 1 "$SPARK_CLONE_URL" main 2>/dev/null; fi\nexec "${realGit}" "$@"\n`,
    );
    chmodSync(join(shim, 'git'), 0o755);
    const t = await taskSystem(ctx, [{ id: 'spark-2' }], { shimDir: shim });
    const s = t.sys;
    const admitted = await t.git.commit(REPO, { 'scripts/ci/spark-test.sh': SCRIPT_OK });
    await t.git.commit(REPO, { 'README.md': 'a later tip\n' });
    s.openPr(1, { sha: admitted });
    const rid = queuedId(await s.label(1, 'spark-test'));
    const r = await settled(t, rid);
    expect(r, await s.diagnostics()).toMatchObject({ outcome: 'failed', headSha: admitted });
    expect(readdirSync(t.markers)).toEqual([]);
    const receipt = (await receiptsOf(s, rid))['spark-2']!;
    expect(receipt.result).toBe('failed');
    expect(receipt.reason).toMatch(
      /^commit binding failed: HEAD is [0-9a-f]{40}, not the admitted [0-9a-f]{40}; the script did not run$/,
    );
    expect(receipt.reason).toContain(`not the admitted ${admitted}`);
    expect(receipt.phases).toEqual([]);
    const check = await s.waitCheck(rid, `Spark test failed — exact SHA ${admitted.slice(0, 7)}`);
    expect(check.conclusion).toBe('failure');
    expect((await s.history(rid)).some((e) => e.cause?.includes('commit binding failed'))).toBe(true);
    await s.waitHostPhase('spark-2', ['idle']);

    // a SHA the repository does not have: git cannot fetch it, nothing of the PR runs
    const missing = 'f'.repeat(40);
    s.openPr(2, { sha: missing });
    const rid2 = queuedId(await s.label(2, 'spark-test'));
    await settled(t, rid2);
    const r2 = (await receiptsOf(s, rid2))['spark-2']!;
    expect(r2.reason).toMatch(/^checkout failed: git could not fetch f{40}/);
    expect(readdirSync(t.markers)).toEqual([]);
    await s.waitCheck(rid2, `Spark test failed — exact SHA ${missing.slice(0, 7)}`);
    // the token dies whatever the fetch did (ADR 0115): both runs' tokens are revoked
    expect(mintedTokens(s.gh)).toHaveLength(2);
    for (const k of mintedTokens(s.gh)) expect(s.gh.tokenScope(k)).toBeNull();
    expect(s.gh.calls('DELETE', /^\/installation\/token$/).map((c) => c.status)).toEqual([204, 204]);
    await tokenNowhere(t, rid);
    await s.waitHostPhase('spark-2', ['idle']);
  });

  // its own test (and system) since the task waits out its revoke backoff (2 s + 4 s) here
  it('a failed revoke fails closed: the script does not run and the agent revokes the token', async (ctx) => {
    const t = await taskSystem(ctx, [{ id: 'spark-2' }]);
    const s = t.sys;
    // GitHub fails the revoke (500 on each of the task's 3 attempts): the task fails closed before
    // the repository's code runs, with the status in its receipt and on the check; the agent then
    // revokes the token itself (ADR 0115), so it does not outlive the task
    s.gh.failures.push({ method: 'DELETE', path: /^\/installation\/token$/, status: 500, times: 3 });
    const sha3 = await t.git.commit(REPO, { 'scripts/ci/spark-test.sh': SCRIPT_OK, 'README.md': 'v3\n' });
    s.openPr(3, { sha: sha3 });
    const rid3 = queuedId(await s.label(3, 'spark-test'));
    expect((await settled(t, rid3)).outcome).toBe('failed');
    const r3 = (await receiptsOf(s, rid3))['spark-2']!;
    expect(r3).toMatchObject({
      result: 'failed',
      exitCode: 85,
      phases: [],
      reason: `clone token revoke failed: HTTP 500 from ${s.gh.url}/installation/token after 3 attempt(s) (curl); the script did not run`,
    });
    expect(r3.toolchain.cloneToken).toBeUndefined();
    expect(readdirSync(t.markers)).toEqual([]);
    const [token3] = mintedTokens(s.gh);
    expect(mintedTokens(s.gh)).toHaveLength(1);
    expect(
      s.gh
        .calls('DELETE', /^\/installation\/token$/)
        .filter((c) => c.token === token3)
        .map((c) => c.status),
    ).toEqual([500, 500, 500, 204]);
    expect(s.gh.tokenScope(token3!)).toBeNull();
    expect(s.agents['spark-2']!.output()).toContain('the task did not revoke its clone token; the agent did');
    const check3 = await s.waitCheck(rid3, `Spark test failed — exact SHA ${sha3.slice(0, 7)}`);
    expect(check3.conclusion).toBe('failure');
    expect(
      (await s.history(rid3)).some((e) => e.cause?.includes('clone token revoke failed: HTTP 500')),
    ).toBe(true);
    await tokenNowhere(t, rid3);
  });

  it('a pair runs one task per host, each on its own fleet; both receipts land before the check passes', async (ctx) => {
    const t = await taskSystem(ctx, [{ id: 'spark-1', homeService: 'deckard' }, { id: 'spark-2' }]);
    const s = t.sys;
    // the declared distributed assertion is missing from this commit: the pair fails before its
    // phases on both hosts instead of passing vacuously (as the spark-test action refuses it)
    const without = await t.git.commit(REPO, { 'scripts/ci/spark-test.sh': SCRIPT_OK });
    s.openPr(1, { sha: without });
    const first = queuedId(await s.label(1, 'spark-pair-test'));
    expect((await settled(t, first, 120_000)).outcome).toBe('failed');
    const missing = Object.values(await receiptsOf(s, first));
    const why =
      'the declared distributed assertion scripts/ci/assert-pair.sh does not exist in the repository';
    expect(missing.map((x) => x.reason)).toContain(why);
    // the other node either failed the same way or was stopped with the pair (it fails as a unit)
    for (const x of missing)
      expect(x.reason === why || x.result === 'cancelled', JSON.stringify(x)).toBe(true);
    expect(readdirSync(t.markers)).toEqual([]);
    await s.waitHostPhase('spark-2', ['idle']);
    await s.waitHostPhase('spark-1', ['service']);

    const sha = await t.git.commit(REPO, { 'scripts/ci/assert-pair.sh': ASSERT_PAIR });
    s.openPr(2, { sha });
    const rid = queuedId(await s.label(2, 'spark-pair-test'));
    const r = await settled(t, rid, 120_000);
    expect(r, await s.diagnostics()).toMatchObject({ status: 'done', outcome: 'passed', topology: 'pair' });
    const runs = runsOf(t.dstack, rid);
    expect(
      runs.map((x) => (x.spec.configuration.type === 'task' ? x.spec.configuration.fleets : null)).sort(),
    ).toEqual([['spark-1'], ['spark-2']]);
    for (const x of runs) expect(x.spec.configuration.type === 'task' && x.spec.configuration.nodes).toBe(1);
    const receipts = await receiptsOf(s, rid);
    expect(Object.keys(receipts).sort()).toEqual(['spark-1', 'spark-2']);
    for (const h of ['spark-1', 'spark-2']) {
      expect(receipts[h]).toMatchObject({ result: 'passed', topology: 'pair', mode: 'task', headSha: sha });
      expect(readFileSync(join(t.markers, `${h}-ran`), 'utf8')).toBe(`${sha} pair smoke spark-test 30\n`);
      expect(readFileSync(join(t.markers, `${h}-asserted`), 'utf8')).toBe('both hosts computed together\n');
    }
    // one read-only token per lease, each for this repository only, and each dead now (ADR 0115)
    expect(mintedTokens(s.gh)).toHaveLength(4);
    for (const k of mintedTokens(s.gh)) expect(s.gh.tokenScope(k)).toBeNull();
    const check = await s.waitCheck(rid, 'Spark test passed — evidence receipt recorded');
    expect(check.output.summary).toContain('- Hosts: Spark 1 + Spark 2');
    await s.waitHostPhase('spark-2', ['idle']);
    await tokenNowhere(t, rid);
  });

  it('kill -9 of the agent while the task runs: the restarted agent finds the task and still reports its receipt', async (ctx) => {
    const t = await taskSystem(ctx, [{ id: 'spark-2' }], { sleepS: 4 });
    const s = t.sys;
    const sha = await t.git.commit(REPO, { 'scripts/ci/spark-test.sh': SCRIPT_OK });
    s.openPr(1, { sha });
    const rid = queuedId(await s.label(1, 'spark-test'));
    await waitFor('the script to run', () => readdirSync(t.markers).includes('spark-2-ran'), 60_000, 100);
    await s.agents['spark-2']!.stop('SIGKILL');
    s.startAgent('spark-2');
    const r = await settled(t, rid);
    expect(r, await s.diagnostics()).toMatchObject({ status: 'done', outcome: 'passed' });
    // the restarted agent resumed the lease from its state file (the kill came mid-run)
    expect(s.agents['spark-2']!.output()).toMatch(/"resumingLease":"l-spark-2-\d+"/);
    // the same task, found by its recorded name: none created twice, the workload kept with the lease
    expect(runsOf(t.dstack, rid)).toHaveLength(1);
    expect((await receiptsOf(s, rid))['spark-2']).toMatchObject({
      result: 'passed',
      mode: 'task',
      headSha: sha,
      toolchain: { source: sha },
    });
    await s.waitCheck(rid, 'Spark test passed — evidence receipt recorded');
    await tokenNowhere(t, rid);
  });

  it('ending the work while the task runs stops it through dstack; the check says the task was stopped', async (ctx) => {
    const t = await taskSystem(ctx, [{ id: 'spark-2' }], { sleepS: 60 });
    const s = t.sys;
    const sha = await t.git.commit(REPO, { 'scripts/ci/spark-test.sh': SCRIPT_OK });
    s.openPr(1, { sha });
    const rid = queuedId(await s.label(1, 'spark-test'));
    await s.waitReservation(rid, ['running'], 60_000);
    await waitFor('the script to run', () => readdirSync(t.markers).includes('spark-2-ran'), 60_000, 100);
    const res = await s.api(
      'POST',
      `/api/v1/reservations/${rid}/terminate`,
      { reason: 'operator ends a stuck test' },
      s.emergencyToken,
    );
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const r = await settled(t, rid, 60_000);
    expect(r.outcome).toBe('terminated');
    const [run] = runsOf(t.dstack, rid);
    expect(run!.history.slice(-2)).toEqual(['terminating', 'terminated']);
    expect(run!.terminationReason).toBe('stopped_by_user');
    // released only after dstack reported the task terminated
    const end = (await s.reader.history(rid)).find(
      (e) => e.type === 'reservation.done' || e.type === 'reservation.failed',
    );
    expect(end!.at).toBeGreaterThanOrEqual(run!.finishedAt!);
    const check = await s.waitCheck(rid, 'Spark test stopped — terminated; dstack task terminated');
    // an emergency termination fails the reservation (as on the runner path), so the check fails
    expect(r.status).toBe('failed');
    expect(check).toMatchObject({ status: 'completed', conclusion: 'failure', head_sha: sha });
    expect(check.output.summary).toContain(
      'The dstack task was stopped through dstack and confirmed terminated',
    );
    expect((await receiptsOf(s, rid))['spark-2']).toMatchObject({ result: 'cancelled', mode: 'task' });
    await s.waitHostPhase('spark-2', ['idle']);
    await tokenNowhere(t, rid);
  });
});
