import { copyFileSync, mkdirSync, readFileSync, realpathSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  FleetResponse,
  HistoryResponse,
  QueueResponse,
  ReservationListResponse,
  ReservationResponse,
} from '../../core/protocol/api.ts';
import { apiModule } from '../../functions/api/index.ts';
import { repoRoot } from '../../functions/node-server.ts';
import { startHarness } from '../../scripts/sim/fake-github/harness.ts';
import { loadWorkflow } from '../../scripts/sim/fake-github/workflows.ts';
import { tempDir } from '../../scripts/sim/ledger.ts';
import { startTestController } from '../helpers/controller.ts';
import {
  agentOnline,
  agentReportsActive,
  agentReportsCleaned,
  agentReportsPrepared,
  agentReportsRestored,
  cleanupBundle,
  FAST_TIMINGS,
  hostOf,
  reservationOf,
  runSparkctl,
  runSparkctlHere,
  sparkctlBundle,
  spawnSparkctl,
  startApiController,
  until,
} from './cli-harness.ts';
import { readyFleet, snapshot } from './readiness-helpers.ts';

let bin = '';
let home: { dir: string; cleanup: () => void };
let ctl: Awaited<ReturnType<typeof startApiController>> | null = null;

beforeAll(async () => {
  bin = await sparkctlBundle();
  home = tempDir('sparkctl-home-');
});
afterAll(() => {
  cleanupBundle();
  home.cleanup();
});
afterEach(async () => {
  await ctl?.c.close();
  ctl = null;
});

const env = (token?: string) => ({ SPARK_URL: ctl!.c.url, ...(token ? { SPARK_TOKEN: token } : {}) });
const sparkctl = (args: string[], token?: string) => runSparkctlHere(args, env(token), home.dir);

async function status(id: string) {
  return (await reservationOf(ctl!.target, id))?.status;
}

/** spark-2 busy with someone else's development lease; returns its id. */
async function occupySpark2(): Promise<string> {
  const { call, tokens, target } = ctl!;
  await agentOnline(target);
  const id = (await call(tokens.dev2, 'POST', '/api/v1/reservations', { host: 'spark-2' })).body.reservation
    .id;
  await until('first grant', async () => (await status(id)) === 'allocated');
  await agentReportsPrepared(target, id);
  return id;
}

