import { describeFailure } from '../exec.ts';
import { type StepContext, type StepResult, waitFor } from './context.ts';

/**
 * Recreates the home service and reports once its model-ready check passed or ran out of time:
 * after a lease lent it, after an operator cleared a quarantine, and when it stopped by itself
 * outside any lease (ADR 0175). The controller counts the attempts and backs off between them.
 */
export async function restoreService(
  ctx: StepContext,
  d: { fencingToken: number; attempt: number; healthTimeoutS: number },
): Promise<StepResult> {
  const svc = ctx.cfg.service;
  if (!svc) throw new TypeError('restore step chosen without a home service');
  ctx.state.restore = { fencingToken: d.fencingToken, attempt: d.attempt, startedAt: ctx.port.now() };
  ctx.save();
  ctx.log.info('restoring the home service', { service: svc.name, attempt: d.attempt });
  // A service that answers but is not model-ready (hung, failed to load, left draining) is stopped
  // first: `systemctl start` of a unit that is already active leaves its process as it is, and a
  // retry must really restart it (ADR 0175). A lent or crashed service answers nothing: start only.
  const before = await ctx.port.probeHealth(svc.healthUrl, 2000);
  let stopFailed: string | null = null;
  if (!before.ok && before.status != null) {
    ctx.log.info('the home service answers but is not model-ready; stopping it before the start', {
      service: svc.name,
      health: before.detail,
    });
    const stop = await ctx.port.exec(svc.stop, { timeoutMs: svc.commandTimeoutS * 1000 });
    if (stop.code !== 0) stopFailed = `${svc.name} stop failed: ${describeFailure(svc.stop, stop)}`;
  }
  const start = stopFailed ? null : await ctx.port.exec(svc.start, { timeoutMs: svc.commandTimeoutS * 1000 });
  let ok = false;
  let detail: string;
  if (!start) {
    detail = stopFailed!;
  } else if (start.code !== 0) {
    detail = `${svc.name} start failed: ${describeFailure(svc.start, start)}`;
  } else {
    const h = await ctx.port.waitHealthy(
      svc.healthUrl,
      d.healthTimeoutS * 1000,
      svc.healthPollMs,
      ctx.stopped,
    );
    ok = h.ok;
    detail = h.ok
      ? `${svc.name} model-ready: ${h.detail}`
      : `${svc.name} model-ready check did not pass within ${d.healthTimeoutS} s: ${h.detail}`;
  }
  if (ctx.stopped()) return waitFor(null);
  await ctx.report({ type: 'restored', fencingToken: d.fencingToken, ok, detail });
  ctx.state.restore = null;
  ctx.save();
  return waitFor(null);
}

/** A restore was asked of a host without a home service: say so (the controller quarantines). */
export async function reportRestoreImpossible(ctx: StepContext, fencingToken: number): Promise<StepResult> {
  await ctx.report({
    type: 'restored',
    fencingToken,
    ok: false,
    detail: `the agent of ${ctx.cfg.hostId} has no home service configured`,
  });
  return waitFor(null);
}
