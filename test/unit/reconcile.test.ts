import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Observation } from '../../agent/executor/types.ts';
import { type LocalView, reconcile } from '../../agent/reconcile.ts';
import type { LeaseState, RunnerState } from '../../agent/state-file.ts';
import type { DesiredState, LeaseRef } from '../../core/protocol/agent.ts';

/**
 * The agent's decision function, one case per transition the agent e2e tests drive end to end
 * (test/e2e/agent-{single,pair,develop,faults}.test.ts), without processes or a controller.
 */

const ref = (over: Partial<LeaseRef> = {}): LeaseRef => ({
  leaseId: 'l-spark-2-5',
  reservationId: 'r-1',
  fencingToken: 5,
  kind: 'manual',
  topology: 'single',
  lend: false,
  expiresInMs: 60_000,
  ...over,
});

const record = (over: Partial<LeaseState> = {}): LeaseState => ({
  leaseId: 'l-spark-2-5',
  reservationId: 'r-1',
  fencingToken: 5,
  kind: 'manual',
  topology: 'single',
  lend: false,
  workDir: '/work/r-1-spark-2-t5',
  lendStep: 'none',
  phase: 'preparing',
  failure: null,
  runner: null,
  activeReported: false,
  remainReported: false,
  ...over,
});

const runner = (over: Partial<RunnerState> = {}): RunnerState => ({
  runnerName: 'spark-spark-2-r-1-a0',
  runDir: '/state/runs/spark-spark-2-r-1-a0',
  pid: 100,
  startTicks: '1',
  startedAt: 0,
  startReported: false,
  stoppedByAgent: false,
  exitReported: false,
  ...over,
});

const view = (over: Partial<LocalView> = {}): LocalView => ({
  maxFencingToken: 5,
  lease: null,
  workload: { state: 'none' },
  hasService: false,
  heartbeatMs: 10_000,
  ...over,
});

const running: Observation = { state: 'running' };
const exited: Observation = { state: 'exited', exitCode: 0 };

describe('reconcile: fencing', () => {
  it('refuses a command with a lower fencing token than one seen, and starts nothing (faults: stale token)', () => {
    expect(
      reconcile({ state: 'prepare', lease: ref({ fencingToken: 1 }) }, view({ maxFencingToken: 10 })),
    ).toEqual({ kind: 'refuse-stale', fencingToken: 1, highest: 10 });
  });

  it('persists a higher token before acting on it', () => {
    // a lease seen first: its record and the token are persisted together (adopt-lease)
    expect(reconcile({ state: 'prepare', lease: ref({ fencingToken: 6 }) }, view())).toEqual({
      kind: 'adopt-lease',
      lease: ref({ fencingToken: 6 }),
    });
    // with another lease recorded, the token is raised first (then that lease is dropped)
    expect(
      reconcile({ state: 'prepare', lease: ref({ fencingToken: 6 }) }, view({ lease: record() })),
    ).toEqual({ kind: 'raise-fencing-token', fencingToken: 6 });
    expect(
      reconcile({ state: 'restore', fencingToken: 7, attempt: 0, waitMs: 0, healthTimeoutS: 10 }, view()),
    ).toEqual({ kind: 'raise-fencing-token', fencingToken: 7 });
  });

  it('never starts, prepares or cleans for a token below the highest seen (property)', () => {
    const leaseArb = fc.record({
      fencingToken: fc.integer({ min: 1, max: 50 }),
      lend: fc.boolean(),
      expiresInMs: fc.integer({ min: -100_000, max: 100_000 }),
    });
    const desiredArb: fc.Arbitrary<DesiredState> = fc.oneof(
      leaseArb.map((l) => ({ state: 'prepare' as const, lease: ref(l) })),
      leaseArb.map((l) => ({ state: 'clean' as const, lease: ref(l) })),
      leaseArb.map((l) => ({ state: 'develop' as const, lease: ref(l) })),
      leaseArb.map((l) => ({ state: 'run' as const, lease: ref(l), runnerName: 'x', jitConfig: 'j' })),
    );
    fc.assert(
      fc.property(desiredArb, fc.integer({ min: 1, max: 60 }), (d, highest) => {
        const step = reconcile(d, view({ maxFencingToken: highest }));
        const token = 'lease' in d && d.lease ? d.lease.fencingToken : 0;
        if (token < highest) return step.kind === 'refuse-stale';
        // adopt-lease persists the token with the lease record (agent-steps.test.ts)
        if (token > highest) return step.kind === 'raise-fencing-token' || step.kind === 'adopt-lease';
        return step.kind !== 'refuse-stale';
      }),
    );
  });
});

