import { mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { taskWorkTree } from '../../agent/evidence/collect.ts';
import { runHostPreflight } from '../../agent/evidence/host-preflight.ts';
import { parseRunnerConsole, taskExitResult } from '../../agent/evidence/runner-result.ts';
import { parseHead, readWorkTrees, resolveRef } from '../../agent/evidence/work-tree.ts';
import type { HostPort } from '../../agent/host/port.ts';
import type { LeaseState } from '../../agent/state-file.ts';

/**
 * What the agent reads as the host's evidence (ADR 0160): the runner's console in the format
 * actions/runner prints it, a checkout's HEAD read as files (never by running git), and its own
 * preflight against a precise fake of the host port.
 */

const SHA = '7fc2a91d0c7a3e2f5b6a9d8c1e4f3a2b1c0d9e8f';

describe("the runner's own job result", () => {
  // actions/runner v2.336.0 src/Runner.Listener/JobDispatcher.cs, `{DateTime.UtcNow:u}` prefix
  const real = [
    '√ Connected to GitHub',
    '',
    "Current runner version: '2.336.0'",
    '2026-05-01 12:00:00Z: Listening for Jobs',
    '2026-05-01 12:00:03Z: Running job: spark-test',
    '2026-05-01 12:04:10Z: Job spark-test completed with result: Failed',
  ];
  it('is the one result line the listener prints', () => {
    expect(parseRunnerConsole(real)).toMatchObject({ result: 'Failed', job: 'spark-test' });
    for (const r of ['Succeeded', 'SucceededWithIssues', 'Canceled', 'Skipped', 'Abandoned'])
      expect(parseRunnerConsole([`2026-05-01 12:04:10Z: Job build completed with result: ${r}`]).result).toBe(
        r,
      );
  });
  it('is none when no job ended, when the line is not in the runner format, or when there are several', () => {
    expect(parseRunnerConsole(real.slice(0, 5))).toMatchObject({ result: null });
    expect(parseRunnerConsole(['Job spark-test completed with result: Succeeded']).result).toBeNull();
    expect(
      parseRunnerConsole(['2026-05-01 12:04:10Z: Job x completed with result: Passed']).result,
    ).toBeNull();
    const two = [...real, '2026-05-01 12:04:11Z: Job spark-test completed with result: Succeeded'];
    expect(parseRunnerConsole(two)).toMatchObject({
      result: null,
      detail: expect.stringContaining('2 job results'),
    });
  });
  it("is a task's exit status for a CI task", () => {
    expect(taskExitResult(0, false).result).toBe('Succeeded');
    expect(taskExitResult(3, false).result).toBe('Failed');
    expect(taskExitResult(null, true).result).toBe('Canceled');
    expect(taskExitResult(null, false).result).toBeNull();
  });
});

describe('the commit in the work tree', () => {
  it('parses HEAD and refs without echoing what a file holds', () => {
    expect(parseHead(`${SHA}\n`)).toEqual({ kind: 'sha', sha: SHA });
    expect(parseHead('ref: refs/heads/main\n')).toEqual({ kind: 'ref', ref: 'refs/heads/main' });
    for (const bad of [
      'ref: refs/../../agent.token',
      'ref: refs/heads/.hidden',
      'spk_agent_secret',
      `ref: ${SHA}`,
    ])
      expect(parseHead(bad)).toMatchObject({ kind: 'bad' });
    expect(JSON.stringify(parseHead('spk_agent_secret'))).not.toContain('spk_agent');
    expect(resolveRef('refs/heads/main', `${SHA}\n`, null)).toBe(SHA);
    const packed = `# pack-refs with: peeled fully-peeled sorted\n${'c'.repeat(40)} refs/heads/dev\n${SHA} refs/heads/main\n^${'d'.repeat(40)}\n`;
    expect(resolveRef('refs/heads/main', null, packed)).toBe(SHA);
    expect(resolveRef('refs/heads/gone', null, packed)).toBeNull();
  });

  it('reads <repo>/<repo> checkouts of the work folder as files: detached, symbolic, packed, broken', async () => {
    const work = mkdtempSync(join(tmpdir(), 'spark-evidence-work-'));
    const repo = (name: string, files: Record<string, string>) => {
      for (const [f, text] of Object.entries(files)) {
        mkdirSync(join(work, name, name, '.git', f, '..'), { recursive: true });
        writeFileSync(join(work, name, name, '.git', f), text);
      }
    };
    repo('butter', { HEAD: `${SHA}\n` });
    repo('iron', { HEAD: 'ref: refs/heads/main\n', 'refs/heads/main': `${'c'.repeat(40)}\n` });
    repo('packed', { HEAD: 'ref: refs/heads/main\n', 'packed-refs': `${'e'.repeat(40)} refs/heads/main\n` });
    repo('odd', { HEAD: 'garbage\n' });
    // a hostile config and hook in the checkout: read as files, nothing of it runs
    repo('hooked', {
      HEAD: `${SHA}\n`,
      config: '[core]\n\tfsmonitor = touch /tmp/spark-evidence-fsmonitor-ran\n',
      'hooks/post-checkout': '#!/bin/sh\ntouch /tmp/spark-evidence-hook-ran\n',
    });
    mkdirSync(join(work, '_temp', '_temp'), { recursive: true });
    mkdirSync(join(work, 'a', 'b', '.git'), { recursive: true });
    mkdirSync(join(work, 'nogit', 'nogit'), { recursive: true });
    symlinkSync('/etc', join(work, 'linked'));
    const { trees } = await readWorkTrees(work, null);
    const by = Object.fromEntries(trees.map((t) => [t.path, t]));
    expect(Object.keys(by).sort()).toEqual([
      'butter/butter',
      'hooked/hooked',
      'iron/iron',
      'nogit/nogit',
      'odd/odd',
      'packed/packed',
    ]);
    expect(by['butter/butter']).toMatchObject({ sha: SHA, detail: 'detached HEAD' });
    expect(by['iron/iron']).toMatchObject({ sha: 'c'.repeat(40), detail: 'HEAD is refs/heads/main' });
    expect(by['packed/packed']).toMatchObject({ sha: 'e'.repeat(40) });
    expect(by['odd/odd']).toMatchObject({ sha: null, detail: 'HEAD is neither a commit id nor a ref' });
    expect(by['nogit/nogit']).toMatchObject({ sha: null });
    expect(by['hooked/hooked']!.sha).toBe(SHA);
    expect(await readWorkTrees(join(work, 'missing'), null)).toEqual({
      trees: [],
      detail: 'the runner made no work folder',
    });
  });
});

describe('the agent host preflight', () => {
  const lease = (over: Partial<LeaseState> = {}): LeaseState => ({
    leaseId: 'l-spark-2-5',
    reservationId: 'r-1',
    fencingToken: 5,
    kind: 'manual',
    topology: 'single',
    lend: false,
    workDir: '/w/r-1-spark-2-t5',
    lendStep: 'none',
    phase: 'prepared',
    failure: null,
    runner: null,
    activeReported: false,
    remainReported: false,
    ...over,
  });
  const port = (over: Partial<HostPort> = {}): HostPort => ({
    exec: async () => ({ code: 0, signal: null, stdout: '', stderr: '', error: null }),
    queryGpu: async () => ({ ok: true, processes: [] }),
    probeHealth: async () => ({ ok: false, status: null, detail: 'health check unreachable: ECONNREFUSED' }),
    waitHealthy: async () => ({ ok: true, status: 200, detail: 'HTTP 200' }),
    freeDiskBytes: () => 1e12,
    now: () => 42,
    ...over,
  });
  const cfg = { workRoot: '/w', service: null, interconnectCheck: null };
  const service = {
    name: 'deckard',
    drain: ['d'],
    stop: ['s'],
    start: ['t'],
    healthUrl: 'http://127.0.0.1:1/ready',
    commandTimeoutS: 1,
    releaseVerifyTimeoutS: 1,
    healthPollMs: 1,
    unhealthyAfterS: 60,
  };

  it('passes a free host, and warns (only) about ptrace scope 0', async () => {
    const p = await runHostPreflight({ cfg, port: port(), account: null, ptraceScope: () => '0' }, lease());
    expect(p.ok).toBe(true);
    expect(p.at).toBe(42);
    expect(p.checks.map((c) => `${c.name}:${c.ok ? 'ok' : c.fatal ? 'FAIL' : 'warn'}`)).toEqual([
      'gpu:ok',
      'disk:ok',
      'ptrace-scope:warn',
    ]);
  });

  it('fails on a GPU process, a GPU that cannot be read, an unreadable work root', async () => {
    const busy = await runHostPreflight(
      {
        cfg,
        port: port({
          queryGpu: async () => ({
            ok: true,
            processes: [{ pid: 7, name: '/usr/bin/python3', usedMemoryMiB: 1 }],
          }),
        }),
        account: null,
        ptraceScope: () => '1',
      },
      lease(),
    );
    expect(busy.ok).toBe(false);
    expect(busy.checks[0]).toMatchObject({
      name: 'gpu',
      ok: false,
      detail: expect.stringContaining('pid 7 python3'),
    });
    const unknown = await runHostPreflight(
      {
        cfg,
        port: port({ queryGpu: async () => ({ ok: false, error: 'nvidia-smi exited 9' }) }),
        account: null,
        ptraceScope: () => '1',
      },
      lease(),
    );
    expect(unknown.ok).toBe(false);
    const disk = await runHostPreflight(
      { cfg, port: port({ freeDiskBytes: () => null }), account: null, ptraceScope: () => '1' },
      lease(),
    );
    expect(disk.ok).toBe(false);
  });

  it('proves a lent home service is gone: refused passes, ready or hung fails', async () => {
    const lent = lease({ lend: true, lendStep: 'lent' });
    const c = { ...cfg, service };
    const refused = await runHostPreflight(
      { cfg: c, port: port(), account: null, ptraceScope: () => '1' },
      lent,
    );
    expect(refused.checks.find((x) => x.name === 'deckard')).toMatchObject({ ok: true });
    const ready = await runHostPreflight(
      {
        cfg: c,
        port: port({ probeHealth: async () => ({ ok: true, status: 200, detail: 'HTTP 200' }) }),
        account: null,
        ptraceScope: () => '1',
      },
      lent,
    );
    expect(ready.ok).toBe(false);
    const hung = await runHostPreflight(
      {
        cfg: c,
        port: port({
          probeHealth: async () => ({
            ok: false,
            status: null,
            detail: 'health check unreachable: no answer within 3000 ms',
          }),
        }),
        account: null,
        ptraceScope: () => '1',
      },
      lent,
    );
    expect(hung.ok).toBe(false);
    const notLent = await runHostPreflight(
      { cfg: c, port: port(), account: null, ptraceScope: () => '1' },
      lease({ lend: true, lendStep: 'stopping' }),
    );
    expect(notLent.ok).toBe(false);
  });

  it("runs a pair's interconnect check, failing when it fails and warning when none is configured", async () => {
    const pair = lease({ topology: 'pair' });
    const none = await runHostPreflight({ cfg, port: port(), account: null, ptraceScope: () => '1' }, pair);
    expect(none.ok).toBe(true);
    expect(none.checks.find((c) => c.name === 'interconnect')).toMatchObject({ ok: false, fatal: false });
    const down = await runHostPreflight(
      {
        cfg: { ...cfg, interconnectCheck: ['/usr/local/bin/check-link'] },
        port: port({
          exec: async () => ({ code: 1, signal: null, stdout: '', stderr: 'link down', error: null }),
        }),
        account: null,
        ptraceScope: () => '1',
      },
      pair,
    );
    expect(down.ok).toBe(false);
    expect(down.checks.find((c) => c.name === 'interconnect')!.detail).toContain('link down');
  });
});

describe('a task checkout', () => {
  it("is the first commit binding line, printed before the repository's code ran", () => {
    const out = [
      'spark-task: fetching x',
      `spark-task: commit binding ok: HEAD is ${SHA}`,
      'spark-task: phase smoke start',
      `spark-task: commit binding ok: HEAD is ${'f'.repeat(40)}`,
    ].join('\n');
    expect(taskWorkTree(out)).toMatchObject({ path: 'checkout', sha: SHA });
    expect(taskWorkTree('spark-task: checkout failed').sha).toBeNull();
  });
});
