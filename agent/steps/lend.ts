import type { ServiceConfig } from '../config.ts';
import { describeFailure } from '../exec.ts';
import { describeProcesses } from '../gpu.ts';
import { again, currentLease, type StepContext, type StepResult } from './context.ts';
import { failPrepare } from './prepare.ts';

/**
 * Lending the home service (docs/architecture.md rule 5): drain → stop → verified gone from the GPU. Each
 * step is written to the state file before its command runs, so a restart repeats it (the
 * commands are idempotent).
 */

function service(ctx: StepContext): ServiceConfig {
  const svc = ctx.cfg.service;
  if (!svc) throw new TypeError('lend step chosen without a home service');
  return svc;
}

export async function lendDrain(ctx: StepContext): Promise<StepResult> {
  const l = currentLease(ctx);
  const svc = service(ctx);
  l.lendStep = 'draining';
  ctx.save();
  ctx.log.info('draining the home service', { service: svc.name, leaseId: l.leaseId });
  const r = await ctx.port.exec(svc.drain, { timeoutMs: svc.commandTimeoutS * 1000 });
  if (r.code !== 0) return failPrepare(ctx, `${svc.name} drain failed: ${describeFailure(svc.drain, r)}`);
  l.lendStep = 'stopping';
  ctx.save();
  return again;
}

export async function lendStop(ctx: StepContext): Promise<StepResult> {
  const l = currentLease(ctx);
  const svc = service(ctx);
  ctx.log.info('stopping the home service', { service: svc.name, leaseId: l.leaseId });
  const r = await ctx.port.exec(svc.stop, { timeoutMs: svc.commandTimeoutS * 1000 });
  if (r.code !== 0) return failPrepare(ctx, `${svc.name} stop failed: ${describeFailure(svc.stop, r)}`);
  l.lendStep = 'verifying';
  ctx.save();
  return again;
}

export async function lendVerify(ctx: StepContext): Promise<StepResult> {
  const l = currentLease(ctx);
  const svc = service(ctx);
  const deadline = ctx.port.now() + svc.releaseVerifyTimeoutS * 1000;
  for (;;) {
    const q = await ctx.port.queryGpu();
    if (!q.ok) return failPrepare(ctx, `GPU could not be verified after stopping ${svc.name}: ${q.error}`);
    if (q.processes.length === 0) break;
    if (ctx.port.now() >= deadline || ctx.stopped()) {
      return failPrepare(
        ctx,
        `GPU still busy after stopping ${svc.name}: ${q.processes.length} process(es) (${describeProcesses(q.processes)}); not lent`,
      );
    }
    await ctx.sleep(250);
  }
  l.lendStep = 'lent';
  ctx.save();
  return again;
}