describe('reconcile: leases the controller no longer shows', () => {
  it('drops the local lease (stops only what it started) when the controller says idle or another lease', () => {
    const local = view({ lease: record({ phase: 'running', runner: runner() }), workload: running });
    expect(reconcile({ state: 'idle' }, local)).toMatchObject({ kind: 'drop-lease' });
    expect(reconcile({ state: 'serve' }, local)).toMatchObject({ kind: 'drop-lease' });
    expect(
      reconcile(
        { state: 'prepare', lease: ref({ fencingToken: 6, leaseId: 'l-2' }) },
        { ...local, maxFencingToken: 6 },
      ),
    ).toMatchObject({ kind: 'drop-lease', why: expect.stringContaining('l-spark-2-5') });
  });

  it('a hold of the lease never drops it; a hold after the controller ended it drops what the agent started', () => {
    const local = view({ lease: record({ phase: 'running', runner: runner() }), workload: running });
    // release-required: the lease is still bound; nothing is touched while its runner runs
    expect(reconcile({ state: 'hold', reason: 'release required', lease: ref() }, local)).toMatchObject({
      kind: 'wait',
    });
    // quarantined after the lease ended without the agent's word (an emergency terminate of a stuck
    // cleanup, ADR 0156): the agent still stops and removes what it started for it
    expect(reconcile({ state: 'hold', reason: 'quarantined' }, local)).toMatchObject({
      kind: 'drop-lease',
      why: expect.stringContaining('l-spark-2-5'),
    });
    // with nothing local a hold only waits
    expect(reconcile({ state: 'hold', reason: 'quarantined' }, view())).toMatchObject({
      kind: 'wait',
      ms: null,
    });
  });

  it('idle with nothing local waits for a change', () => {
    expect(reconcile({ state: 'idle' }, view())).toEqual({ kind: 'wait', ms: null, why: 'nothing bound' });
  });
});

describe('reconcile: prepare', () => {
  it('adopts the lease on first sight, then checks the host (single: GPU free, work dir), then reports', () => {
    const d: DesiredState = { state: 'prepare', lease: ref() };
    expect(reconcile(d, view())).toEqual({ kind: 'adopt-lease', lease: ref() });
    expect(reconcile(d, view({ lease: record() }))).toEqual({ kind: 'prepare-host' });
    expect(reconcile(d, view({ lease: record({ phase: 'prepared' }) }))).toEqual({ kind: 'report-prepared' });
  });

  it('lends the home service in order: drain → stop → verify on the GPU → host checks (single: lend spark-1)', () => {
    const d: DesiredState = { state: 'prepare', lease: ref({ lend: true }) };
    const at = (lendStep: LeaseState['lendStep']) =>
      reconcile(d, view({ hasService: true, lease: record({ lend: true, lendStep }) })).kind;
    expect(at('none')).toBe('lend-drain');
    // a restart while draining drains again (idempotent)
    expect(at('draining')).toBe('lend-drain');
    expect(at('stopping')).toBe('lend-stop');
    expect(at('verifying')).toBe('lend-verify');
    expect(at('lent')).toBe('prepare-host');
  });

  it('fails a lend on a host without a home service', () => {
    expect(
      reconcile({ state: 'prepare', lease: ref({ lend: true }) }, view({ lease: record({ lend: true }) })),
    ).toMatchObject({ kind: 'fail-prepare', reason: expect.stringContaining('none configured') });
  });

  it('repeats a failed preparation report instead of trying again (single/pair: paused Deckard)', () => {
    expect(
      reconcile(
        { state: 'prepare', lease: ref({ lend: true }) },
        view({
          hasService: true,
          lease: record({ lend: true, phase: 'prepare_failed', lendStep: 'failed' }),
        }),
      ),
    ).toEqual({ kind: 'report-prepare-failed' });
  });

  it('waits while prepared (pair: the other node, or the JIT config)', () => {
    expect(reconcile({ state: 'wait', lease: ref() }, view())).toMatchObject({ kind: 'adopt-lease' });
    expect(
      reconcile({ state: 'wait', lease: ref() }, view({ lease: record({ phase: 'prepared' }) })),
    ).toMatchObject({
      kind: 'wait',
      ms: null,
    });
  });
});

