import { describe, expect, it } from 'vitest';
import type { Executor } from '../../agent/executor/types.ts';
import type { HostPort } from '../../agent/host/port.ts';
import type { AgentLogger } from '../../agent/log.ts';
import { emptyState, type LeaseState } from '../../agent/state-file.ts';
import { finishClean } from '../../agent/steps/clean.ts';
import type { StepContext } from '../../agent/steps/context.ts';
import { adoptLease } from '../../agent/steps/lease-record.ts';
import { prepareHost } from '../../agent/steps/prepare.ts';
import type { Report } from '../../core/protocol/agent.ts';

/**
 * Steps against a precise fake of the host port and the executor (no processes): what each one
 * sends and in which order.
 */

const quiet: AgentLogger = { debug() {}, info() {}, warn() {}, error() {} };

/** A logger that keeps what was logged at warn and above, to count lines per state change. */
function recordingLogger(): AgentLogger & { lines: string[] } {
  const lines: string[] = [];
  return {
    lines,
    debug() {},
    info() {},
    warn: (msg: string) => lines.push(`warn ${msg}`),
    error: (msg: string) => lines.push(`error ${msg}`),
  };
}

function lease(over: Partial<LeaseState> = {}): LeaseState {
  return {
    leaseId: 'l-spark-2-5',
    reservationId: 'r-1',
    fencingToken: 5,
    kind: 'manual',
    topology: 'single',
    lend: false,
    workDir: '/w/r-1-spark-2-t5',
    lendStep: 'none',
    phase: 'cleaning',
    failure: null,
    runner: null,
    activeReported: false,
    remainReported: false,
    ...over,
  };
}

function harness(
  gpu: { pid: number; name: string; usedMemoryMiB: number }[],
  termination = true,
  opts: { discard?: () => void; clock?: { now: number }; log?: AgentLogger } = {},
) {
  const calls: string[] = [];
  const sent: Report[] = [];
  const clock = opts.clock ?? { now: 0 };
  const port: HostPort = {
    exec: async () => ({ code: 0, signal: null, stdout: '', stderr: '', error: null }),
    queryGpu: async () => {
      calls.push('gpu');
      return { ok: true, processes: gpu };
    },
    probeHealth: async () => ({ ok: true, status: 200, detail: 'HTTP 200' }),
    waitHealthy: async () => ({ ok: true, status: 200, detail: 'HTTP 200' }),
    freeDiskBytes: () => 1e12,
    now: () => clock.now,
  };
  const executor: Executor = {
    name: 'jit-runner',
    prepare: async () => {
      calls.push('executor.prepare');
      return { ok: true };
    },
    start: async () => {},
    observe: async () => ({ state: 'none' }),
    stop: async () => {
      calls.push('executor.stop');
    },
    confirmTerminated: async () => {
      calls.push('executor.confirm');
      return termination ? { ok: true } : { ok: false, detail: 'pid 9 still runs' };
    },
    lastLines: async () => [],
    forget: async () => {},
    discard: async () => {
      calls.push('executor.discard');
      opts.discard?.();
    },
  };
  const state = { ...emptyState(), maxFencingToken: 5, lease: lease() };
  const ctx: StepContext = {
    cfg: {
      workRoot: '/w',
      service: null,
      interconnectCheck: null,
      timeouts: { cleanupS: 60 },
    } as unknown as StepContext['cfg'],
    port,
    executor,
    log: opts.log ?? quiet,
    state,
    save: () => calls.push('save'),
    report: async (r) => {
      sent.push(r);
    },
    collectFacts: async (q) => ({
      gpuProcesses: q?.ok ? q.processes : null,
      gpuError: null,
      freeDiskBytes: 1,
      serviceState: 'none',
      runnerState: 'exited',
      interconnectOk: null,
    }),
    sleep: async () => {},
    stopped: () => false,
    heartbeatMs: () => 10_000,
    interconnect: null,
  };
  return { ctx, calls, sent };
}