describe('sparkctl against a real controller', () => {
  it('reserve --wait shows queue position, why it waits and the draining host, then ends attached', async () => {
    ctl = await startApiController();
    const first = await occupySpark2();
    const p = spawnSparkctl(
      bin,
      ['reserve', '--host', 'spark-2', '--ttl', '2h', '--wait'],
      env(ctl.tokens.dev),
      home.dir,
    );
    await p.waitFor(
      /r-2 queued · position 1 · starts in ~[^·]+ · spark-2 draining: spark-2 allocated to r-1; active job finishing/,
    );
    const { call, tokens, target } = ctl;
    expect((await call(tokens.dev2, 'POST', `/api/v1/reservations/${first}/release`, {})).status).toBe(200);
    await agentReportsCleaned(target, first);
    await p.waitFor(/r-2 allocated spark-2 · preparing spark-2/);
    await agentReportsPrepared(target, 'r-2');
    const res = await p.done;
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(/r-2 is yours: spark-2 \(single\), lease until/);
    // a jit-runner host runs no dev environment: no SSH hint, the lease holds the host
    expect(res.stdout).toMatch(/attach: {3}no dev environment on spark-2/);
    expect(res.stdout).not.toMatch(/ssh spark/);
    expect(res.stdout).toMatch(/release: {2}sparkctl release r-2/);
    const lease = (await reservationOf(target, 'r-2'))!.leases[0]!;
    expect(Date.parse(lease.expiresAt) - Date.parse(lease.grantedAt)).toBe(2 * 3600_000);

    // `sparkctl attach`: nothing to attach to on a host without dev environments (exit 1, says why)
    const none = await sparkctl(['attach', 'r-2'], tokens.dev);
    expect(none.code).toBe(1);
    expect(none.stderr).toMatch(/no dev environment on spark-2/);
    // a dstack host's agent reports its dev environment: attach prints exactly the command
    await agentReportsActive(target, 'r-2', (h) => `dstack attach spark-r-2-${h}-t2-dev`);
    const att = await sparkctl(['attach', 'r-2'], tokens.dev);
    expect([att.code, att.stdout.trim()]).toEqual([0, 'dstack attach spark-r-2-spark-2-t2-dev']);
    expect((await sparkctl(['status', 'r-2'], tokens.dev)).stdout).toMatch(
      /attach: {3}dstack attach spark-r-2-spark-2-t2-dev/,
    );
  });

  it('Ctrl-C while queued cancels the request', async () => {
    ctl = await startApiController();
    await occupySpark2();
    const p = spawnSparkctl(bin, ['reserve', '--host', 'spark-2', '--wait'], env(ctl.tokens.dev), home.dir);
    await p.waitFor(/r-2 queued/);
    p.child.kill('SIGINT');
    const res = await p.done;
    expect(res.code).toBe(130);
    expect(res.stderr).toMatch(/interrupted: cancelled r-2 \(it was still queued\)/);
    expect(await status('r-2')).toBe('cancelled');
    const hist = await ctl.call(ctl.tokens.ops, 'GET', '/api/v1/reservations/r-2/history');
    expect(hist.body.events.at(-1)).toMatchObject({ type: 'reservation.cancelled', actor: 'api:dev' });
  });

  it('cancel refuses active work; release waits for the agent cleanup acknowledgement with progress', async () => {
    ctl = await startApiController();
    const id = await occupySpark2();
    const cancel = await sparkctl(['cancel', id], ctl.tokens.dev2);
    expect(cancel.code).toBe(7);
    expect(cancel.stderr.trim()).toMatch(/^sparkctl: reservation r-1 is preparing; .* release it instead$/);
    expect(await status(id)).toBe('preparing');

    const p = spawnSparkctl(bin, ['release', id], env(ctl.tokens.dev2), home.dir);
    await p.waitFor(/r-1 releasing · waiting for the agent to confirm cleanup on spark-2/);
    expect(await status(id)).toBe('releasing');
    await agentReportsCleaned(ctl.target, id);
    const res = await p.done;
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(/r-1 done: termination and cleanup confirmed on spark-2/);

    // --no-wait returns once the release is recorded and says what frees the host
    const { call, tokens, target } = ctl;
    const next = (await call(tokens.dev2, 'POST', '/api/v1/reservations', { host: 'spark-2' })).body
      .reservation.id;
    await until('second grant', async () => (await status(next)) === 'allocated');
    await agentReportsPrepared(target, next);
    const quick = await sparkctl(['release', next, '--no-wait'], tokens.dev2);
    expect(quick.code).toBe(0);
    expect(quick.stdout.trim()).toBe(
      `${next} releasing · waiting for the agent to confirm cleanup on spark-2\nthe host is freed when its agent confirms cleanup`,
    );
    expect(await status(next)).toBe('releasing');
  });

  it('--json on every read command parses and matches the wire schemas', async () => {
    ctl = await startApiController();
    const id = await occupySpark2();
    const tok = ctl.tokens.dev2;
    const reserve = await sparkctl(['reserve', '--pair', '--json'], tok);
    expect(reserve.code).toBe(0);
    const created = ReservationResponse.parse(JSON.parse(reserve.stdout));
    expect(created.reservation).toMatchObject({ topology: 'pair', status: 'queued', kind: 'development' });

    // independent reads run side by side (each is its own process)
    const [oneRes, mineRes, queueRes, fleetRes, histRes, table] = await Promise.all([
      sparkctl(['status', id, '--json'], tok),
      sparkctl(['status', '--json'], tok),
      sparkctl(['queue', '--json']),
      sparkctl(['fleet', '--json']),
      sparkctl(['history', id, '--json'], tok),
      sparkctl(['fleet']),
    ]);
    const one = ReservationResponse.parse(JSON.parse(oneRes.stdout));
    expect(one.reservation).toMatchObject({ id, ready: true, mine: true });
    const mine = ReservationListResponse.parse(JSON.parse(mineRes.stdout));
    expect(mine.reservations.map((r) => r.id).sort()).toEqual([id, created.reservation.id].sort());
    const queue = QueueResponse.parse(JSON.parse(queueRes.stdout));
    expect(queue.queued.map((q) => q.id)).toEqual([created.reservation.id]);
    expect(queue.active.map((q) => q.id)).toEqual([id]);
    const fleet = FleetResponse.parse(JSON.parse(fleetRes.stdout));
    expect(fleet.hosts.find((h) => h.id === 'spark-2')?.reservation?.id).toBe(id);
    const hist = HistoryResponse.parse(JSON.parse(histRes.stdout));
    expect(hist.events.map((e) => e.type)).toEqual(
      expect.arrayContaining(['reservation.queued', 'reservation.allocated']),
    );
    // the grant is one row (ADR 0100): it names the host and its move, never the lease's token
    const grant = hist.events.find((e) => e.type === 'reservation.allocated');
    expect(grant?.cause).toMatch(/^granted spark-2 \((idle|service) → allocated/);
    expect(hist.events.some((e) => e.type === 'lease.granted')).toBe(false);

    expect(table.stdout).toMatch(/^HOST\s+STATE\s+ADOPTED/m);
    // the queued pair needs spark-2 next: it drains (current work finishes) and spark-1 is held
    const pair = created.reservation.id;
    expect(table.stdout).toMatch(
      new RegExp(
        `^spark-2\\s+draining\\s+yes\\s+-\\s+${id} development/single .* draining for ${pair}$`,
        'm',
      ),
    );
    expect(table.stdout).toMatch(
      new RegExp(`^spark-1\\s+held\\s+yes\\s+deckard: serving .* held for ${pair}$`, 'm'),
    );
  });

  it('maps failures to exit codes with one-line messages', async () => {
    ctl = await startApiController();
    const wrong = await sparkctl(['status'], 'spk_api_wrong');
    expect(wrong.code).toBe(4);
    expect(wrong.stderr.trim().split('\n')).toHaveLength(1);
    expect(wrong.stderr).toMatch(
      /^sparkctl: unauthorized: unknown or revoked API token \(check the token from SPARK_TOKEN\)/,
    );
    const none = await sparkctl(['status']);
    expect(none.code).toBe(4);
    expect(none.stderr).toMatch(/no token given: set SPARK_TOKEN/);
    const missing = await sparkctl(['status', 'r-404'], ctl.tokens.dev);
    expect(missing.code).toBe(6);
    expect(missing.stderr.trim()).toBe('sparkctl: reservation r-404 not found');
    const usage = await sparkctl(['reserve', '--ttl', 'soon'], ctl.tokens.dev);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toMatch(/invalid --ttl 'soon'/);
    const unknown = await sparkctl(['frobnicate'], ctl.tokens.dev);
    expect(unknown.code).toBe(2);
    const noHost = await sparkctl(['reserve', '--host', 'spark-9'], ctl.tokens.dev);
    expect(noHost.code).toBe(2);
    expect(noHost.stderr.trim()).toBe('sparkctl: unknown host "spark-9": this fleet has spark-1, spark-2');

    const url = ctl.c.url;
    await ctl.c.close();
    ctl = null;
    const down = await runSparkctl(bin, ['queue'], { SPARK_URL: url }, home.dir);
    expect(down.code).toBe(3);
    expect(down.stderr.trim()).toMatch(
      /^sparkctl: cannot reach the controller at http:\/\/127\.0\.0\.1:\d+ \(ECONNREFUSED\)/,
    );
  });

  it('refuses emergency terminate without the emergency scope and records it with one', async () => {
    ctl = await startApiController();
    const id = await occupySpark2();
    const denied = await sparkctl(['emergency', 'terminate', id, '--reason', 'runaway job'], ctl.tokens.ops);
    expect(denied.code).toBe(5);
    expect(denied.stderr.trim()).toMatch(/^sparkctl: forbidden: this token lacks the "emergency" scope/);
    expect(await status(id)).toBe('preparing');
    const noReason = await sparkctl(['emergency', 'terminate', id], ctl.tokens.em);
    expect(noReason.code).toBe(2);
    const ok = await sparkctl(['emergency', 'terminate', id, '--reason', 'runaway job'], ctl.tokens.em);
    expect(ok.code).toBe(0);
    expect(ok.stdout).toMatch(/emergency terminate recorded: r-1 releasing/);
    expect(await status(id)).toBe('releasing');
  });

  it('runs the operator commands: adopt, deckard start, tokens, recover', async () => {
    ctl = await startApiController();
    const tok = ctl.tokens.ops;
    const adopt = await sparkctl(['host', 'adopt', 'spark-2'], tok);
    expect(adopt.stdout).toMatch(/spark-2 adopted/);
    expect((await hostOf(ctl.target, 'spark-2')).managed).toBe(true);
    const deckard = await sparkctl(['deckard', 'start'], tok);
    expect(deckard.stdout).toMatch(/Deckard start requested as r-1 \(priority 90\)/);
    const created = await sparkctl(['token', 'create', '--name', 'laptop', '--scopes', 'develop'], tok);
    const token = /token \(shown once, store it now\): (spk_api_\S+)/.exec(created.stdout)?.[1];
    expect(token).toBeDefined();
    const who = await sparkctl(['whoami'], token);
    expect(who.stdout).toMatch(/^laptop \(tok-[0-9a-f]+\) scopes: develop/);
    const temp = await sparkctl(
      ['token', 'create', '--name', 'temp', '--scopes', 'develop', '--expires', '30d'],
      tok,
    );
    expect(temp.stdout).toMatch(
      /^created token tok-[0-9a-f]+ "temp" with scopes develop, expiring \d{4}-\d\d-\d\dT/,
    );
    const listed = await sparkctl(['token', 'list'], tok);
    expect(listed.stdout).toMatch(/EXPIRES/);
    expect(listed.stdout).toMatch(/temp\s+develop\s+\S+\s+\d{4}-\d\d-\d\dT\S+Z/);
    expect(listed.stdout).toMatch(/laptop\s+develop\s+\S+\s+never/);
    expect(
      (await sparkctl(['token', 'create', '--name', 't2', '--scopes', 'develop', '--expires', 'soon'], tok))
        .code,
    ).toBe(2);
    const tokId = /\(?(tok-[0-9a-f]+)\)?/.exec(who.stdout)![1]!;
    expect((await sparkctl(['token', 'revoke', tokId], tok)).code).toBe(0);
    expect((await sparkctl(['whoami'], token)).code).toBe(4);
    const recover = await sparkctl(['recover', 'r-1'], tok);
    expect(recover.code).toBe(0);
    expect(recover.stdout).toMatch(/^cancelled: r-1 was queued; cancelled/);
  });

  it('reads URL and token from the config file', async () => {
    ctl = await startApiController();
    const dir = join(home.dir, 'alt');
    mkdirSync(dir, { recursive: true });
    const file = join(dir, 'config.json');
    writeFileSync(file, JSON.stringify({ url: ctl.c.url, token: ctl.tokens.dev }));
    const who = await runSparkctl(bin, ['whoami'], { SPARKCTL_CONFIG: file }, home.dir);
    expect(who.code).toBe(0);
    expect(who.stdout).toMatch(/^dev /);
    writeFileSync(file, JSON.stringify({ url: 'ftp://x' }));
    const bad = await runSparkctl(bin, ['whoami'], { SPARKCTL_CONFIG: file }, home.dir);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/url: expected an http\(s\) URL/);
  });

  it('repo enable is a gate: refused with each check and its fix (exit 7, nothing changed), --override recorded, --json', async () => {
    const h = await startHarness({ manifest: 'scripts/sim/fixtures/github-apps/manifest-issues-write.json' });
    try {
      h.gh.addRepo('acme/butter');
      h.gh.addRepo('acme/iron');
      const env = { SPARK_URL: h.c.url, SPARK_TOKEN: await h.operatorToken() };
      const before = await snapshot(h);
      // no host adopted or heartbeating, Deckard never lent: refused, each check one line
      const gated = await runSparkctlHere(['repo', 'enable', 'acme/iron'], env, home.dir);
      expect(gated.code).toBe(7);
      expect(gated.stdout).toMatch(
        /^ok {3}installation {2}installed on acme\/iron \(installation 77\); default branch main$/m,
      );
      expect(gated.stdout).toMatch(
        /^fail hosts {9}spark-1 is not adopted; spark-1 never sent a heartbeat; .* — fix: adopt it once its agent heartbeats: sparkctl host adopt spark-1; /m,
      );
      expect(gated.stdout).toMatch(
        /^fail deckard {7}no restore of deckard on spark-1 verified yet: it was never lent and restored — fix: run a restore drill: sparkctl deckard drill --host spark-1 /m,
      );
      expect(gated.stderr.trim()).toBe(
        'sparkctl: enable refused for acme/iron, nothing was changed: 2 checks failed (hosts, deckard); fix each as its line says, or override with --override hosts,deckard (recorded in the history)',
      );
      // nothing changed: no repository, no history, no label although the App may create them
      expect(await snapshot(h)).toEqual(before);
      expect(h.gh.calls('POST', /\/labels$/)).toEqual([]);
      const json = await runSparkctlHere(['repo', 'enable', 'acme/iron', '--json'], env, home.dir);
      expect(json.code).toBe(7);
      const refusal = JSON.parse(json.stdout);
      expect(refusal.error.code).toBe('not_ready');
      expect(refusal.readiness.checks.map((c: { id: string }) => c.id)).toEqual([
        'installation',
        'permissions',
        'runner-group',
        'workflow',
        'labels',
        'hosts',
        'dstack',
        'deckard',
      ]);
      // the override, named check by check, enables and is in the history
      const forced = await runSparkctlHere(
        ['repo', 'enable', 'acme/iron', '--pair', '--override', 'hosts,deckard'],
        env,
        home.dir,
      );
      expect(forced.stderr).toBe('');
      expect(forced.code).toBe(0);
      expect(forced.stdout).toMatch(/^enabled acme\/iron with pair tests\n {2}ok {3}installation /);
      expect(forced.stdout).toContain('  labels: created spark-test, spark-test-long, spark-pair-test');
      expect(forced.stdout).toContain('  overridden (recorded in the history): hosts, deckard');
      const ev = (await h.c.ledger.history('repository', 'acme/iron')).find(
        (e) => e.type === 'repository.enabled',
      );
      expect(ev?.cause).toMatch(
        /^enabled by test-operator with pair tests; readiness checks overridden: hosts \(/,
      );
      expect(ev?.actor).toBe('api:test-operator');
      const usage = await runSparkctlHere(
        ['repo', 'enable', 'acme/iron', '--override', 'labels'],
        env,
        home.dir,
      );
      expect(usage.code).toBe(2);
      expect(usage.stderr).toMatch(/invalid --override 'labels'/);
      // the App is not installed: the same gate, the installation's own line
      const missing = await runSparkctlHere(['repo', 'enable', 'acme/unknown'], env, home.dir);
      expect(missing.code).toBe(7);
      expect(missing.stdout).toMatch(
        /^fail installation {2}the GitHub App is not installed on acme\/unknown — fix: install it there /m,
      );
      expect(h.gh.forbidden).toEqual([]);
      expect(h.gh.violations).toEqual([]);
    } finally {
      await h.close();
    }
  });

  it('repo enable bad input: a runner group that does not exist, a workflow missing a spec input, one with an input the controller cannot fill', async () => {
    const h = await startHarness({ config: { github: { runnerGroupId: 9 } } });
    try {
      const template = readFileSync(join(repoRoot, 'workflows-templates', 'spark-pr-test.yml'), 'utf8');
      const noSuite = template.replace(/\n {6}suite:\n(?: {8}.*\n)+/, '\n');
      const ticket = template.replace(
        /\n {4}inputs:\n/,
        '\n    inputs:\n      ticket:\n        required: true\n        type: string\n',
      );
      h.gh.addRepo('acme/butter', { workflows: { 'spark-pr-test.yml': loadWorkflow(noSuite) } });
      h.gh.addRepo('acme/iron', { workflows: { 'spark-pr-test.yml': loadWorkflow(ticket) } });
      await readyFleet(h.c.ledger);
      const env = { SPARK_URL: h.c.url, SPARK_TOKEN: await h.operatorToken() };
      const before = await snapshot(h);
      const butter = await runSparkctlHere(['repo', 'enable', 'acme/butter'], env, home.dir);
      expect(butter.code).toBe(7);
      expect(butter.stdout).toMatch(
        /^fail runner-group {2}runner group 9 \(github\.runnerGroupId\) does not exist in acme — fix: create a runner group for the Spark runners /m,
      );
      expect(butter.stdout).toMatch(
        /^fail workflow {6}\.github\/workflows\/spark-pr-test\.yml on main breaks the workflow contract: 1 problem — fix: input `suite` is not declared: the Spark workflow contract needs reservation_id, head_sha, topology, suite \(docs\/github-app\.md\)$/m,
      );
      expect(butter.stderr.trim()).toBe(
        'sparkctl: enable refused for acme/butter, nothing was changed: 2 checks failed (runner-group, workflow); fix each as its line says, or override with --override runner-group,workflow (recorded in the history)',
      );
      const iron = await runSparkctlHere(['repo', 'enable', 'acme/iron'], env, home.dir);
      expect(iron.code).toBe(7);
      expect(iron.stdout).toMatch(
        /^fail workflow {6}.* — fix: input `ticket` is required and the controller cannot fill it: give it a default or make it optional$/m,
      );
      expect(await snapshot(h)).toEqual(before);
      expect(h.gh.dispatches).toEqual([]);
      expect(h.gh.forbidden).toEqual([]);
      expect(h.gh.violations).toEqual([]);
    } finally {
      await h.close();
    }
  });

  it('doctor github: the same checks at any time, read-only; exit 1 while one fails, 0 once ready; --json', async () => {
    const h = await startHarness();
    try {
      h.gh.addRepo('acme/butter');
      h.gh.installationSelection.set(77, 'selected');
      const env = { SPARK_URL: h.c.url, SPARK_TOKEN: await h.operatorToken() };
      const before = await snapshot(h);
      const bad = await runSparkctlHere(['doctor', 'github', 'acme/butter'], env, home.dir);
      expect(bad.code).toBe(1);
      expect(bad.stdout).toMatch(/^fleet\n {2}fail hosts {9}/);
      expect(bad.stdout).toMatch(/^acme\/butter\n {2}ok {3}installation /m);
      expect(bad.stdout).toMatch(
        /^doctor github: 2 of 8 checks failed, 1 warning; enable acme\/butter would refuse$/m,
      );
      expect((await snapshot(h)).changes).toEqual(before.changes);
      expect((await snapshot(h)).repositories).toEqual([]);
      await readyFleet(h.c.ledger);
      const good = await runSparkctlHere(['doctor', 'github', 'acme/butter', '--json'], env, home.dir);
      expect(good.stderr).toBe('');
      expect(good.code).toBe(0);
      const report = JSON.parse(good.stdout);
      expect(report.ok).toBe(true);
      expect(report.repositories[0].checks.find((c: { id: string }) => c.id === 'labels')).toMatchObject({
        status: 'warn',
      });
      // every enabled repository (none yet)
      const all = await runSparkctlHere(['doctor', 'github'], env, home.dir);
      expect(all.code).toBe(0);
      expect(all.stdout).toContain('no repository is enabled (name one: sparkctl doctor github OWNER/NAME)');
      // the provisioning doctor's options mean nothing here
      const foreign = await runSparkctlHere(['doctor', 'github', '--imports', 'torch'], env, home.dir);
      expect(foreign.code).toBe(2);
      expect(h.gh.forbidden).toEqual([]);
      expect(h.gh.violations).toEqual([]);
    } finally {
      await h.close();
    }
  });

  it('deckard drill lends Deckard through the normal path, releases it and waits for the restore; doctor then passes', async () => {
    const h = await startHarness();
    try {
      h.gh.addRepo('acme/butter');
      const token = await h.operatorToken();
      const env = { SPARK_URL: h.c.url, SPARK_TOKEN: token };
      const target = { url: h.c.url, ops: token };
      await agentOnline(target);
      const drill = spawnSparkctl(bin, ['deckard', 'drill'], env, home.dir);
      await drill.waitFor(/drill r-1: lending deckard on spark-1 through a development lease/);
      await until('granted', async () => (await reservationOf(target, 'r-1'))?.status === 'allocated');
      await agentReportsPrepared(target, 'r-1');
      await drill.waitFor(/spark-1 lent: deckard drained, stopped, GPU verified free; releasing/);
      await until('releasing', async () => (await reservationOf(target, 'r-1'))?.status === 'releasing');
      await agentReportsCleaned(target, 'r-1');
      await drill.waitFor(/spark-1 restoring deckard: waiting for its model-ready check/);
      await agentReportsRestored(target, 'spark-1');
      const done = await drill.done;
      expect(done.stderr).toBe('');
      expect(done.code).toBe(0);
      expect(done.stdout).toMatch(
        /restore verified on spark-1: deckard lent to r-1, released and restored; its model-ready check passed/,
      );
      const doctor = await runSparkctlHere(['doctor', 'github', '--json'], env, home.dir);
      const deckard = JSON.parse(doctor.stdout).fleet.checks.find((c: { id: string }) => c.id === 'deckard');
      expect(deckard).toMatchObject({
        status: 'ok',
        summary: expect.stringMatching(/^deckard on spark-1 lent by r-1 and restored/),
      });
      // a host that does not serve Deckard cannot be drilled
      const wrong = await runSparkctlHere(['deckard', 'drill', '--host', 'spark-2'], env, home.dir);
      expect(wrong.code).toBe(2);
      expect(wrong.stderr).toMatch(/spark-2 serves no home service: there is nothing to drill/);
      expect(h.gh.violations).toEqual([]);
    } finally {
      await h.close();
    }
  });

  it('reports clearly when the controller has no repository route', async () => {
    const c = await startTestController({ modules: [apiModule] });
    try {
      const { createApiToken } = await import('../../functions/auth/tokens.ts');
      const { token } = await createApiToken(c.ledger, { name: 'ops', scopes: ['operate'] }, 'test');
      const res = await runSparkctl(
        bin,
        ['repo', 'enable', 'acme/butter', '--pair'],
        { SPARK_URL: c.url, SPARK_TOKEN: token },
        home.dir,
      );
      expect(res.code).toBe(6);
      expect(res.stderr.trim()).toBe(
        'sparkctl: no route for POST /api/v1/repositories/acme/butter/enable: this controller does not offer that API (is the part that serves it deployed?)',
      );
    } finally {
      await c.close();
    }
  });
});

describe('sparkctl command line: per-command help and options', () => {
  it("prints each command's own help with --help and with help COMMAND", async () => {
    const [reserveHelp, helpReserve, statusHelp, doctorHelp, top] = await Promise.all([
      runSparkctl(bin, ['reserve', '--help'], {}, home.dir),
      runSparkctl(bin, ['help', 'reserve'], {}, home.dir),
      runSparkctl(bin, ['status', '--help'], {}, home.dir),
      runSparkctl(bin, ['doctor', '--help'], {}, home.dir),
      runSparkctl(bin, ['--help'], {}, home.dir),
    ]);
    for (const r of [reserveHelp, helpReserve, statusHelp, doctorHelp, top]) {
      expect(r.code, r.stderr).toBe(0);
      expect(r.stderr).toBe('');
    }
    expect(reserveHelp.stdout).toMatch(/^Usage: sparkctl reserve \[options\]/);
    expect(reserveHelp.stdout).toMatch(/^ {2}--pair +two hosts, atomically$/m);
    expect(reserveHelp.stdout).toMatch(/^ {2}--timeout <duration> /m);
    expect(reserveHelp.stdout).not.toMatch(/^Commands:/m);
    expect(helpReserve.stdout).toBe(reserveHelp.stdout);
    expect(statusHelp.stdout).toMatch(/^Usage: sparkctl status \[options\] \[id\]/);
    expect(statusHelp.stdout).toMatch(/^ {2}--all /m);
    expect(statusHelp.stdout).not.toMatch(/--pair|--ttl/);
    expect(doctorHelp.stdout).toMatch(/^Usage: sparkctl doctor \[options\]/);
    expect(doctorHelp.stdout).toMatch(/^ {2}--model-cache <dir> /m);
    expect(top.stdout).toMatch(/^ {2}reserve \[options\] +request a development reservation/m);
    expect(top.stdout).toMatch(/Exit codes: 0 ok, 1 failed, 2 usage/);
  });

  it('rejects extra arguments, options of other commands and typos before calling the controller', async () => {
    // a closed port: a usage error must come first (exit 2), never "unreachable" (exit 3)
    const env = { SPARK_URL: 'http://127.0.0.1:9', SPARK_TOKEN: 'spk_api_x' };
    const run = (args: string[]) => runSparkctlHere(args, env, home.dir);
    const [extra, foreign, typo, missing, badChoice] = await Promise.all([
      run(['status', 'r-1', 'extra']),
      run(['fleet', '--pair', '--ttl', '4h']),
      run(['reserve', '--pari']),
      run(['release']),
      run(['host', 'frob', 'spark-1']),
    ]);
    for (const r of [extra, foreign, typo, missing, badChoice]) {
      expect(r.code, r.stderr).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
    }
    expect(extra.stderr.trim()).toBe(
      "sparkctl: status: too many arguments for 'status'. Expected 1 argument but got 2. (sparkctl status --help lists what it takes)",
    );
    expect(foreign.stderr.trim()).toBe(
      "sparkctl: fleet: unknown option '--pair' (sparkctl fleet --help lists what it takes)",
    );
    expect(typo.stderr).toMatch(/^sparkctl: reserve: unknown option '--pari' \(Did you mean --pair\?\)/);
    expect(missing.stderr).toMatch(/^sparkctl: release: missing required argument 'id'/);
    expect(badChoice.stderr).toMatch(/Allowed choices are adopt, unadopt, clear-quarantine/);
  });

  it('says the URL must be the controller root when it names the API path', async () => {
    ctl = await startApiController();
    const api = await runSparkctlHere(['--url', `${ctl.c.url}/api`, 'queue'], {}, home.dir);
    expect(api.code).toBe(2);
    expect(api.stderr.trim()).toBe(
      `sparkctl: invalid controller URL '${ctl.c.url}/api' (from --url): it must be the controller's root URL, e.g. ${ctl.c.url}, without /api (sparkctl adds /api/v1 itself)`,
    );
    const v1 = await runSparkctlHere(['queue'], { SPARK_URL: `${ctl.c.url}/api/v1/` }, home.dir);
    expect(v1.code).toBe(2);
    expect(v1.stderr).toMatch(/\(from SPARK_URL\): it must be the controller's root URL/);
    // another path prefix may be a proxy: it is tried, and a 404 says what to check
    const prefixed = await runSparkctlHere(['queue', '--url', `${ctl.c.url}/spark`], {}, home.dir);
    expect(prefixed.code).toBe(6);
    expect(prefixed.stderr.trim()).toBe(
      `sparkctl: no route for GET /spark/api/v1/queue: the controller URL ${ctl.c.url}/spark has the path /spark; it must be the controller's root URL (${ctl.c.url}, unless a proxy serves it under that path)`,
    );
  });

  it('renew past the maximum says it was capped and prints dates', async () => {
    ctl = await startApiController({ config: { timings: { ...FAST_TIMINGS, devLeaseMaxTtlS: 2 * 3600 } } });
    const { call, tokens, target } = ctl;
    await agentOnline(target);
    const id = (await call(tokens.dev, 'POST', '/api/v1/reservations', { host: 'spark-2', ttlS: 3600 })).body
      .reservation.id;
    await until('grant', async () => (await status(id)) === 'allocated');
    await agentReportsPrepared(target, id);
    const within = await sparkctl(['renew', id, '--ttl', '90m'], tokens.dev);
    expect(within.code).toBe(0);
    expect(within.stdout.trim()).toMatch(
      new RegExp(
        `^renewed ${id}: spark-2 until \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d UTC \\(in 1h (29m|30m)\\)$`,
      ),
    );
    const res = await sparkctl(['renew', id, '--ttl', '99h'], tokens.dev);
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    const [first, second] = res.stdout.trim().split('\n');
    expect(first).toMatch(
      new RegExp(
        `^renewed ${id}: spark-2 until \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d UTC \\(in (1h 59m|2h)\\)$`,
      ),
    );
    expect(second).toMatch(
      /^capped: you asked for 99h, but a development lease holds at most 2h from its grant \(\d{4}-\d\d-\d\d \d\d:\d\d UTC\); release and reserve again for more$/,
    );
    const lease = (await reservationOf(target, id))!.leases[0]!;
    expect(Date.parse(lease.expiresAt) - Date.parse(lease.grantedAt)).toBe(2 * 3600_000);
    // at the maximum, a further renewal is refused with the reason
    const again = await sparkctl(['renew', id, '--ttl', '30m'], tokens.dev);
    expect(again.code).toBe(7);
    expect(again.stderr).toMatch(/already runs to .*the most a development lease may hold/);
  });

  it('reserve --wait --timeout gives up with exit 8 and says the request is still queued and how to cancel it', async () => {
    ctl = await startApiController();
    await occupySpark2();
    const res = await sparkctl(['reserve', '--host', 'spark-2', '--wait', '--timeout', '1s'], ctl.tokens.dev);
    expect(res.code).toBe(8);
    expect(res.stderr.trim()).toMatch(
      /^sparkctl: gave up waiting for r-2 after 1s: r-2 queued · position 1 .*; r-2 is still queued \(position 1\) and stays in the queue: follow it with `sparkctl status r-2`, withdraw it with `sparkctl cancel r-2`$/,
    );
    expect(await status('r-2')).toBe('queued');
  });
});

describe('sparkctl doctor', () => {
  it('runs the in-job provisioning doctor with its own options, one named line per check', async () => {
    const { dir, cleanup } = tempDir('sparkctl-doctor-');
    try {
      const usage = await runSparkctl(bin, ['doctor', '--bogus'], {}, dir);
      expect(usage.code).toBe(2);
      expect(usage.stderr.trim()).toMatch(/^sparkctl: doctor: /);
      const res = await runSparkctl(
        bin,
        ['doctor', '--torch', 'skip', '--tools', 'sh', '--model-cache', dir],
        {},
        dir,
      );
      const lines = res.stdout.trim().split('\n');
      expect(lines.at(-1)).toMatch(/^doctor: (all \d+ checks passed|\d+ problem\(s\) found) in \d+\.\d s$/);
      expect(lines.slice(0, -1).every((l) => /^(ok {2}|FAIL|warn) \S+: /.test(l))).toBe(true);
      expect(res.code).toBe(lines.some((l) => l.startsWith('FAIL')) ? 1 : 0);
    } finally {
      cleanup();
    }
  });
});

describe('sparkctl admin (hands over to the controller script)', () => {
  /**
   * A stand-in checkout: this project's package.json, the dependencies, a `scripts/admin.ts` that
   * reports what it was given (TypeScript, so it proves tsx runs it) and the bundle in
   * `cli/dist/`, where `npm run build` puts it. The real script is the controller's; its own
   * tests cover what it writes.
   */
  function fakeCheckout(dir: string): string {
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'spark-controller', type: 'module' }));
    symlinkSync(join(repoRoot, 'node_modules'), join(dir, 'node_modules'));
    mkdirSync(join(dir, 'scripts'));
    writeFileSync(
      join(dir, 'scripts', 'admin.ts'),
      [
        'const args: string[] = process.argv.slice(2);',
        'const seen: { args: string[]; cwd: string; ledger: string | null } = {',
        '  args, cwd: process.cwd(), ledger: process.env.SPARK_LEDGER_URL ?? null };',
        'console.log(JSON.stringify(seen));',
        "const scopes = args[args.indexOf('--scopes') + 1];",
        "if (scopes === 'root') {",
        '  console.error("sparkctl: invalid --scopes \'" + scopes + "\': use a comma list of develop, operate, emergency");',
        '  process.exit(2);',
        '}',
        '',
      ].join('\n'),
    );
    mkdirSync(join(dir, 'cli', 'dist'), { recursive: true });
    const copy = join(dir, 'cli', 'dist', 'sparkctl.mjs');
    copyFileSync(bin, copy);
    return copy;
  }

  it("runs scripts/admin.ts of its checkout with the arguments untouched, in the caller's directory", async () => {
    const { dir, cleanup } = tempDir('sparkctl-admin-');
    try {
      const checkoutBin = fakeCheckout(dir);
      const cwd = join(dir, 'elsewhere');
      mkdirSync(cwd);
      const args = [
        'token',
        'create',
        '--name',
        'ops',
        '--scopes',
        'operate,emergency',
        '--ledger',
        'file:./x.db',
        '--json',
      ];
      const ok = await runSparkctl(
        checkoutBin,
        ['admin', ...args],
        { SPARK_LEDGER_URL: 'file:/env.db' },
        home.dir,
        cwd,
      );
      expect(ok.stderr).toBe('');
      expect(ok.code).toBe(0);
      const seen = JSON.parse(ok.stdout) as { args: string[]; cwd: string; ledger: string | null };
      expect(seen.args).toEqual(args);
      expect(realpathSync(seen.cwd)).toBe(realpathSync(cwd));
      expect(seen.ledger).toBe('file:/env.db');

      const bad = await runSparkctl(
        checkoutBin,
        ['admin', 'token', 'create', '--name', 'x', '--scopes', 'root'],
        {},
        home.dir,
        cwd,
      );
      expect(bad.code).toBe(2);
      expect(bad.stderr.trim()).toBe(
        "sparkctl: invalid --scopes 'root': use a comma list of develop, operate, emergency",
      );
    } finally {
      cleanup();
    }
  });

  it('says where to run it when the CLI is not inside a controller checkout', async () => {
    const { dir, cleanup } = tempDir('sparkctl-laptop-');
    try {
      const bundled = await runSparkctl(
        bin,
        ['admin', 'token', 'create', '--name', 'x', '--scopes', 'operate'],
        {},
        dir,
      );
      expect(bundled.code).toBe(2);
      expect(bundled.stderr.trim()).toMatch(
        /^sparkctl: admin needs the controller's checkout \(scripts\/admin\.ts not found\): run this on the controller host from the repository: npm run admin -- token create/,
      );
    } finally {
      cleanup();
    }
  });
});