describe('reconcile: run', () => {
  const d = (over: Partial<Extract<DesiredState, { state: 'run' }>> = {}): DesiredState => ({
    state: 'run',
    lease: ref(),
    runnerName: 'spark-spark-2-r-1-a0',
    ...over,
  });

  it('starts the runner from the one answer that carries its JIT config', () => {
    expect(
      reconcile(
        d({ jitConfig: 'jit', jobToken: 'spk_job_x' }),
        view({ lease: record({ phase: 'prepared' }) }),
      ),
    ).toEqual({
      kind: 'start-workload',
      workload: { name: 'spark-spark-2-r-1-a0', jitConfig: 'jit', jobToken: 'spk_job_x' },
    });
  });

  it('without the JIT config and without a runner here, waits for a replacement (config lost in a crash)', () => {
    expect(reconcile(d(), view({ lease: record({ phase: 'prepared' }) }))).toMatchObject({
      kind: 'wait',
      ms: null,
    });
  });

  it('reports the start once, then watches every second (a runner adopted after restart is not our child)', () => {
    expect(
      reconcile(d(), view({ lease: record({ phase: 'running', runner: runner() }), workload: running })),
    ).toEqual({ kind: 'report-started' });
    expect(
      reconcile(
        d(),
        view({
          lease: record({ phase: 'running', runner: runner({ startReported: true }) }),
          workload: running,
        }),
      ),
    ).toMatchObject({ kind: 'wait', ms: 1000 });
  });

  it('reports no start while the backend has not started the workload (dstack provisioning, ADR 0120)', () => {
    const pending: Observation = { state: 'running', pending: true };
    expect(
      reconcile(d(), view({ lease: record({ phase: 'running', runner: runner() }), workload: pending })),
    ).toMatchObject({ kind: 'wait', ms: 1000 });
    // once reported, a later pending look (dstack did not answer) changes nothing
    expect(
      reconcile(
        d(),
        view({
          lease: record({ phase: 'running', runner: runner({ startReported: true }) }),
          workload: pending,
        }),
      ),
    ).toMatchObject({ kind: 'wait', ms: 1000 });
  });

  it('a workload that ran and ended between two looks has its start reported before its exit', () => {
    const ranAndExited: Observation = { state: 'exited', exitCode: 0, ran: true };
    expect(
      reconcile(d(), view({ lease: record({ phase: 'running', runner: runner() }), workload: ranAndExited })),
    ).toEqual({ kind: 'report-started' });
    expect(
      reconcile(
        d(),
        view({
          lease: record({ phase: 'running', runner: runner({ startReported: true }) }),
          workload: ranAndExited,
        }),
      ),
    ).toEqual({ kind: 'report-exited', bestEffort: false });
    // ended without ever running (dstack: failed in provisioning, no exit status): no start
    expect(
      reconcile(
        d(),
        view({
          lease: record({ phase: 'running', runner: runner() }),
          workload: { state: 'exited', exitCode: null, ran: false },
        }),
      ),
    ).toEqual({ kind: 'report-exited', bestEffort: false });
  });

  it('reports the exit once (single: exit 0; pair: exit 3; faults: exit while the controller was down)', () => {
    const r = runner({ startReported: true });
    expect(
      reconcile(d(), view({ lease: record({ phase: 'running', runner: r }), workload: exited })),
    ).toEqual({
      kind: 'report-exited',
      bestEffort: false,
    });
    expect(
      reconcile(
        d(),
        view({ lease: record({ phase: 'running', runner: { ...r, exitReported: true } }), workload: exited }),
      ),
    ).toMatchObject({ kind: 'wait', ms: null });
    // a pid never recorded (crash between record and spawn) counts as exited
    expect(
      reconcile(
        d(),
        view({ lease: record({ phase: 'running', runner: runner({ pid: null }) }), workload: exited }),
      ),
    ).toMatchObject({ kind: 'report-exited' });
  });

  it('replaces a runner the controller replaced (faults: new handoff)', () => {
    expect(
      reconcile(
        d({ runnerName: 'spark-spark-2-r-1-a1', jitConfig: 'jit2' }),
        view({
          lease: record({ phase: 'running', runner: runner({ startReported: true }) }),
          workload: running,
        }),
      ),
    ).toEqual({ kind: 'replace-workload', next: 'spark-spark-2-r-1-a1' });
  });
});

