import type { HostEvidence, HostPreflight } from '../../core/protocol/host-evidence.ts';
import type { Receipt } from '../../core/protocol/receipt.ts';
import { ControllerRejected } from '../client.ts';
import { evidenceAccount } from '../evidence/account.ts';
import { gatherHostEvidence } from '../evidence/collect.ts';
import { describePreflightFailure, runHostPreflight } from '../evidence/host-preflight.ts';
import { dropHostPreflight, saveHostPreflight } from '../evidence/store.ts';
import { revokeCloneToken, type TaskOutput, taskReceipt } from '../executor/ci-task.ts';
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

/**
 * Starts the lease's workload after the agent's own preflight (ADR 0160): its result is kept for
 * the host's evidence, and a fatal failure starts nothing — the runner's exit is reported at
 * once as "not started", with the failed checks as the evidence.
 */
export async function startWorkload(ctx: StepContext, w: Workload): Promise<StepResult> {
  const l = currentLease(ctx);
  const account = evidenceAccount(ctx.cfg);
  const t0 = performance.now();
  const pre = await runHostPreflight({ cfg: ctx.cfg, port: ctx.port, account }, l);
  saveHostPreflight(ctx.cfg.stateFile, l.leaseId, pre);
  ctx.log.debug('host preflight', {
    leaseId: l.leaseId,
    ok: pre.ok,
    ms: Math.round(performance.now() - t0),
    warn: pre.checks.filter((c) => !c.ok && !c.fatal).map((c) => c.name),
  });
  if (!pre.ok) return refuseStart(ctx, w, pre);
  await ctx.executor.start(l, w);
  return again;
}

async function refuseStart(ctx: StepContext, w: Workload, pre: HostPreflight): Promise<StepResult> {
  const l = currentLease(ctx);
  const why = describePreflightFailure(pre);
  ctx.log.warn('host preflight failed; the workload is not started', { leaseId: l.leaseId, failed: why });
  if (w.task) {
    // the clone token was handed over for a task that never runs: it dies now (ADR 0115)
    const r = w.task.spec.revokeUrl ? await revokeCloneToken(w.task.spec.revokeUrl, w.task.cloneToken) : null;
    if (r) ctx.log[r.dead ? 'info' : 'warn']('clone token of the task not started', { revoke: r.detail });
  }
  const hostEvidence: HostEvidence = {
    version: 1,
    mode: w.task ? 'task' : 'runner',
    preflight: pre,
    runner: {
      result: null,
      job: null,
      exitCode: null,
      stoppedByAgent: false,
      detail: 'not started: the host preflight failed',
    },
    workTrees: [],
    observedAt: ctx.port.now(),
  };
  await ctx.report({
    type: 'runner_exited',
    fencingToken: l.fencingToken,
    runnerName: w.name,
    exitCode: null,
    lastLines: [`host preflight failed: ${why}`.slice(0, 2000)],
    hostEvidence,
  });
  return waitFor(null);
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
  const output = l.task ? await readTaskOutput(ctx) : null;
  const receipt = l.task && output ? await buildTaskReceipt(ctx, exitCode, output) : undefined;
  const hostEvidence = await gatherEvidence(ctx, exitCode, output);
  const lastLines = await ctx.executor.lastLines(l, 30);
  const exited = {
    type: 'runner_exited',
    fencingToken: l.fencingToken,
    runnerName: r.runnerName,
    exitCode,
    lastLines,
    ...(hostEvidence ? { hostEvidence } : {}),
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
  dropHostPreflight(ctx.cfg.stateFile, l.leaseId);
  return bestEffort ? again : waitFor(null);
}

/**
 * The host's evidence of the run (ADR 0160). One that cannot be gathered is logged and left out:
 * the exit is still reported, and the check then cannot pass.
 */
async function gatherEvidence(
  ctx: StepContext,
  exitCode: number | null,
  output: TaskOutput | null,
): Promise<HostEvidence | undefined> {
  const l = currentLease(ctx);
  const t0 = performance.now();
  try {
    const e = await gatherHostEvidence(
      { cfg: ctx.cfg, executor: ctx.executor, account: evidenceAccount(ctx.cfg), now: () => ctx.port.now() },
      l,
      exitCode,
      output?.text,
    );
    ctx.log.debug('host evidence gathered', {
      leaseId: l.leaseId,
      result: e.runner.result,
      trees: e.workTrees.length,
      ms: Math.round(performance.now() - t0),
    });
    return e;
  } catch (e) {
    ctx.log.warn('the host evidence could not be gathered', {
      leaseId: l.leaseId,
      error: (e as Error).message,
    });
    return undefined;
  }
}

/**
 * A CI task's whole output (dstack's logs), read once for its receipt and its evidence; null when
 * it could not be read (logged; the exit is still reported).
 */
async function readTaskOutput(ctx: StepContext): Promise<TaskOutput | null> {
  const l = currentLease(ctx);
  try {
    return ctx.executor.taskOutput
      ? await ctx.executor.taskOutput(l)
      : { text: '', complete: false, detail: 'this executor runs no tasks' };
  } catch (e) {
    ctx.log.warn('the task receipt could not be built', { leaseId: l.leaseId, error: (e as Error).message });
    return null;
  }
}

/**
 * A CI task's receipt (ADR 0110): the agent stands in for the spark-test action and
 * builds it from the task's exit (dstack's job status) and its whole output (dstack's logs).
 * A receipt that cannot be built is logged and left out; the exit is still reported.
 */
async function buildTaskReceipt(
  ctx: StepContext,
  exitCode: number | null,
  output: TaskOutput,
): Promise<Receipt | undefined> {
  const l = currentLease(ctx);
  const r = l.runner!;
  try {
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
