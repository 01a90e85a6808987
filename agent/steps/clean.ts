import type { GpuProcess } from '../../core/model.ts';
import { describeProcesses } from '../gpu.ts';
import type { LeaseState } from '../state-file.ts';
import { again, currentLease, type StepContext, type StepResult, waitFor } from './context.ts';

/** GPU processes that count against the release (the home service's own, if never lent, do not). */
function remaining(l: LeaseState, processes: readonly GpuProcess[]): GpuProcess[] {
  if (l.lend && l.lendStep !== 'lent') return [];
  return [...processes];
}

export function beginClean(ctx: StepContext): StepResult {
  currentLease(ctx).phase = 'cleaning';
  ctx.save();
  return again;
}

/** Stops the workload this lease started; if it outlives the stop, look again later. */
export async function stopWorkload(ctx: StepContext): Promise<StepResult> {
  const l = currentLease(ctx);
  await ctx.executor.stop(l);
  return (await ctx.executor.observe(l)).state === 'running' ? waitFor(1000) : again;
}

/**
 * The last step of a release: the work area goes, the executor confirms nothing it started runs,
 * the GPU shows no process; only then `cleaned` (which releases the lease). Anything left is
 * reported, never killed.
 */
export async function finishClean(ctx: StepContext): Promise<StepResult> {
  const l = currentLease(ctx);
  // what the workload left behind (a job that escaped its process group) is still this lease's
  await ctx.executor.stop(l);
  const gone = await ctx.executor.confirmTerminated(l);
  if (!gone.ok) {
    ctx.log.warn('cannot confirm cleanup: the workload has not terminated', { detail: gone.detail });
    return waitFor(1000);
  }
  await ctx.executor.discard(l);
  const q = await ctx.port.queryGpu();
  if (!q.ok) {
    ctx.log.warn('cannot confirm cleanup: GPU state unknown', { error: q.error });
    return waitFor(1000);
  }
  const left = remaining(l, q.processes);
  if (left.length) {
    if (!l.remainReported) {
      ctx.log.warn('processes remain after cleanup; nothing is killed', {
        processes: describeProcesses(left),
      });
      await ctx.report({ type: 'processes_remain', fencingToken: l.fencingToken, processes: left });
      l.remainReported = true;
      ctx.save();
    }
    return waitFor(ctx.heartbeatMs());
  }
  // the host is about to be free: the report carries what the GPU shows now and the controller
  // stores it in the transaction that frees the host, so the next grant need not wait up to a
  // heartbeat period for facts that still list the finished job's processes. (A heartbeat sent
  // just before did the same one request and one admission pass earlier: that pass then held
  // the release's pass back by the controller's 50 ms pass gap.)
  const facts = {
    ...(await ctx.collectFacts()),
    gpuProcesses: q.processes,
    gpuError: null,
    runnerState: 'none' as const,
  };
  await ctx.report({ type: 'cleaned', fencingToken: l.fencingToken, facts });
  ctx.state.lease = null;
  ctx.save();
  return waitFor(null);
}

/** Held with a lease: once the GPU shows no process (the leftovers ended on their own), clean up. */
export async function checkHold(ctx: StepContext): Promise<StepResult> {
  const l = currentLease(ctx);
  const q = await ctx.port.queryGpu();
  if (!q.ok || remaining(l, q.processes).length) return waitFor(ctx.heartbeatMs());
  return beginClean(ctx);
}
