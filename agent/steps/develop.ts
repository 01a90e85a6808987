import { again, currentLease, type StepContext, type StepResult, waitFor } from './context.ts';

/** Creates the development lease's environment (backends that have one: `dstack`). */
export async function startDevelopment(ctx: StepContext): Promise<StepResult> {
  const start = ctx.executor.startDevelopment;
  if (!start)
    throw new TypeError('start-development chosen for an executor without development environments');
  await start.call(ctx.executor, currentLease(ctx));
  return again;
}

/**
 * A development lease is in use: tell the controller once — with a development environment, only
 * once it runs, together with its attach command.
 */
export async function reportActive(ctx: StepContext): Promise<StepResult> {
  const l = currentLease(ctx);
  let attach: string | undefined;
  if (ctx.executor.attach && l.runner) {
    const a = await ctx.executor.attach(l);
    if (a === null) return waitFor(1000);
    if ('ended' in a) {
      ctx.log.warn('the development environment ended before it ran; starting a new one', {
        detail: a.ended,
      });
      l.runner = null;
      ctx.save();
      return waitFor(5000);
    }
    attach = a.command;
  }
  await ctx.report({ type: 'lease_active', fencingToken: l.fencingToken, ...(attach ? { attach } : {}) });
  l.activeReported = true;
  ctx.save();
  return again;
}

/** Past expiry and grace: report the GPU processes that outlived the lease (once); kill nothing. */
export async function checkExpired(ctx: StepContext): Promise<StepResult> {
  const l = currentLease(ctx);
  const q = await ctx.port.queryGpu();
  if (q.ok && q.processes.length && !l.remainReported) {
    await ctx.report({ type: 'processes_remain', fencingToken: l.fencingToken, processes: q.processes });
    l.remainReported = true;
    ctx.save();
  }
  return waitFor(ctx.heartbeatMs());
}
