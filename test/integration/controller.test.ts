import { type ChildProcess, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, type TestContext } from 'vitest';
import { servingFacts, tempDir } from '../../scripts/sim/ledger.ts';
import { controllerEntry } from '../../scripts/sim/load/controllers.ts';
import { startTestController } from '../helpers/controller.ts';

/** Kills `child` when the test finishes, whatever happened (the tests run concurrently). */
function reap(ctx: TestContext, child: ChildProcess): void {
  ctx.onTestFinished(() => {
    child.kill('SIGKILL');
  });
}

/** `npm start` as written: the source through tsx (the other process tests start the run's bundle). */
const NPM_START = ['--import', 'tsx', 'functions/node.ts'];

/**
 * Starts the controller: `entry` is the test run's bundle by default (test/setup/controller-bundle.ts,
 * docs/adr/0255-controller-bundle-for-tests.md), {@link NPM_START} for the test of the real entry.
 */
function startProcess(ctx: TestContext, env: Record<string, string>, entry = controllerEntry()) {
  const child = spawn(process.execPath, entry, {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  reap(ctx, child);
  let out = '';
  let err = '';
  child.stdout!.on('data', (d) => {
    out += d;
  });
  child.stderr!.on('data', (d) => {
    err += d;
  });
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  const url = new Promise<string>((resolve, reject) => {
    child.stdout!.on('data', () => {
      const m = /listening on (http:\/\/[\d.:]+)/.exec(out);
      if (m) resolve(m[1]!);
    });
    void exited.then((code) => reject(new Error(`controller exited ${code}: ${err}`)));
  });
  return { child, url, exited, output: () => ({ out, err }) };
}

// concurrent: each test has its own dirs, ledger files and processes; they mostly wait on process start-ups
describe.concurrent('Node controller (npm start)', () => {
  it('starts as a process with an embedded ledger file and answers health, fleet and queue', async (ctx) => {
    const { dir, cleanup } = tempDir();
    try {
      const cfg = join(dir, 'spark.config.json');
      writeFileSync(cfg, JSON.stringify({ listen: { host: '127.0.0.1', port: 0 } }));
      const p = startProcess(
        ctx,
        { SPARK_CONFIG: cfg, SPARK_LEDGER_URL: `file:${join(dir, 'ledger', 'spark.db')}` },
        NPM_START,
      );
      const url = await p.url;
      const health = await fetch(`${url}/healthz`);
      expect(health.status).toBe(200);
      expect(await health.json()).toMatchObject({ ok: true, ledger: 'reachable' });
      const fleet = (await (await fetch(`${url}/api/v1/fleet`)).json()) as {
        hosts: { id: string; state: string }[];
      };
      expect(fleet.hosts.map((h) => [h.id, h.state])).toEqual([
        ['spark-1', 'unknown'],
        ['spark-2', 'unknown'],
      ]);
      const queue = await (await fetch(`${url}/api/v1/queue`)).json();
      expect(queue).toMatchObject({ queued: [], active: [] });
      const missing = await fetch(`${url}/api/v1/nothing-here`);
      expect(missing.status).toBe(404);
      expect(await missing.json()).toEqual({
        error: { code: 'not_found', message: 'no route for GET /api/v1/nothing-here' },
      });
      p.child.kill('SIGTERM');
      expect(await p.exited).toBe(0);
    } finally {
      cleanup();
    }
  });

  it('refuses a wrong config with exit code 2 and a message naming the field', async (ctx) => {
    const { dir, cleanup } = tempDir();
    try {
      const cfg = join(dir, 'spark.config.json');
      writeFileSync(cfg, JSON.stringify({ budgets: { maxGpus: -1 } }));
      const p = startProcess(ctx, { SPARK_CONFIG: cfg, SPARK_LEDGER_URL: `file:${join(dir, 'spark.db')}` });
      p.url.catch(() => undefined);
      expect(await p.exited).toBe(2);
      expect(p.output().err).toMatch(/Invalid configuration in .*spark\.config\.json[\s\S]*budgets\.maxGpus/);
    } finally {
      cleanup();
    }
  });

  it('health is 503 with the error shape when the ledger cannot be reached', async () => {
    const c = await startTestController({ listen: false });
    try {
      expect((await c.app.request('/healthz')).status).toBe(200);
      c.ledger.store.client.close();
      const res = await c.app.request('/healthz');
      expect(res.status).toBe(503);
      expect(await res.json()).toEqual({
        error: { code: 'ledger_unreachable', message: 'the ledger cannot be reached' },
      });
    } finally {
      await c.close().catch(() => undefined);
    }
  });

  it('admits work when events happen, not only on a timer, and the public views stay sanitized', async () => {
    // the safety-net timer is an hour away: only the reservation event can trigger this grant
    const c = await startTestController({ listen: false, admissionIntervalMs: 3_600_000 });
    try {
      const { ledger } = c;
      await ledger.setManaged('spark-1', true, 'test');
      await ledger.setManaged('spark-2', true, 'test');
      await ledger.recordHeartbeat('spark-1', servingFacts());
      await ledger.recordHeartbeat('spark-2', {
        gpuProcesses: [],
        freeDiskBytes: 1e12,
        serviceState: 'none',
        runnerState: 'none',
        interconnectOk: true,
      });
      const r = await ledger.createReservation(
        {
          kind: 'manual',
          topology: 'single',
          repo: 'acme/butter',
          pr: 7,
          headSha: '7fc2a91'.padEnd(40, '0'),
          suite: 'smoke',
          requester: 'octo-maintainer',
        },
        'test',
      );
      // the event-driven loop grants without anyone calling a pass; poll the public API
      const deadline = Date.now() + 5000;
      let queue: { active: { id: string; hosts: string[]; prUrl: string }[] } = { active: [] };
      while (Date.now() < deadline) {
        queue = (await (await c.app.request('/api/v1/queue')).json()) as typeof queue;
        if (queue.active.length) break;
        await new Promise((res) => setTimeout(res, 20));
      }
      expect(queue.active[0]).toMatchObject({
        id: r.id,
        hosts: ['spark-2'],
        prUrl: 'https://github.com/acme/butter/pull/7',
      });
      const body =
        JSON.stringify(queue) + JSON.stringify(await (await c.app.request('/api/v1/fleet')).json());
      expect(body).not.toContain('octo-maintainer');
      expect(body).not.toContain('fencing');
      expect(body).not.toContain('deckard-server');
    } finally {
      await c.close();
    }
  });
});

/** Runs `node --import tsx scripts/admin.ts …` from the repository root, as `sparkctl admin` does. */
function runAdmin(ctx: TestContext, args: string[], env: Record<string, string> = {}) {
  const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/admin.ts', ...args], {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  reap(ctx, child);
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d) => {
    stdout += d;
  });
  child.stderr!.on('data', (d) => {
    stderr += d;
  });
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((r) =>
    child.on('exit', (code) => r({ code, stdout, stderr })),
  );
}

