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
 * Waits between attempts at a cleanup that keeps failing: every second at first (a backend that is
 * still terminating its workload — dstack stopping a container — is the common case and must not
 * slow the release down), then doubling up to 10 s.
 */
const CLEANUP_QUICK_ATTEMPTS = 5;
const CLEANUP_BACKOFF_MAX_MS = 10_000;

/**
 * A cleanup attempt failed (ADR 0156): retried with backoff, logged once per reason (not per
 * attempt); once it has failed for `timeouts.cleanupS` the host is quarantined with the reason
 * (`cleanup_failed`), which ends the lease: a job's trap cannot hold a host.
 */
async function cleanupFailing(ctx: StepContext, l: LeaseState, reason: string): Promise<StepResult> {
  const now = ctx.port.now();
  const budgetMs = ctx.cfg.timeouts.cleanupS * 1000;
  const c = l.cleanup ?? { since: now, attempts: 0, reason: '', nextAt: now };
  c.attempts += 1;
  if (c.reason !== reason) {
    ctx.log.warn(
      c.attempts === 1
        ? 'cleanup failed; retrying'
        : 'cleanup still failing, now for another reason; retrying',
      { leaseId: l.leaseId, reason, attempts: c.attempts, quarantineAfterS: ctx.cfg.timeouts.cleanupS },
    );
    c.reason = reason;
  }
  if (now - c.since >= budgetMs) {
    l.cleanup = c;
    ctx.save();
    await ctx.report({ type: 'cleanup_failed', fencingToken: l.fencingToken, reason: reason.slice(0, 1000) });
    ctx.log.error('cleanup failed for too long; the host is quarantined until an operator clears it', {
      leaseId: l.leaseId,
      reason,
      attempts: c.attempts,
      sinceS: Math.round((now - c.since) / 1000),
    });
    rememberLeftover(ctx, l.workDir);
    ctx.state.lease = null;
    ctx.save();
    return waitFor(null);
  }
  const backoff =
    c.attempts <= CLEANUP_QUICK_ATTEMPTS
      ? 1000
      : Math.min(CLEANUP_BACKOFF_MAX_MS, 1000 * 2 ** Math.min(c.attempts - CLEANUP_QUICK_ATTEMPTS, 10));
  c.nextAt = now + Math.min(backoff, c.since + budgetMs - now);
  l.cleanup = c;
  ctx.save();
  return waitFor(c.nextAt - now);
}

/** A work dir that could not be removed, tried again before the next lease is prepared. */
export function rememberLeftover(ctx: StepContext, workDir: string): void {
  ctx.state.leftovers = [...(ctx.state.leftovers ?? []).filter((d) => d !== workDir), workDir].slice(-64);
}

/**
 * Before a lease is prepared: the work dirs earlier leases left (their removal failed and their
 * host was quarantined; an operator has since cleared it) are removed, best effort — no job can
 * see them, but they hold disk space. One log line per leftover that still will not go.
 */
export async function removeLeftovers(ctx: StepContext, l: LeaseState): Promise<void> {
  const left = ctx.state.leftovers ?? [];
  if (!left.length) return;
  const still: string[] = [];
  for (const workDir of left) {
    try {
      await ctx.executor.discard({ ...l, workDir, runner: null });
    } catch (e) {
      still.push(workDir);
      ctx.log.warn('a work dir of an earlier lease still cannot be removed', {
        workDir,
        error: (e as Error).message,
      });
    }
  }
  ctx.state.leftovers = still;
  ctx.save();
}

/**
 * The last step of a release: the executor stops what the workload left and confirms nothing it
 * started runs, the work area goes, the GPU shows no process; only then `cleaned` (which releases
 * the lease). GPU processes of other users are reported, never killed. A cleanup that keeps
 * failing is retried a bounded time, then the host is quarantined ({@link cleanupFailing}).
 */
export async function finishClean(ctx: StepContext): Promise<StepResult> {
  const l = currentLease(ctx);
  const now = ctx.port.now();
  // retries keep their backoff whatever wakes the agent up early (a new desired state, a poll)
  if (l.cleanup && now < l.cleanup.nextAt) return waitFor(l.cleanup.nextAt - now);
  // what the workload left behind (a job that escaped its process group) is still this lease's
  await ctx.executor.stop(l);
  const gone = await ctx.executor.confirmTerminated(l);
  if (!gone.ok) return cleanupFailing(ctx, l, `the workload has not terminated: ${gone.detail}`);
  try {
    await ctx.executor.discard(l);
  } catch (e) {
    return cleanupFailing(ctx, l, `the work area cannot be removed: ${(e as Error).message}`);
  }
  if (l.cleanup) {
    ctx.log.info('cleanup succeeded after failing', { leaseId: l.leaseId, attempts: l.cleanup.attempts });
    l.cleanup = null;
    ctx.save();
  }
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
