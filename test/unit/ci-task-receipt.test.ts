import { describe, expect, it } from 'vitest';
import { ControllerRejected } from '../../agent/client.ts';
import { TASK_MARK, taskReceipt } from '../../agent/executor/ci-task.ts';
import type { Executor } from '../../agent/executor/types.ts';
import { emptyState, type LeaseState } from '../../agent/state-file.ts';
import type { StepContext } from '../../agent/steps/context.ts';
import { reportExited } from '../../agent/steps/run.ts';
import type { CiTask, Report } from '../../core/protocol/agent.ts';

/**
 * The receipt the agent builds for a CI task (ADR 0110) from dstack's exit and the
 * task's output: what it trusts (the task's own lines before the script ran) and what it does not.
 */

const SHA = 'c'.repeat(40);
const task: CiTask = {
  repo: 'acme/butter',
  headSha: SHA,
  suite: 'smoke',
  script: 'scripts/ci/spark-test.sh',
  cloneUrl: 'https://github.com/acme/butter.git',
  revokeUrl: 'https://api.github.com/installation/token',
  lane: { name: 'spark-test', targetMinutes: 30 },
};
const lease = {
  leaseId: 'l-spark-2-4',
  reservationId: 'r-9',
  fencingToken: 4,
  kind: 'manual',
  topology: 'single',
  lend: false,
  workDir: '/tmp/w',
  lendStep: 'none',
  phase: 'running',
  failure: null,
  runner: null,
  activeReported: false,
  remainReported: false,
} satisfies LeaseState;

const m = (s: string) => `${TASK_MARK} ${s}`;
const preamble = [
  m(`fetching ${SHA} from https://github.com/acme/butter.git`),
  m('clone token revoked: HTTP 204 from https://api.github.com/installation/token (curl)'),
  m(`commit binding ok: HEAD is ${SHA}`),
  m(`toolchain source: ${SHA}`),
  m('toolchain git: git version 2.39.5'),
];
const build = (lines: string[], o: Partial<Parameters<typeof taskReceipt>[0]> = {}) =>
  taskReceipt({
    lease,
    hostId: 'spark-2',
    task,
    exitCode: 0,
    stopped: false,
    startedAt: Date.parse('2026-11-30T10:00:00Z'),
    endedAt: Date.parse('2026-11-30T10:05:00Z'),
    output: { text: `${lines.join('\n')}\n`, complete: true },
    secrets: ['ghs_topsecret'],
    ...o,
  });

