import type { HostFacts } from '../core/model.ts';
import { dstackEnrolment } from './dstack-enrolment.ts';
import type { GpuQuery } from './gpu.ts';
import type { HealthResult } from './service.ts';
import type { StepContext } from './steps/context.ts';

/**
 * The home service's state as the heartbeat reports it, and the probe it came from: null when the
 * service was not probed, because a lease lent it or a restore is bringing it back (the service
 * watch, `loops/service-watch.ts`, leaves it alone then).
 */
async function serviceState(
  ctx: StepContext,
): Promise<{ state: HostFacts['serviceState']; probe: HealthResult | null }> {
  const svc = ctx.cfg.service;
  if (!svc) return { state: 'none', probe: null };
  if (ctx.state.restore) return { state: 'starting', probe: null };
  const l = ctx.state.lease;
  if (l?.lend) {
    if (l.lendStep === 'draining') return { state: 'draining', probe: null };
    if (l.lendStep === 'stopping' || l.lendStep === 'verifying' || l.lendStep === 'lent')
      return { state: 'stopped', probe: null };
  }
  const h = await ctx.port.probeHealth(svc.healthUrl, 2000);
  const state = h.ok ? 'serving' : h.status == null ? 'stopped' : 'failed';
  // under a lease the service is the lease's (lent or about to be): the watch does not see it
  return { state, probe: l ? null : h };
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
 * `gpu` is a query just made (the cleanup's), to not run nvidia-smi twice. `onServiceProbe` gets
 * the heartbeat's look at the home service (the service watch, ADR 0175).
 */
export async function collectFacts(
  ctx: StepContext,
  gpu?: GpuQuery,
  onServiceProbe?: (probe: HealthResult | null) => void,
): Promise<HostFacts> {
  const q = gpu ?? (await ctx.port.queryGpu());
  const l = ctx.state.lease;
  const seen = l ? await ctx.executor.observe(l) : { state: 'none' as const };
  const svc = await serviceState(ctx);
  onServiceProbe?.(svc.probe);
  return {
    gpuProcesses: q.ok ? q.processes : null,
    gpuError: q.ok ? null : q.error,
    freeDiskBytes: ctx.port.freeDiskBytes(ctx.cfg.workRoot),
    serviceState: svc.state,
    runnerState: seen.state === 'none' ? 'none' : seen.state === 'running' ? 'running' : 'exited',
    interconnectOk: await interconnectOk(ctx),
    // the host's own backend: development leases go only where it can serve them (ADR 0176)
    executor: ctx.cfg.executor,
    // asked at most once a minute (agent/dstack-enrolment.ts); the controller's rollout gate
    // reads it for repositories whose CI runs on dstack (docs/adr/0166-dstack-enrolment-fact.md)
    dstack: await dstackEnrolment(ctx, ctx.cfg, ctx.port.now()),
  };
}
