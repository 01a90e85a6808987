import { again, currentLease, type StepContext, type StepResult, waitFor } from './context.ts';

/** A development lease is in use: tell the controller once. */
export async function reportActive(ctx: StepContext): Promise<StepResult> {
  const l = currentLease(ctx);
  await ctx.report({ type: 'lease_active', fencingToken: l.fencingToken });
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