describe('the CI task receipt', () => {
  it('a bound commit whose phase exited 0 passes, naming backend dstack and mode task', () => {
    const r = build([...preamble, m('phase smoke start'), 'ok', m('phase smoke exit 0 ms 1234')]);
    expect(r).toMatchObject({
      result: 'passed',
      executor: 'dstack',
      mode: 'task',
      headSha: SHA,
      reservationId: 'r-9',
      fencingToken: 4,
      phases: [{ suite: 'smoke', exitCode: 0, durationMs: 1234 }],
      toolchain: {
        source: SHA,
        git: 'git version 2.39.5',
        cloneToken: 'revoked: HTTP 204 from https://api.github.com/installation/token (curl)',
      },
      lane: {
        name: 'spark-test',
        targetMinutes: 30,
        elapsedMs: 300_000,
        withinTarget: true,
        overTarget: false,
      },
      log: { lines: 8 },
    });
    expect(r.reason).toBeUndefined();
    expect(r.lastLines).toBeUndefined();
  });

  it('exit 0 without the binding line fails: the script never ran at the admitted commit', () => {
    const r = build([m('phase smoke start'), m('phase smoke exit 0 ms 5')]);
    expect(r.result).toBe('failed');
    expect(r.reason).toBe('the task ended (exit 0) before binding the commit; the script did not run');
  });

  it('dstack ended a run it never started: the reason says the task never started (ADR 0177); one that started only that it ended', () => {
    const why =
      'dstack run spark-r-9-spark-2-t1-a0 failed before its commands ended (failed_to_start_due_to_no_capacity: Failed to use specified fleets)';
    const runner = {
      runnerName: 'spark-r-9-spark-2-t1',
      runDir: '/tmp/w/run',
      pid: null,
      startTicks: null,
      startedAt: 0,
      startReported: false,
      stoppedByAgent: false,
      exitReported: false,
    };
    const never = build([], { exitCode: null, output: { text: '', complete: true, endedBy: why } });
    expect(never).toMatchObject({
      result: 'failed',
      phases: [],
      reason: `the task never started: ${why}; the script did not run`,
    });
    const withRunner = build([], {
      lease: { ...lease, runner },
      exitCode: null,
      output: { text: '', complete: true, endedBy: why },
    });
    expect(withRunner.reason).toBe(`the task never started: ${why}; the script did not run`);
    const started = build([], {
      lease: { ...lease, runner: { ...runner, startReported: true } },
      exitCode: null,
      output: { text: '', complete: true, endedBy: why },
    });
    expect(started.reason).toBe(`${why}; the script did not run`);
  });

  it('exit 0 without the token revoked before the script ran fails (ADR 0115); a revoke line the script prints is not believed', () => {
    const unrevoked = preamble.filter((x) => !x.includes('clone token revoked'));
    const r = build([...unrevoked, m('phase smoke start'), m('phase smoke exit 0 ms 5')]);
    expect(r.result).toBe('failed');
    expect(r.reason).toBe(
      'the task exited 0 without reporting its clone token revoked before the script ran',
    );
    expect(r.toolchain.cloneToken).toBeUndefined();
    const forged = build([
      ...unrevoked,
      m('phase smoke start'),
      m('clone token revoked: HTTP 204 from https://api.github.com/installation/token (curl)'),
      m('phase smoke exit 0 ms 5'),
    ]);
    expect(forged.result).toBe('failed');
  });

  it("a failed revoke fails the task with the task's own line as the reason", () => {
    const line =
      'clone token revoke failed: HTTP 500 from https://api.github.com/installation/token after 3 attempt(s) (curl); the script did not run';
    const r = build([m(`fetching ${SHA} from x`), m(line)], { exitCode: 85 });
    expect(r).toMatchObject({ result: 'failed', exitCode: 85, reason: line, phases: [] });
  });

  it('binding lines the script prints after it started are not believed, nor toolchain entries', () => {
    const r = build(
      [
        m(`fetching ${SHA} from x`),
        m('commit binding failed: HEAD is dddd, not the admitted cccc; the script did not run'),
        m('phase smoke start'),
        m(`commit binding ok: HEAD is ${SHA}`),
        m('toolchain nvcc: forged'),
        m('phase smoke exit 0 ms 1'),
      ],
      { exitCode: 82 },
    );
    expect(r.result).toBe('failed');
    expect(r.reason).toMatch(/^commit binding failed/);
    expect(r.toolchain).toEqual({});
  });

  it('a failing phase fails with its exit and the last lines, secrets redacted; a stop is cancelled', () => {
    const lines = [
      ...preamble,
      m('phase smoke start'),
      'token ghs_topsecret leaked',
      'boom',
      m('phase smoke exit 3 ms 9'),
    ];
    const r = build(lines, { exitCode: 3 });
    expect(r).toMatchObject({ result: 'failed', exitCode: 3, reason: 'smoke phase exited 3' });
    expect(r.lastLines).toContain('token *** leaked');
    expect(JSON.stringify(r)).not.toContain('ghs_topsecret');
    const stopped = build(lines.slice(0, -1), { exitCode: null, stopped: true });
    expect(stopped.result).toBe('cancelled');
    expect(stopped.reason).toMatch(/stopped through dstack/);
  });

  it('performance is one run of its own phase; over target is said, not failed; 124 is the hard limit; unreadable logs are said', () => {
    const perf = {
      ...task,
      suite: 'performance' as const,
      lane: { name: 'spark-test-long' as const, targetMinutes: 60 },
    };
    // the script runs correctness first itself: the task reports the one performance phase
    const ok = build([...preamble, m('phase performance start'), m('phase performance exit 0 ms 1')], {
      task: perf,
    });
    expect(ok).toMatchObject({ result: 'passed', phases: [{ suite: 'performance', exitCode: 0 }] });
    const none = build([...preamble, m('phase smoke start'), m('phase smoke exit 0 ms 1')], { task: perf });
    expect(none.result).toBe('failed');
    expect(none.reason).toBe('the task exited 0 but did not report its performance phase');
    // 75 minutes against a 60-minute target: passed, and the lane says it went over
    const long = build([...preamble, m('phase performance start'), m('phase performance exit 0 ms 1')], {
      task: perf,
      endedAt: Date.parse('2026-11-30T11:15:00Z'),
    });
    expect(long.result).toBe('passed');
    expect(long.lane).toEqual({
      name: 'spark-test-long',
      targetMinutes: 60,
      elapsedMs: 75 * 60_000,
      elapsedSeconds: 75 * 60,
      withinTarget: false,
      overTarget: true,
    });
    const limit = build([...preamble, m('phase smoke start'), m('phase smoke exit 124 ms 1')], {
      exitCode: 124,
    });
    expect(limit.reason).toBe(
      "the task reached its 120-minute limit (the workflow's timeout-minutes) and was stopped",
    );
    expect(limit.lane?.overTarget).toBe(false);
    const blind = build([], {
      exitCode: 1,
      output: { text: '', complete: false, detail: 'dstack logs not available: HTTP 500' },
    });
    expect(blind.lastLines?.[0]).toBe('(dstack logs incomplete: dstack logs not available: HTTP 500)');
  });
});

