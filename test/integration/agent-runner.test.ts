import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  isRunnerAlive,
  readExitCode,
  redactLines,
  startRunner,
  stopRunner,
  tailLines,
} from '../../agent/runner.ts';
import { RateLimiter } from '../../functions/agent-api/rate-limit.ts';
import { waitFor } from '../../scripts/sim/doubles/index.ts';
import { tempDir } from '../../scripts/sim/ledger.ts';

describe('runner process control', () => {
  it('passes the JIT config by environment only and records the exit status in the run dir', async () => {
    const { dir, cleanup } = tempDir();
    try {
      const script = join(dir, 'runner.sh');
      writeFileSync(
        script,
        '#!/bin/sh\necho "args: $*"\ncase "$(cat /proc/$$/cmdline | tr "\\0" " ")" in *secret-jit*) exit 90;; esac\n[ "$ACTIONS_RUNNER_INPUT_JITCONFIG" = "secret-jit" ] || exit 91\necho done\nexit 4\n',
        { mode: 0o755 },
      );
      const runDir = join(dir, 'run');
      const r = startRunner({
        runDir,
        command: [script],
        workDir: dir,
        env: { ...process.env, ACTIONS_RUNNER_INPUT_JITCONFIG: 'secret-jit' },
        account: null,
      });
      await r.exited;
      await waitFor('exit file', () => readExitCode(runDir) != null, 5000);
      expect(readExitCode(runDir)).toBe(4);
      expect(tailLines(runDir)).toEqual(['args:', 'done']);
      expect(isRunnerAlive(r.pid, r.startTicks)).toBe(false);
    } finally {
      cleanup();
    }
  });

  it('stops the whole process group it started, escalating to SIGKILL after the grace', async () => {
    const { dir, cleanup } = tempDir();
    try {
      const script = join(dir, 'stubborn.sh');
      writeFileSync(script, '#!/bin/sh\ntrap "" TERM\nsleep 30 &\nwait\n', { mode: 0o755 });
      const r = startRunner({
        runDir: join(dir, 'run'),
        command: [script],
        workDir: dir,
        env: process.env,
        account: null,
      });
      await waitFor('runner alive', () => isRunnerAlive(r.pid, r.startTicks), 5000);
      await stopRunner(r.pid, r.startTicks, 300);
      expect(isRunnerAlive(r.pid, r.startTicks)).toBe(false);
    } finally {
      cleanup();
    }
  });

  it('does not treat a reused pid with a different start time as its runner', () => {
    expect(isRunnerAlive(process.pid, '1')).toBe(false);
  });

  it('redacts secrets and long base64 blobs from evidence lines', () => {
    const jit = 'eyJ'.padEnd(200, 'A');
    expect(redactLines([`config ${jit}`, 'token spk_job_abcdefgh', 'ok'], [jit, 'spk_job_abcdefgh'])).toEqual(
      ['config [redacted]', 'token [redacted]', 'ok'],
    );
  });
});

describe('agent API rate limiter', () => {
  it('allows a burst, then refills at the configured rate', () => {
    let now = 0;
    const rl = new RateLimiter(30, () => now);
    for (let i = 0; i < 5; i++) expect(rl.take('a')).toBe(0);
    expect(rl.take('a')).toBeGreaterThan(0);
    expect(rl.take('b')).toBe(0);
    now += 2000;
    expect(rl.take('a')).toBe(0);
    expect(() => new RateLimiter(0)).toThrow(TypeError);
  });
});
