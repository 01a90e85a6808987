import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseAgentConfig } from '../../agent/config.ts';
import { checkSandbox, encodeEnv, leasePaths, repoCacheKey } from '../../agent/host/sandbox.ts';
import type { RunnerAccount } from '../../agent/runner.ts';
import type { LeaseState } from '../../agent/state-file.ts';
import { tempDir } from '../../scripts/sim/ledger.ts';

/**
 * The agent's side of its privileged helper (ADR 0155) and of the per-repository build cache
 * (ADR 0157): how the job environment is encoded for the helper's stdin, which cache a lease gets,
 * and the start-up check that refuses a helper whose settings are not the agent's.
 */

const cfg = (over: Record<string, unknown> = {}) =>
  parseAgentConfig(
    {
      controllerUrl: 'https://spark.example.org',
      hostId: 'spark-2',
      tokenFile: 'agent.token',
      stateFile: '/var/lib/spark-agent/state.json',
      workRoot: '/srv/spark/work',
      modelCacheDir: '/srv/spark/models',
      runner: { dir: '/opt/actions-runner' },
      ...over,
    },
    'agent.json',
    '/etc/spark-agent',
  );

const lease = (over: Partial<LeaseState> = {}): Pick<LeaseState, 'workDir' | 'kind' | 'repo'> => ({
  workDir: '/srv/spark/work/r-7-spark-2-t3',
  kind: 'manual',
  repo: 'Acme/Butter',
  ...over,
});

describe('the job environment on the helper’s stdin', () => {
  it('is NAME+VALUE lines, NAME=BASE64 for a value with a newline, ended by an empty line', () => {
    const text = encodeEnv({ A: 'x y\nz', EMPTY: '', RAW: ' a=b+c \\ $(x) ', SKIPPED: undefined });
    expect(text).toBe(`A=${Buffer.from('x y\nz').toString('base64')}\nEMPTY+\nRAW+ a=b+c \\ $(x) \n\n`);
    expect(() => encodeEnv({ 'BAD NAME': 'x' })).toThrow(TypeError);
    expect(() => encodeEnv({ 'A=B': 'x' })).toThrow(TypeError);
    expect(() => encodeEnv({ 'A+B': 'x' })).toThrow(TypeError);
    expect(() => encodeEnv({ A: 'x\0y' })).toThrow(/NUL/);
  });
});

describe('the build cache a lease gets (ADR 0157)', () => {
  it('is one per repository, named case-insensitively, under the work root', () => {
    expect(repoCacheKey('Acme/Butter')).toBe('acme+butter');
    expect(repoCacheKey('acme/butter')).toBe('acme+butter');
    expect(repoCacheKey('acme/butter.rs')).toBe('acme+butter.rs');
    expect(repoCacheKey('acme-corp/butter')).not.toBe(repoCacheKey('acme/corp-butter'));
    expect(repoCacheKey('.hidden/x')).toBeNull();
    expect(repoCacheKey('no-slash')).toBeNull();
    const p = leasePaths(cfg(), lease(), true);
    expect(p).toEqual({
      workDir: '/srv/spark/work/r-7-spark-2-t3',
      sandboxDir: '/srv/spark/work/r-7-spark-2-t3.sandbox',
      home: '/srv/spark/work/r-7-spark-2-t3.sandbox/home',
      tmp: '/srv/spark/work/r-7-spark-2-t3.sandbox/tmp',
      runnerWrites: '/srv/spark/work/r-7-spark-2-t3.sandbox/runner',
      buildCache: '/srv/spark/work/.build-cache/acme+butter',
      cacheKey: 'acme+butter',
    });
  });

  it("is the lease's own where sharing is not safe or not wanted", () => {
    const own = { buildCache: '/srv/spark/work/r-7-spark-2-t3/.build-cache', cacheKey: '-' };
    // outside the namespace (a Slurm job) every repository's cache would be reachable
    expect(leasePaths(cfg(), lease(), false)).toMatchObject(own);
    // development leases and work without a repository
    expect(leasePaths(cfg(), lease({ kind: 'development' }), true)).toMatchObject(own);
    expect(leasePaths(cfg(), lease({ repo: undefined }), true)).toMatchObject(own);
    // the operator turned sharing off
    expect(leasePaths(cfg({ buildCache: { perRepository: false } }), lease(), true)).toMatchObject(own);
  });
});

