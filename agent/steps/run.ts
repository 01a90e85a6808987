import type { Receipt } from '../../core/protocol/receipt.ts';
import { ControllerRejected } from '../client.ts';
import { taskReceipt } from '../executor/ci-task.ts';
import type { Workload } from '../executor/types.ts';
import { again, currentLease, type StepContext, type StepResult, waitFor } from './context.ts';

/** The controller replaced the runner (not picked up in time): ours goes, the new one starts next. */
export async function replaceWorkload(ctx: StepContext, next: string): Promise<StepResult> {
  const l = currentLease(ctx);
  ctx.log.info('runner replaced by the controller', { old: l.runner?.runnerName, new: next });
  await ctx.executor.stop(l);
  await ctx.executor.forget(l);
  return again;
}

export async function startWorkload(ctx: StepContext, w: Workload): Promise<StepResult> {
  await ctx.executor.start(currentLease(ctx), w);
  return again;
}

export async function reportStarted(ctx: StepContext): Promise<StepResult> {
  const l = currentLease(ctx);
  const r = l.runner!;
  await ctx.report({
    type: 'runner_started',
    fencingToken: l.fencingToken,
    runnerName: r.runnerName,
    executor: l.executor ?? ctx.executor.name,
  });
  r.startReported = true;
  ctx.save();
  return again;
}

/**
 * Reports the runner's exit status and last lines. With `bestEffort` (the release has begun) a
 * refusal does not hold up the cleanup: the evidence is given up, the release goes on.
 */
export async function reportExited(ctx: StepContext, bestEffort: boolean): Promise<StepResult> {
  const l = currentLease(ctx);
  const r = l.runner!;
  const seen = await ctx.executor.observe(l);
  const exitCode = seen.state === 'exited' ? seen.exitCode : null;
  const receipt = l.task ? await buildTaskReceipt(ctx, exitCode) : undefined;
  const lastLines = await ctx.executor.lastLines(l, 30);
  const exited = {
    type: 'runner_exited',
    fencingToken: l.fencingToken,
    runnerName: r.runnerName,
    exitCode,
    lastLines,
  } as const;
  try {
    try {
      await ctx.report({ ...exited, ...(receipt ? { receipt } : {}) });
    } catch (e) {
      // a receipt the controller will not take must not hold the exit (and the release) forever
      if (!(receipt && e instanceof ControllerRejected && e.code === 'receipt_mismatch')) throw e;
      ctx.log.warn('the controller refused the task receipt; reporting the exit without it', {
        leaseId: l.leaseId,
        error: e.message,
      });
      await ctx.report(exited);
    }
  } catch (e) {
    if (!bestEffort || !(e instanceof ControllerRejected)) throw e;
  }
  r.exitReported = true;
  ctx.save();
  return bestEffort ? again : waitFor(null);
}

/**
 * A CI task's receipt (issue 15, ADR 0110): the agent stands in for the spark-test action and
 * builds it from the task's exit (dstack's job status) and its whole output (dstack's logs).
 * A receipt that cannot be built is logged and left out; the exit is still reported.
 */
async function buildTaskReceipt(ctx: StepContext, exitCode: number | null): Promise<Receipt | undefined> {
  const l = currentLease(ctx);
  const r = l.runner!;
  try {
    const output = ctx.executor.taskOutput
      ? await ctx.executor.taskOutput(l)
      : { text: '', complete: false, detail: 'this executor runs no tasks' };
    const receipt = taskReceipt({
      lease: l,
      hostId: ctx.cfg.hostId,
      task: l.task!,
      exitCode,
      stopped: r.stoppedByAgent,
      startedAt: r.startedAt,
      endedAt: Date.now(),
      output,
      secrets: ctx.executor.taskSecrets?.(l) ?? [],
    });
    // ADR 0115: a task that did not say its token was revoked (it failed closed, had no HTTP
    // client, was stopped early) leaves a live token in dstack's run record until GitHub's hour
    // ends; the agent still holds it in memory and revokes it now. The receipt stays the task's own.
    if (!receipt.toolchain.cloneToken && ctx.executor.revokeTaskToken) {
      const outcome = await ctx.executor.revokeTaskToken(l);
      if (outcome)
        ctx.log[outcome.dead ? 'info' : 'warn'](
          outcome.dead
            ? 'the task did not revoke its clone token; the agent did'
            : "the task did not revoke its clone token and the agent could not; it expires within GitHub's hour",
          { leaseId: l.leaseId, revoke: outcome.detail },
        );
    }
    return receipt;
  } catch (e) {
    ctx.log.warn('the task receipt could not be built', { leaseId: l.leaseId, error: (e as Error).message });
    return undefined;
  }
}
