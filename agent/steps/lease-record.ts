import type { LeaseRef } from '../../core/protocol/agent.ts';
import { childPath } from '../executor/work-dir.ts';
import type { LeaseState } from '../state-file.ts';
import { rememberLeftover } from './clean.ts';
import { again, type StepContext, type StepResult, waitFor } from './context.ts';

/** Refuses a command with a fencing token lower than one already seen; starts nothing. */
export function refuseStale(
  ctx: StepContext,
  state: string,
  fencingToken: number,
  highest: number,
): StepResult {
  ctx.log.warn('refusing a command with a stale fencing token', {
    state,
    fencingToken,
    highestSeen: highest,
  });
  return waitFor(null);
}

/** Persists a higher fencing token before anything acts on it. */
export function raiseFencingToken(ctx: StepContext, fencingToken: number): StepResult {
  ctx.state.maxFencingToken = fencingToken;
  ctx.save();
  return again;
}

/**
 * The local record of `lease`, created on first sight (its work dir is per reservation, host and
 * token), saved together with the lease's fencing token as the highest seen: both are persisted
 * before anything acts on them.
 */
export function adoptLease(ctx: StepContext, lease: LeaseRef): StepResult {
  if (lease.fencingToken < ctx.state.maxFencingToken) {
    throw new TypeError(`adopt-lease with a stale fencing token ${lease.fencingToken}`);
  }
  ctx.state.maxFencingToken = lease.fencingToken;
  const l: LeaseState = {
    leaseId: lease.leaseId,
    reservationId: lease.reservationId,
    fencingToken: lease.fencingToken,
    kind: lease.kind,
    topology: lease.topology,
    lend: lease.lend,
    ...(lease.executor ? { executor: lease.executor } : {}),
    ...(lease.repo ? { repo: lease.repo } : {}),
    workDir: childPath(ctx.cfg.workRoot, `${lease.reservationId}-${ctx.cfg.hostId}-t${lease.fencingToken}`),
    lendStep: 'none',
    phase: 'preparing',
    failure: null,
    runner: null,
    activeReported: false,
    remainReported: false,
  };
  ctx.state.lease = l;
  ctx.save();
  return again;
}

/** The controller shows no trace of the local lease any more: undo only what the agent did itself. */
export async function dropLease(ctx: StepContext, why: string): Promise<StepResult> {
  const l = ctx.state.lease;
  if (!l) return again;
  ctx.log.info('cleaning up local work of an ended lease', { leaseId: l.leaseId, why });
  await ctx.executor.stop(l);
  try {
    await ctx.executor.discard(l);
  } catch (e) {
    // the controller has ended the lease: its dirs are removed before the next one instead
    ctx.log.warn("the ended lease's work area cannot be removed now; it is retried before the next lease", {
      leaseId: l.leaseId,
      error: (e as Error).message,
    });
    rememberLeftover(ctx, l.workDir);
  }
  ctx.state.lease = null;
  ctx.save();
  return again;
}