describe('the start-up check of the helper (ADR 0155)', () => {
  /** A stand-in helper printing what `spark-lease-sandbox CONFIG check` prints, or failing like it. */
  function helper(dir: string, settings: Record<string, string> | { fail: string }): string[] {
    const file = join(dir, 'helper.sh');
    const body =
      'fail' in settings
        ? `echo "spark-lease-sandbox: ${settings.fail}" >&2; exit 2`
        : `[ "$2" = check ] || exit 9\ncat <<'EOF'\n${Object.entries(settings)
            .map(([k, v]) => `${k}=${v}`)
            .join('\n')}\nEOF`;
    writeFileSync(file, `#!/bin/sh\n${body}\n`, { mode: 0o755 });
    return [file, '/etc/spark-agent/sandbox.conf'];
  }
  const account = (h: string[]): RunnerAccount => ({
    name: 'spark-runner',
    uid: 990,
    gid: 990,
    home: '/h',
    helper: h,
  });
  const good = {
    protocol: '2',
    runner_user: 'spark-runner',
    uid: '990',
    gid: '990',
    home: '/var/lib/spark-runner',
    work_root: '/srv/spark/work',
    runner_dir: '/opt/actions-runner',
    writable: '',
  };

  it('accepts a helper that agrees with agent.json', () => {
    const { dir, cleanup } = tempDir();
    try {
      expect(checkSandbox(cfg(), account(helper(dir, good)))).toMatchObject({ work_root: '/srv/spark/work' });
    } finally {
      cleanup();
    }
  });

  it('refuses to start on any disagreement, a model cache jobs could write, or a helper that fails', () => {
    const { dir, cleanup } = tempDir();
    try {
      const refuse =
        (settings: Parameters<typeof helper>[1], c = cfg()) =>
        () =>
          checkSandbox(c, account(helper(dir, settings)));
      expect(refuse({ ...good, runner_user: 'other' })).toThrow(
        /the helper's runner_user is "other" but runner.user is "spark-runner"/,
      );
      expect(refuse({ ...good, work_root: '/tmp/work' })).toThrow(/work_root is "\/tmp\/work" but workRoot/);
      expect(refuse({ ...good, runner_dir: '' })).toThrow(
        /runner_dir is "" but runner.dir is "\/opt\/actions-runner"/,
      );
      expect(refuse({ ...good, writable: '/srv/spark' })).toThrow(
        /modelCacheDir \/srv\/spark\/models overlaps \/srv\/spark, which jobs may write/,
      );
      expect(refuse(good, cfg({ modelCacheDir: '/srv/spark/work/models' }))).toThrow(
        /overlaps \/srv\/spark\/work/,
      );
      // a helper from an older release (no protocol line): it knows neither prepare-run nor NAME+VALUE
      const { protocol: _, ...old } = good;
      expect(refuse(old)).toThrow(
        /speaks protocol 1, this agent needs 2; reinstall agent\/host\/spark-lease-sandbox.sh/,
      );
      expect(refuse({ fail: 'configuration x must be owned by root' })).toThrow(
        /check failed: spark-lease-sandbox: configuration x must be owned by root; install the helper/,
      );
    } finally {
      cleanup();
    }
  });
});

describe('agent config: the sandbox settings', () => {
  it('defaults to the helper through sudo, a shared capped build cache and a bounded cleanup', () => {
    const c = cfg();
    expect(c.runner.helper).toEqual([
      'sudo',
      '-n',
      '-C',
      '5',
      '/usr/local/libexec/spark-lease-sandbox',
      '/etc/spark-lease-sandbox.conf',
    ]);
    expect(c.buildCache).toEqual({ perRepository: true, maxGiB: 100 });
    expect(c.timeouts.cleanupS).toBe(300);
    expect(() => cfg({ runner: { dir: '/opt/actions-runner', helper: ['sudo'] } })).toThrow(
      /runner.helper: give the helper as an argv prefix ending with its configuration file/,
    );
  });
});
