import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { createClient } from '@libsql/client';
import { sign } from '@octokit/webhooks-methods';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../core/config.ts';
import { createApiToken } from '../../functions/auth/tokens.ts';
import { openLedgerDb } from '../../functions/ledger/db.ts';
import { Ledger } from '../../functions/ledger/ledger.ts';
import { example } from '../../scripts/sim/fake-github/harness.ts';
import { type FakeGitHub, startFakeGitHub } from '../../scripts/sim/fake-github/server.ts';
import { type FakeSqld, startFakeSqld } from '../../scripts/sim/fake-sqld/server.ts';
import { tempDir } from '../../scripts/sim/ledger.ts';
import { startWranglerDev, type WranglerDev } from '../helpers/wrangler-dev.ts';

function run(
  cmd: string,
  args: string[],
  env: Record<string, string>,
): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (b) => {
      out += String(b);
    });
    p.stderr.on('data', (b) => {
      out += String(b);
    });
    p.on('close', (code) => resolve({ code, out }));
  });
}

/**
 * The whole GitHub front door on the Workers runtime: `npm run deploy -- --migrate-only` migrates
 * a remote (Hrana over HTTP) ledger, the Worker runs in workerd, a signed label webhook queues a
 * reservation in that ledger, and the outbox is drained into a check run on the fake GitHub
 * right after that request (waitUntil), without waiting for the cron trigger.
 */
describe('Worker with a reachable remote ledger', () => {
  const SECRET = 'worker-e2e-secret';
  const REPO = 'Codertocat/Hello-World';
  let sqld: FakeSqld;
  let gh: FakeGitHub;
  let dev: WranglerDev;
  let ledger: Ledger;
  let cleanup: () => void;

  beforeAll(async () => {
    const t = tempDir('spark-worker-ledger-');
    cleanup = t.cleanup;
    sqld = await startFakeSqld({ path: join(t.dir, 'ledger.db') });
    // async: the fake sqld answers from this process, so a sync spawn would deadlock
    const migrate = await run(process.execPath, ['--import', 'tsx', 'scripts/deploy.ts', '--migrate-only'], {
      PATH: process.env.PATH ?? '',
      HOME: t.dir,
      SPARK_LEDGER_URL: sqld.url,
    });
    expect(migrate.code, migrate.out).toBe(0);
    expect(migrate.out).toMatch(/ledger migrations applied/);
    gh = await startFakeGitHub();
    // the spec's path: a runner group restricted to the enabled repositories
    gh.addRunnerGroup(2, 'spark', 'selected', [REPO]);
    gh.addRepo(REPO, { installationId: 1, collaborators: { Codertocat: 'maintain' } });
    const config = { github: { apiUrl: gh.url, runnerGroupId: 2 } };
    const store = await openLedgerDb({ url: sqld.url, createClient });
    ledger = new Ledger(store, { config: parseConfig(config) });
    dev = await startWranglerDev({
      SPARK_LEDGER_URL: sqld.url,
      SPARK_WEBHOOK_SECRET: SECRET,
      SPARK_GITHUB_APP_ID: String(gh.appId),
      // one line, as `wrangler secret put` users often store it; the client restores newlines
      SPARK_GITHUB_PRIVATE_KEY: gh.privateKey.replace(/\n/g, '\\n'),
      SPARK_CONFIG_JSON: JSON.stringify(config),
    });
  }, 90_000);

  afterAll(async () => {
    await dev?.stop();
    ledger?.store.close();
    await gh?.close();
    await sqld?.close();
    cleanup?.();
  });

  it('health is ok on the Workers runtime', async () => {
    const res = await fetch(`${dev.url}/healthz`);
    expect(await res.json()).toEqual({ ok: true, ledger: 'reachable', writable: true, runtime: 'worker' });
  });

  it('enable → signed label → queued in the ledger → the check run is sent right after the request', async () => {
    const { token } = await createApiToken(ledger, { name: 'ops', scopes: ['operate'] }, 'test');
    // the hosts stay without heartbeats (no grants) and Deckard was never lent: the fleet checks
    // are overridden as an operator may (docs/adr/0165-enable-is-a-gate.md); the GitHub checks run
    // on the Workers runtime against the fake GitHub
    for (const host of ledger.config.hosts) await ledger.setManaged(host.id, true, 'test');
    const enable = await fetch(`${dev.url}/api/v1/repositories/${REPO}/enable`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ override: ['hosts', 'deckard', 'dstack'] }),
    });
    expect(enable.status).toBe(200);
    const enabled = await enable.json();
    expect(
      Object.fromEntries(
        enabled.readiness.checks.map((c: { id: string; status: string }) => [c.id, c.status]),
      ),
    ).toMatchObject({
      installation: 'ok',
      'runner-group': 'ok',
      workflow: 'ok',
      hosts: 'fail',
      deckard: 'fail',
    });
    expect(enabled.overridden.map((o: { id: string }) => o.id)).toEqual(['hosts', 'deckard']);

    const p = example('pull_request', 'labeled');
    p.label.name = 'spark-test';
    p.pull_request.labels = [{ ...p.label }];
    const body = JSON.stringify(p);
    const res = await fetch(`${dev.url}/github/webhooks`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-github-event': 'pull_request',
        'x-github-delivery': 'worker-e2e-1',
        'x-hub-signature-256': await sign(SECRET, body),
      },
      body,
      signal: AbortSignal.timeout(10_000),
    }).catch((e) => {
      throw new Error(`webhook POST failed (${e}):\n${dev.output().slice(-3000)}`);
    });
    // the inbox acknowledges; the Worker processes the delivery in waitUntil after answering
    expect(res.status).toBe(202);
    expect(await res.json()).toMatchObject({ ok: true, accepted: true, delivery: 'worker-e2e-1' });
    const processedBy = Date.now() + 15_000;
    while ((await ledger.getReservation(undefined, 'r-1'))?.status !== 'queued') {
      if (Date.now() > processedBy)
        throw new Error(`delivery not processed after the 202:\n${dev.output().slice(-3000)}`);
      await new Promise((r) => setTimeout(r, 50));
    }

    // the outbox is drained right after the request that filled it (waitUntil): this test never
    // calls the scheduled handler, and wrangler dev fires no cron by itself
    const deadline = Date.now() + 30_000;
    while (!gh.checkRuns.some((c) => c.external_id === 'r-1')) {
      if (Date.now() > deadline)
        throw new Error(`no check run without a cron tick:\n${dev.output().slice(-3000)}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    const check = gh.checkRuns.find((c) => c.external_id === 'r-1')!;
    expect(check.output.title).toMatch(/^Spark test queued/);
    expect(gh.violations).toEqual([]);
  });
});