describe('finish-clean', () => {
  it('frees the host only after termination is confirmed, with fresh GPU facts in the report', async () => {
    const h = harness([]);
    expect(await finishClean(h.ctx)).toEqual({ next: 'wait', ms: null });
    expect(h.calls.slice(0, 4)).toEqual(['executor.stop', 'executor.confirm', 'executor.discard', 'gpu']);
    // one GPU query serves the check and the facts
    expect(h.calls.filter((c) => c === 'gpu')).toHaveLength(1);
    // one request: the controller stores the facts with the release
    expect(h.sent.map((s) => s.type)).toEqual(['cleaned']);
    const fresh = { gpuProcesses: [], runnerState: 'none' };
    expect(h.sent[0]).toMatchObject({ type: 'cleaned', fencingToken: 5, facts: fresh });
    expect(h.ctx.state.lease).toBeNull();
  });

  it('reports nothing and keeps the lease while the workload is not confirmed terminated', async () => {
    const h = harness([], false);
    expect(await finishClean(h.ctx)).toEqual({ next: 'wait', ms: 1000 });
    expect(h.sent).toEqual([]);
    expect(h.calls).not.toContain('executor.discard');
    expect(h.ctx.state.lease).not.toBeNull();
  });

  it('reports processes that remain (once) instead of cleaned, killing nothing', async () => {
    const h = harness([{ pid: 77, name: 'python3', usedMemoryMiB: 10 }]);
    await finishClean(h.ctx);
    await finishClean(h.ctx);
    expect(h.sent.map((s) => s.type)).toEqual(['processes_remain']);
    expect(h.ctx.state.lease).not.toBeNull();
  });
});

describe('finish-clean: a cleanup that keeps failing (ADR 0156)', () => {
  const stuck = () => {
    throw new Error("rm: cannot remove '/w/r-1-spark-2-t5/d/f': Operation not permitted");
  };

  it('retries with backoff, logs once, and quarantines the host past its budget', async () => {
    const clock = { now: 1_000_000 };
    const log = recordingLogger();
    const h = harness([], true, { discard: stuck, clock, log });
    const waits: (number | null)[] = [];
    // the agent is woken far more often than it retries (polls, desired-state changes)
    for (let i = 0; i < 400 && h.ctx.state.lease; i++) {
      const r = await finishClean(h.ctx);
      waits.push(r.next === 'wait' ? r.ms : -1);
      clock.now += 500;
    }
    const attempts = h.calls.filter((c) => c === 'executor.discard').length;
    // 60 s of budget, retried every second 5 times, then 2, 4, 8 and at most 10 s apart: bounded
    expect(attempts).toBeGreaterThan(8);
    expect(attempts).toBeLessThanOrEqual(14);
    expect(h.sent).toEqual([
      {
        type: 'cleanup_failed',
        fencingToken: 5,
        reason:
          "the work area cannot be removed: rm: cannot remove '/w/r-1-spark-2-t5/d/f': Operation not permitted",
      },
    ]);
    // one line when it started failing, one when the host was given up: not one per attempt
    expect(log.lines).toEqual([
      'warn cleanup failed; retrying',
      'error cleanup failed for too long; the host is quarantined until an operator clears it',
    ]);
    expect(h.ctx.state.lease).toBeNull();
    expect(h.ctx.state.leftovers).toEqual(['/w/r-1-spark-2-t5']);
    expect(waits.at(-1)).toBeNull();
  });

  it('logs again only when the reason changes, and reports cleaned once the cleanup succeeds', async () => {
    const clock = { now: 0 };
    const log = recordingLogger();
    let failWith: string | null = 'busy';
    const h = harness([], true, {
      discard: () => {
        if (failWith) throw new Error(failWith);
      },
      clock,
      log,
    });
    for (const reason of ['busy', 'busy', 'still busy', 'still busy', null]) {
      failWith = reason;
      clock.now = h.ctx.state.lease?.cleanup?.nextAt ?? clock.now;
      await finishClean(h.ctx);
    }
    expect(log.lines).toEqual([
      'warn cleanup failed; retrying',
      'warn cleanup still failing, now for another reason; retrying',
    ]);
    expect(h.sent.map((s) => s.type)).toEqual(['cleaned']);
    expect(h.ctx.state.lease).toBeNull();
  });

  it('counts a workload that will not terminate the same way', async () => {
    const clock = { now: 0 };
    const h = harness([], false, { clock });
    for (let i = 0; i < 100 && h.ctx.state.lease; i++) {
      clock.now = Math.max(clock.now, h.ctx.state.lease.cleanup?.nextAt ?? 0);
      await finishClean(h.ctx);
    }
    expect(h.sent).toEqual([
      {
        type: 'cleanup_failed',
        fencingToken: 5,
        reason: 'the workload has not terminated: pid 9 still runs',
      },
    ]);
    expect(h.calls).not.toContain('executor.discard');
  });
});

