import { describe, expect, it } from 'vitest';
import { createLeaseExecutor } from '../../agent/executor/by-lease.ts';
import type { Executor, ExecutorName } from '../../agent/executor/types.ts';
import type { LeaseState } from '../../agent/state-file.ts';
import { executorForRepo, parseConfig } from '../../core/config.ts';
import { LeaseRefSchema } from '../../core/protocol/agent.ts';

/** Per-repository executors: the config, the lease ref, and the agent's routing. */

const lease = (over: Partial<LeaseState> = {}): LeaseState => ({
  leaseId: 'l-spark-2-3',
  reservationId: 'r-4',
  fencingToken: 3,
  kind: 'manual',
  topology: 'single',
  lend: false,
  workDir: '/tmp/w',
  lendStep: 'none',
  phase: 'preparing',
  failure: null,
  runner: null,
  activeReported: false,
  remainReported: false,
  ...over,
});

/** An executor that records which backend each call went to. */
function recording(name: ExecutorName, calls: string[]): Executor {
  const note = <T>(m: string, v: T): T => {
    calls.push(`${name}.${m}`);
    return v;
  };
  return {
    name,
    prepare: async () => note('prepare', { ok: true }),
    start: async () => note('start', undefined),
    observe: async () => note('observe', { state: 'running' }),
    stop: async () => note('stop', undefined),
    confirmTerminated: async () => note('confirmTerminated', { ok: true }),
    lastLines: async () => note('lastLines', [name]),
    forget: async () => note('forget', undefined),
    discard: async () => note('discard', undefined),
  };
}

describe('repositories.<repo>.executor (controller config)', () => {
  it('accepts the known backends and names them when refusing another', () => {
    const cfg = parseConfig({ repositories: { 'acme/butter': { executor: 'dstack' }, 'acme/iron': {} } });
    expect(executorForRepo(cfg, 'acme/butter')).toBe('dstack');
    expect(executorForRepo(cfg, 'acme/iron')).toBeNull();
    expect(executorForRepo(cfg, 'acme/other')).toBeNull();
    expect(executorForRepo(cfg, null)).toBeNull();
    // an inherited property name is no repository
    expect(executorForRepo(cfg, 'constructor')).toBeNull();
    expect(() => parseConfig({ repositories: { 'acme/butter': { executor: 'kubernetes' } } })).toThrow(
      'repositories.acme/butter.executor: executor is one of jit-runner, slurm, dstack',
    );
    expect(() => parseConfig({ repositories: { butter: { executor: 'dstack' } } })).toThrow(
      'repositories.butter: "butter" is not a repository: expected "owner/name"',
    );
    expect(() => parseConfig({ repositories: { 'acme/butter': { executer: 'dstack' } } })).toThrow(
      'executer',
    );
  });

  it('the lease ref carries only a known executor', () => {
    const ref = {
      leaseId: 'l-spark-2-3',
      reservationId: 'r-4',
      fencingToken: 3,
      kind: 'manual',
      topology: 'single',
      lend: false,
      expiresInMs: 1000,
    };
    expect(LeaseRefSchema.parse({ ...ref, executor: 'slurm' }).executor).toBe('slurm');
    expect(LeaseRefSchema.parse(ref).executor).toBeUndefined();
    const bad = LeaseRefSchema.safeParse({ ...ref, executor: 'ssh' });
    expect(bad.success).toBe(false);
    expect(bad.error?.issues[0]?.message).toBe('executor is one of jit-runner, slurm, dstack');
  });
});

describe('createLeaseExecutor (agent)', () => {
  it("routes each lease to its repository's backend, else to the host's own, building each once", async () => {
    const calls: string[] = [];
    const built: string[] = [];
    const ex = createLeaseExecutor('jit-runner', (n) => {
      built.push(n);
      return recording(n, calls);
    });
    expect(ex.name).toBe('jit-runner');
    await ex.prepare(lease());
    await ex.prepare(lease({ executor: 'dstack' }));
    await ex.start(lease({ executor: 'dstack' }), { name: 'x', jitConfig: 'j', jobToken: null });
    expect(await ex.lastLines(lease({ executor: 'dstack' }), 5)).toEqual(['dstack']);
    await ex.confirmTerminated(lease({ executor: 'slurm' }));
    expect(calls).toEqual([
      'jit-runner.prepare',
      'dstack.prepare',
      'dstack.start',
      'dstack.lastLines',
      'slurm.confirmTerminated',
    ]);
    expect(built).toEqual(['jit-runner', 'dstack', 'slurm']);
    // no development environments unless the host's own backend has them
    expect(ex.startDevelopment).toBeUndefined();
  });

  it('a backend the host cannot run fails preparation with the reason and starts nothing', async () => {
    const calls: string[] = [];
    const ex = createLeaseExecutor('jit-runner', (n) => {
      if (n === 'dstack')
        throw new TypeError('the dstack executor needs the "dstack" section of the agent config');
      return recording(n, calls);
    });
    const l = lease({ executor: 'dstack' });
    const p = await ex.prepare(l);
    expect(p).toEqual({
      ok: false,
      detail:
        'this lease\'s repository runs on executor "dstack", which this host cannot run: the dstack executor needs the "dstack" section of the agent config',
    });
    await expect(ex.start(l, { name: 'x', jitConfig: 'j', jobToken: null })).rejects.toThrow('cannot run');
    expect(await ex.observe(l)).toEqual({ state: 'none' });
    expect(await ex.confirmTerminated(l)).toEqual({ ok: true });
    await ex.discard(l);
    expect(calls).toEqual(['jit-runner.discard']);
  });

  it('never confirms termination of a recorded workload whose backend it can no longer reach', async () => {
    const warnings: string[] = [];
    const ex = createLeaseExecutor(
      'jit-runner',
      (n) => {
        if (n === 'slurm') throw new Error('sbatch not found');
        return recording(n, []);
      },
      (msg, f) => warnings.push(`${msg}: ${String(f.error)}`),
    );
    const l = lease({
      executor: 'slurm',
      runner: {
        runnerName: 'spark-spark-2-r-4-a0',
        runDir: '/tmp/w',
        pid: null,
        startTicks: null,
        startedAt: 1,
        startReported: true,
        stoppedByAgent: false,
        jobId: '17',
        exitReported: false,
      },
    });
    expect(await ex.observe(l)).toEqual({ state: 'running' });
    const t = await ex.confirmTerminated(l);
    expect(t).toMatchObject({ ok: false, detail: expect.stringContaining('sbatch not found') });
    // said once, not on every look
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain('it is kept until that is fixed');
  });

  it("refuses to start when the host's own backend cannot be built", () => {
    expect(() =>
      createLeaseExecutor('dstack', () => {
        throw new Error('no token file');
      }),
    ).toThrow('no token file');
  });
});