describe('reconcile: develop', () => {
  it('reports the lease active once, then waits until expiry plus two heartbeats', () => {
    const d: DesiredState = { state: 'develop', lease: ref({ kind: 'development', expiresInMs: 6000 }) };
    expect(reconcile(d, view({ lease: record({ kind: 'development', phase: 'prepared' }) }))).toEqual({
      kind: 'report-active',
    });
    expect(
      reconcile(d, view({ heartbeatMs: 1000, lease: record({ kind: 'development', activeReported: true }) })),
    ).toMatchObject({ kind: 'wait', ms: 6000 + 2000 + 250 });
  });

  it('with dev environments (dstack), creates the environment first, then reports active', () => {
    const d: DesiredState = { state: 'develop', lease: ref({ kind: 'development', expiresInMs: 6000 }) };
    const prepared = record({ kind: 'development', phase: 'prepared' });
    expect(reconcile(d, view({ devEnvironments: true, lease: prepared }))).toEqual({
      kind: 'start-development',
    });
    const started = record({
      kind: 'development',
      phase: 'running',
      runner: runner({ startReported: true, exitReported: true }),
    });
    expect(
      reconcile(d, view({ devEnvironments: true, workload: { state: 'running' }, lease: started })),
    ).toEqual({ kind: 'report-active' });
    // without dev environments nothing is started for a development lease
    expect(reconcile(d, view({ lease: prepared }))).toEqual({ kind: 'report-active' });
  });

  it('past expiry and grace, checks for processes that outlived it (develop: kill nothing)', () => {
    const d: DesiredState = { state: 'develop', lease: ref({ kind: 'development', expiresInMs: -2500 }) };
    expect(
      reconcile(d, view({ heartbeatMs: 1000, lease: record({ kind: 'development', activeReported: true }) })),
    ).toEqual({ kind: 'check-expired' });
  });
});

describe('reconcile: clean and hold', () => {
  const d: DesiredState = { state: 'clean', lease: ref() };

  it('marks cleaning first (faults: kill -9 while cleaning resumes here)', () => {
    expect(
      reconcile(d, view({ lease: record({ phase: 'running', runner: runner() }), workload: running })),
    ).toEqual({
      kind: 'begin-clean',
    });
  });

  it('stops the runner it started, reports its exit best-effort, then finishes (pair: the other node stopped)', () => {
    const r = runner({ startReported: true });
    expect(
      reconcile(d, view({ lease: record({ phase: 'cleaning', runner: r }), workload: running })),
    ).toEqual({
      kind: 'stop-workload',
    });
    expect(reconcile(d, view({ lease: record({ phase: 'cleaning', runner: r }), workload: exited }))).toEqual(
      {
        kind: 'report-exited',
        bestEffort: true,
      },
    );
    expect(
      reconcile(
        d,
        view({
          lease: record({ phase: 'cleaning', runner: { ...r, exitReported: true } }),
          workload: exited,
        }),
      ),
    ).toEqual({ kind: 'finish-clean' });
  });

  it('a lease that never ran (prepare failed) goes straight to finishing', () => {
    expect(reconcile(d, view({ lease: record({ phase: 'cleaning' }) }))).toEqual({ kind: 'finish-clean' });
    expect(reconcile(d, view())).toMatchObject({ kind: 'adopt-lease' });
  });

  it('held with a lease: waits while its runner runs, else checks the GPU; once confirmed, cleans', () => {
    const h: DesiredState = {
      state: 'hold',
      reason: 'release required',
      lease: ref({ kind: 'development' }),
    };
    expect(
      reconcile(h, view({ lease: record({ phase: 'running', runner: runner() }), workload: running })),
    ).toMatchObject({ kind: 'wait', ms: 10_000 });
    expect(reconcile(h, view({ lease: record({ activeReported: true, phase: 'prepared' }) }))).toEqual({
      kind: 'check-hold',
    });
    expect(reconcile(h, view({ lease: record({ phase: 'cleaning' }) }))).toEqual({ kind: 'finish-clean' });
  });

  it('held with a development lease: its dev environment never ends by itself, so the GPU decides (ADR 0176)', () => {
    const h: DesiredState = {
      state: 'hold',
      reason: 'release required',
      lease: ref({ kind: 'development' }),
    };
    const env = runner({ runnerName: 'spark-r-1-spark-2-t5-dev', startReported: true });
    expect(
      reconcile(
        h,
        view({
          lease: record({ kind: 'development', phase: 'prepared', activeReported: true, runner: env }),
          workload: running,
        }),
      ),
    ).toEqual({ kind: 'check-hold' });
    // once the GPU is free the agent stops the environment it started, then confirms
    expect(
      reconcile(
        h,
        view({ lease: record({ kind: 'development', phase: 'cleaning', runner: env }), workload: running }),
      ),
    ).toEqual({ kind: 'stop-workload' });
  });
});

describe('reconcile: restore', () => {
  const d = (waitMs: number): DesiredState => ({
    state: 'restore',
    fencingToken: 5,
    attempt: 1,
    waitMs,
    healthTimeoutS: 10,
  });
  it('waits out the backoff, then restores (single: restore after lending; quarantine after retries)', () => {
    expect(reconcile(d(1500), view({ hasService: true }))).toMatchObject({ kind: 'wait', ms: 1500 });
    expect(reconcile(d(0), view({ hasService: true }))).toEqual({ kind: 'restore' });
  });
  it('says so when the host has no service to restore', () => {
    expect(reconcile(d(0), view())).toEqual({ kind: 'report-restore-impossible' });
  });
});
