import { ControllerRejected } from '../client.ts';
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
  try {
    await ctx.report({
      type: 'runner_exited',
      fencingToken: l.fencingToken,
      runnerName: r.runnerName,
      exitCode: seen.state === 'exited' ? seen.exitCode : null,
      lastLines: await ctx.executor.lastLines(l, 30),
    });
  } catch (e) {
    if (!bestEffort || !(e instanceof ControllerRejected)) throw e;
  }
  r.exitReported = true;
  ctx.save();
  return bestEffort ? again : waitFor(null);
}