describe.concurrent('admin bootstrap (npm run admin -- token create)', () => {
  it('creates the first operate token in the ledger file; it works against the controller', async (ctx) => {
    const { dir, cleanup } = tempDir();
    const ledgerUrl = `file:${join(dir, 'spark.db')}`;
    try {
      const created = await runAdmin(ctx, [
        'token',
        'create',
        '--name',
        'ops',
        '--scopes',
        'operate,emergency',
        '--ledger',
        ledgerUrl,
      ]);
      expect(created.stderr).toBe('');
      expect(created.code).toBe(0);
      const lines = created.stdout.trim().split('\n');
      expect(lines[0]).toMatch(/^created token tok-[0-9a-f]{12} "ops" with scopes operate, emergency$/);
      const token = /^token \(shown once, store it now\): (spk_api_\S+)$/.exec(lines[1]!)?.[1];
      expect(token).toBeDefined();
      expect(lines.slice(2)).toEqual([
        `use it with: export SPARK_TOKEN=${token}`,
        `(written to ${ledgerUrl})`,
      ]);

      const json = await runAdmin(ctx, [
        'token',
        'create',
        '--name',
        'ci',
        '--scopes',
        'operate',
        '--expires',
        '30d',
        '--ledger',
        ledgerUrl,
        '--json',
      ]);
      expect(json.code).toBe(0);
      const ci = JSON.parse(json.stdout) as { expiresAt: string };
      expect(Object.keys(ci)).toEqual(['id', 'token', 'name', 'scopes', 'expiresAt', 'ledgerUrl']);
      // 30 days from now (the process's clock), to within the time this test takes
      expect(Math.abs(Date.parse(ci.expiresAt) - (Date.now() + 30 * 86_400_000))).toBeLessThan(600_000);

      const c = await startTestController({ ledgerUrl });
      try {
        const who = await fetch(`${c.url}/api/v1/whoami`, { headers: { authorization: `Bearer ${token}` } });
        expect(await who.json()).toMatchObject({ name: 'ops', scopes: ['operate', 'emergency'] });
        // the creation is in the history, attributed to the local admin
        const events = await c.ledger.recentEvents(200);
        expect(events.filter((e) => e.type === 'token.created').map((e) => e.actor)).toEqual([
          'admin:local',
          'admin:local',
        ]);
      } finally {
        await c.close();
      }
    } finally {
      cleanup();
    }
  });

  it('refuses bad arguments with exit 2 and an unreachable ledger with exit 3', async (ctx) => {
    // four independent invocations (none opens a ledger it could share), started together
    const [bad, never, usage, down] = await Promise.all([
      runAdmin(ctx, ['token', 'create', '--name', 'x', '--scopes', 'root']),
      runAdmin(ctx, ['token', 'create', '--name', 'x', '--scopes', 'operate', '--expires', 'soon']),
      runAdmin(ctx, ['token', 'delete']),
      runAdmin(ctx, [
        'token',
        'create',
        '--name',
        'x',
        '--scopes',
        'operate',
        '--ledger',
        'http://127.0.0.1:9',
      ]),
    ]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/invalid --scopes 'root': use a comma list of develop, operate, emergency/);
    expect(bad.stdout).toBe('');
    expect(never.code).toBe(2);
    expect(never.stderr).toMatch(/invalid --expires 'soon': use e\.g\. 30d/);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toMatch(/usage: sparkctl admin token create --name NAME --scopes/);
    expect(down.code).toBe(3);
    expect(down.stderr).toMatch(/cannot open the ledger http:\/\/127\.0\.0\.1:9/);
  });
});