describe('reporting a task exit', () => {
  const runner = {
    runnerName: 'spark-spark-2-r-9-a0',
    runDir: '/tmp/w',
    pid: null,
    startTicks: null,
    startedAt: Date.parse('2026-11-30T10:00:00Z'),
    startReported: true,
    stoppedByAgent: false,
    exitCode: 0,
    jobId: 'spark-r-9-spark-2-t4-a0',
    exitReported: false,
  };
  function ctx(
    refuseReceipt: boolean,
    lines = [...preamble, m('phase smoke start'), m('phase smoke exit 0 ms 3')],
  ) {
    const sent: Report[] = [];
    const revokes: string[] = [];
    const logged: string[] = [];
    const state = { ...emptyState(), maxFencingToken: 4, lease: { ...lease, task, runner: { ...runner } } };
    const executor = {
      name: 'dstack',
      observe: async () => ({ state: 'exited', exitCode: 0 }),
      lastLines: async () => ['all good'],
      taskOutput: async () => ({ text: `${lines.join('\n')}\n`, complete: true }),
      taskSecrets: () => [],
      revokeTaskToken: async (l: LeaseState) => {
        revokes.push(l.leaseId);
        return { dead: true, detail: 'HTTP 204 (revoked)' };
      },
    } as unknown as Executor;
    const c = {
      cfg: { hostId: 'spark-2' },
      executor,
      log: {
        debug() {},
        info: (msg: string) => logged.push(msg),
        warn: (msg: string) => logged.push(msg),
        error() {},
      },
      state,
      save: () => {},
      report: async (r: Report) => {
        if (refuseReceipt && r.type === 'runner_exited' && r.receipt)
          throw new ControllerRejected(409, 'receipt_mismatch', 'receipt does not match');
        sent.push(r);
      },
    } as unknown as StepContext;
    return { c, sent, state, revokes, logged };
  }

  it('the agent revokes the token only when the task did not say it did (ADR 0115)', async () => {
    const revokedByTask = ctx(false);
    await reportExited(revokedByTask.c, false);
    expect(revokedByTask.revokes).toEqual([]);
    const failedClosed = ctx(false, [
      m(`fetching ${SHA} from x`),
      m('clone token revoke failed: HTTP 500 from x after 3 attempt(s) (curl); the script did not run'),
    ]);
    await reportExited(failedClosed.c, false);
    expect(failedClosed.revokes).toEqual(['l-spark-2-4']);
    expect(failedClosed.logged).toContain('the task did not revoke its clone token; the agent did');
    expect(failedClosed.sent[0]).toMatchObject({ receipt: { result: 'failed' } });
  });

  it('sends the receipt with the exit; a receipt the controller refuses does not hold the exit', async () => {
    const ok = ctx(false);
    await reportExited(ok.c, false);
    expect(ok.sent).toHaveLength(1);
    expect(ok.sent[0]).toMatchObject({
      type: 'runner_exited',
      exitCode: 0,
      receipt: { result: 'passed', mode: 'task' },
    });
    expect(ok.state.lease!.runner!.exitReported).toBe(true);

    const refused = ctx(true);
    await reportExited(refused.c, false);
    expect(refused.sent).toHaveLength(1);
    expect(refused.sent[0]).toMatchObject({ type: 'runner_exited', exitCode: 0 });
    expect((refused.sent[0] as { receipt?: unknown }).receipt).toBeUndefined();
    expect(refused.state.lease!.runner!.exitReported).toBe(true);
  });
});