describe('prepare-host', () => {
  it('removes the work dirs earlier leases left before preparing, keeping those that still will not go', async () => {
    const gone: string[] = [];
    const h = harness([], true);
    h.ctx.executor.discard = async (l) => {
      if (l.workDir.endsWith('t2')) throw new Error('immutable');
      gone.push(l.workDir);
    };
    h.ctx.state.leftovers = ['/w/r-0-spark-2-t2', '/w/r-0-spark-2-t3'];
    h.ctx.state.lease = lease({ phase: 'preparing' });
    await prepareHost(h.ctx);
    expect(gone).toEqual(['/w/r-0-spark-2-t3']);
    expect(h.ctx.state.leftovers).toEqual(['/w/r-0-spark-2-t2']);
    expect(h.ctx.state.lease?.phase).toBe('prepared');
  });

  it('fails the lease when the GPU is busy, and says with what', async () => {
    const h = harness([{ pid: 77, name: '/usr/bin/python3', usedMemoryMiB: 10 }]);
    h.ctx.state.lease = lease({ phase: 'preparing' });
    await prepareHost(h.ctx);
    expect(h.sent).toEqual([
      {
        type: 'prepare_failed',
        fencingToken: 5,
        reason: 'GPU busy: 1 process(es) outside the lease (pid 77 python3)',
      },
    ]);
    expect(h.ctx.state.lease!.phase).toBe('prepare_failed');
  });

  it('is prepared once the GPU is free and the executor made the work area', async () => {
    const h = harness([]);
    h.ctx.state.lease = lease({ phase: 'preparing' });
    expect(await prepareHost(h.ctx)).toEqual({ next: 'again' });
    expect(h.calls).toContain('executor.prepare');
    expect(h.ctx.state.lease!.phase).toBe('prepared');
  });
});

describe('adopt-lease', () => {
  it('records a lease seen first together with its fencing token as the highest seen, in one save', () => {
    const h = harness([]);
    h.ctx.state.lease = null;
    const ref = {
      leaseId: 'l-spark-2-9',
      reservationId: 'r-3',
      fencingToken: 9,
      kind: 'manual' as const,
      topology: 'single' as const,
      lend: false,
      expiresInMs: 60_000,
    };
    expect(adoptLease(h.ctx, ref)).toEqual({ next: 'again' });
    expect(h.ctx.state.maxFencingToken).toBe(9);
    expect(h.ctx.state.lease).toMatchObject({ leaseId: 'l-spark-2-9', fencingToken: 9, phase: 'preparing' });
    expect(h.calls).toEqual(['save']);
    // never for a token below one already seen (reconcile refuses those first)
    h.ctx.state.lease = null;
    expect(() => adoptLease(h.ctx, { ...ref, fencingToken: 4 })).toThrow(TypeError);
    expect(h.ctx.state.maxFencingToken).toBe(9);
  });
});
