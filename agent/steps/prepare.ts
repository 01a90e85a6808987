import { describeFailure } from '../exec.ts';
import { describeProcesses } from '../gpu.ts';
import { removeLeftovers } from './clean.ts';
import { again, currentLease, type StepContext, type StepResult, waitFor } from './context.ts';

/** Records a failed preparation and reports it (the controller fails the reservation as a unit). */
export async function failPrepare(ctx: StepContext, reason: string): Promise<StepResult> {
  const l = currentLease(ctx);
  l.phase = 'prepare_failed';
  l.failure = reason;
  if (l.lend && l.lendStep !== 'lent') l.lendStep = 'failed';
  ctx.save();
  ctx.log.warn('preparation failed', { leaseId: l.leaseId, reason });
  await ctx.report({ type: 'prepare_failed', fencingToken: l.fencingToken, reason });
  return waitFor(null);
}

/** Repeats the report of a preparation that failed before (e.g. before a restart). */
export async function reportPrepareFailed(ctx: StepContext): Promise<StepResult> {
  const l = currentLease(ctx);
  await ctx.report({ type: 'prepare_failed', fencingToken: l.fencingToken, reason: l.failure ?? 'failed' });
  return waitFor(null);
}

/**
 * Host checks before the lease is usable: a GPU with no process (unless the service was just lent
 * and verified gone), the interconnect for pairs, then a fresh work area from the executor.
 */
export async function prepareHost(ctx: StepContext): Promise<StepResult> {
  const l = currentLease(ctx);
  await removeLeftovers(ctx, l);
  // the GPU check and the work area do not depend on each other: do them at once (a fresh work
  // area for a lease that then fails is removed by its cleanup like any other)
  const [q, ready] = await Promise.all([
    l.lend ? Promise.resolve(null) : ctx.port.queryGpu(),
    ctx.executor.prepare(l),
  ]);
  if (q && !q.ok) return failPrepare(ctx, `GPU state unknown: ${q.error}`);
  if (q?.ok && q.processes.length) {
    return failPrepare(
      ctx,
      `GPU busy: ${q.processes.length} process(es) outside the lease (${describeProcesses(q.processes)})`,
    );
  }
  if (!ready.ok) return failPrepare(ctx, ready.detail);
  const check = ctx.cfg.interconnectCheck;
  if (l.topology === 'pair' && check) {
    const r = await ctx.port.exec(check, { timeoutMs: 60_000 });
    ctx.interconnect = { ok: r.code === 0, at: ctx.port.now() };
    if (r.code !== 0) return failPrepare(ctx, `interconnect check failed: ${describeFailure(check, r)}`);
  }
  l.phase = 'prepared';
  ctx.save();
  return again;
}

/** Tells the controller the host is ready for this lease. */
export async function reportPrepared(ctx: StepContext): Promise<StepResult> {
  const l = currentLease(ctx);
  await ctx.report({
    type: 'prepared',
    fencingToken: l.fencingToken,
    serviceLent: l.lend && l.lendStep === 'lent',
    evidence: { gpuProcesses: 0, interconnectOk: ctx.interconnect?.ok ?? null },
  });
  return waitFor(null);
}
