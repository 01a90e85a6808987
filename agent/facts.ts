import type { HostFacts } from '../core/model.ts';
import { dstackEnrolment } from './dstack-enrolment.ts';
import type { GpuQuery } from './gpu.ts';
import type { StepContext } from './steps/context.ts';

/** The home service's state as the heartbeat reports it. */
async function serviceState(ctx: StepContext): Promise<HostFacts['serviceState']> {
  const svc = ctx.cfg.service;
  if (!svc) return 'none';
  if (ctx.state.restore) return 'starting';
  const l = ctx.state.lease;
  if (l?.lend) {
    if (l.lendStep === 'draining') return 'draining';
    if (l.lendStep === 'stopping' || l.lendStep === 'verifying' || l.lendStep === 'lent') return 'stopped';
  }
  const h = await ctx.port.probeHealth(svc.healthUrl, 2000);
  return h.ok ? 'serving' : h.status == null ? 'stopped' : 'failed';
}

async function interconnectOk(ctx: StepContext): Promise<boolean | null> {
  const check = ctx.cfg.interconnectCheck;
  if (!check) return null;
  if (!ctx.interconnect || ctx.port.now() - ctx.interconnect.at > 30_000) {
    const r = await ctx.port.exec(check, { timeoutMs: 30_000 });
    ctx.interconnect = { ok: r.code === 0, at: ctx.port.now() };
  }
  return ctx.interconnect.ok;
}

/**
 * Host facts for a heartbeat: a GPU that cannot be read is `null` with the reason, never "idle".
 * `gpu` is a query just made (the cleanup's), to not run nvidia-smi twice.
 */
export async function collectFacts(ctx: StepContext, gpu?: GpuQuery): Promise<HostFacts> {
  const q = gpu ?? (await ctx.port.queryGpu());
  const l = ctx.state.lease;
  const seen = l ? await ctx.executor.observe(l) : { state: 'none' as const };
  return {
    gpuProcesses: q.ok ? q.processes : null,
    gpuError: q.ok ? null : q.error,
    freeDiskBytes: ctx.port.freeDiskBytes(ctx.cfg.workRoot),
    serviceState: await serviceState(ctx),
    runnerState: seen.state === 'none' ? 'none' : seen.state === 'running' ? 'running' : 'exited',
    interconnectOk: await interconnectOk(ctx),
    executor: ctx.cfg.executor,
    // asked at most once a minute (agent/dstack-enrolment.ts); the controller's rollout gate
    // reads it for repositories whose CI runs on dstack (docs/adr/0166-dstack-enrolment-fact.md)
    dstack: await dstackEnrolment(ctx, ctx.cfg, ctx.port.now()),
  };
}
