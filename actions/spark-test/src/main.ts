import { existsSync, mkdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import * as core from '@actions/core';
import type { Suite } from '../../../core/model.ts';
import type { Receipt, ReceiptResult } from '../../../core/protocol/receipt.ts';
import { getInputs, type SparkTestSettings } from './input-helper.ts';
import { checkReceipt, postReceipt, receiptDigest, receiptLines, renderSummary } from './receipt.ts';
import { type Cancellation, RunLog, runPhase, signalPhase } from './run-suite.ts';
import { collectToolchain } from './toolchain.ts';

/** How long a phase past the lane deadline gets between SIGTERM and SIGKILL. */
const KILL_GRACE_MS = 10_000;

/** Correctness always runs first; performance only after correctness passed (issue 5 step 3). */
export function phasesFor(suite: Suite): Suite[] {
  return suite === 'performance' ? ['smoke', 'performance'] : ['smoke'];
}

/** Why the run cannot start at all (config errors that still deserve a receipt), or null. */
function refuseReason(s: SparkTestSettings, head: string): string | null {
  if (!/^[0-9a-f]{40}$/.test(head)) {
    return `cannot read the checked-out commit (git: ${head || 'no answer'}): check out head_sha first`;
  }
  if (head !== s.headSha) {
    return `checked-out commit ${head} is not the admitted ${s.headSha}: run the commit-binding action first`;
  }
  if (!existsSync(s.script.abs)) {
    return `${s.script.given} does not exist in the repository: copy the template from the Spark controller's workflows-templates/`;
  }
  if (s.topology === 'pair') {
    if (!s.distributedAssertion) {
      return 'topology pair needs a real distributed assertion: declare a script that proves both hosts computed together (SPARK_DISTRIBUTED_ASSERTION or the distributed_assertion input); without one a pair run would pass vacuously, so it fails';
    }
    const a = s.distributedAssertion;
    if (!existsSync(a.abs) || !statSync(a.abs).isFile()) {
      return `the declared distributed assertion ${a.given} does not exist in the repository`;
    }
  }
  return null;
}

/**
 * spark-test (issue 5 step 3): print toolchain and source revisions, run the repository's
 * scripts/ci/spark-test.sh per phase in the controller-provided dirs, then write the job's compact
 * receipt to the job summary and post it to the controller. The receipt is detail: the check's
 * verdict comes from the Spark agent's own evidence on the host (ADR 0160).
 */
export async function run(): Promise<void> {
  try {
    const s = getInputs();
    core.setSecret(s.lease.jobToken);
    const startedAt = new Date();

    core.startGroup('Toolchain and source revisions');
    const toolchain = await collectToolchain(s.repoDir, s.childEnv);
    for (const [k, v] of Object.entries(toolchain)) core.info(`${k}: ${v}`);
    core.endGroup();

    mkdirSync(s.workDir, { recursive: true });
    const log = new RunLog(
      join(s.workDir, `spark-test-${s.reservationId}-${s.lease.hostId}.log`),
      Math.max(s.logTailLines, 1),
      (chunk) => process.stdout.write(chunk),
    );
    const cancel: Cancellation = { cancelled: false, current: null };
    const onSignal = (sig: NodeJS.Signals) => {
      cancel.cancelled = true;
      signalPhase(cancel, sig);
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);

    const phases: Receipt['phases'] = [];
    const deadline = startedAt.getTime() + s.lane.targetMinutes * 60_000;
    const laneExceeded = () => `lane ${s.lane.name} exceeded its ${s.lane.targetMinutes}-minute time target`;
    let overTime = false;
    let reason = refuseReason(s, toolchain.source ?? '');
    if (reason) {
      log.write(`spark-test: ${reason}\n`);
    } else {
      for (const suite of phasesFor(s.suite)) {
        if (cancel.cancelled) break;
        if (Date.now() >= deadline) {
          overTime = true;
          reason = `${laneExceeded()} before the ${suite} phase`;
          log.write(`spark-test: ${reason}\n`);
          break;
        }
        // the lane target is enforced here, on the process group this action owns: TERM at the
        // deadline, KILL after a grace period (DESIGN.md: never stop what it does not own)
        const timers: NodeJS.Timeout[] = [];
        timers.push(
          setTimeout(
            () => {
              overTime = true;
              log.write(`spark-test: ${laneExceeded()}: stopping the ${suite} phase\n`);
              signalPhase(cancel, 'SIGTERM');
              timers.push(setTimeout(() => signalPhase(cancel, 'SIGKILL'), KILL_GRACE_MS));
            },
            Math.max(0, deadline - Date.now()),
          ),
        );
        log.write(
          `spark-test: ${suite === 'smoke' ? 'correctness' : 'performance'} phase (SPARK_TEST_SUITE=${suite})\n`,
        );
        const r = await runPhase(s.script.abs, s.topology, {
          cwd: s.repoDir,
          env: {
            ...s.childEnv,
            SPARK_TEST_SUITE: suite,
            SPARK_TOPOLOGY: s.topology,
            SPARK_WORK_DIR: s.workDir,
            SPARK_MODEL_CACHE: s.modelCache,
            SPARK_HEAD_SHA: s.headSha,
            SPARK_LANE: s.lane.name,
            SPARK_LANE_TARGET_MINUTES: String(s.lane.targetMinutes),
            SPARK_LANE_DEADLINE: String(Math.floor(deadline / 1000)),
            ...(s.distributedAssertion ? { SPARK_DISTRIBUTED_ASSERTION: s.distributedAssertion.abs } : {}),
          },
          log,
          cancel,
        });
        for (const t of timers) clearTimeout(t);
        phases.push({ suite, exitCode: r.exitCode, durationMs: r.durationMs });
        if (r.exitCode !== 0) {
          // the script itself refuses to start a step past the deadline (exit 124)
          if (Date.now() >= deadline) overTime = true;
          reason = overTime
            ? `${laneExceeded()}: ${suite} phase stopped`
            : `${suite} phase ${r.signal ? `ended by ${r.signal}` : `exited ${r.exitCode}`}`;
          break;
        }
      }
    }
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    const logSha = await log.close();

    const last = phases[phases.length - 1];
    const elapsedMs = Date.now() - startedAt.getTime();
    const result: ReceiptResult = cancel.cancelled
      ? 'cancelled'
      : reason == null && phases.length === phasesFor(s.suite).length
        ? 'passed'
        : 'failed';
    const receipt = checkReceipt({
      version: 1,
      reservationId: s.reservationId,
      hostId: s.lease.hostId,
      fencingToken: s.lease.fencingToken,
      headSha: s.headSha,
      ...(s.github.repo ? { repo: s.github.repo } : {}),
      ...(s.github.runUrl ? { runUrl: s.github.runUrl } : {}),
      suite: s.suite,
      topology: s.topology,
      ...(s.executor ? { executor: s.executor } : {}),
      phases,
      startedAt: startedAt.toISOString(),
      endedAt: new Date().toISOString(),
      result,
      exitCode: last ? last.exitCode : null,
      ...(reason ? { reason: reason.slice(0, 500) } : cancel.cancelled ? { reason: 'job cancelled' } : {}),
      log: { sha256: logSha, bytes: log.bytes, lines: log.lines },
      lane: {
        name: s.lane.name,
        targetMinutes: s.lane.targetMinutes,
        elapsedMs,
        withinTarget: !overTime && elapsedMs <= s.lane.targetMinutes * 60_000,
      },
      ...(result !== 'passed' && s.logTailLines > 0
        ? { lastLines: receiptLines(log.lastLines().slice(-s.logTailLines), [s.lease.jobToken]) }
        : {}),
      toolchain,
    });
    const body = JSON.stringify(receipt);
    const digest = receiptDigest(body);
    const posted = await postReceipt(s.lease.controllerUrl, s.reservationId, s.lease.jobToken, body);
    await core.summary.addRaw(renderSummary(receipt, digest, posted.detail)).write();

    core.setOutput('result', result);
    core.setOutput('log_path', log.path);
    core.setOutput('log_sha256', logSha);
    core.setOutput('receipt_sha256', digest);

    const problems: string[] = [];
    if (result !== 'passed') problems.push(`Spark test ${result}${reason ? `: ${reason}` : ''}`);
    if (!posted.ok) problems.push(`job receipt not recorded: ${posted.detail}`);
    if (problems.length) throw new Error(problems.join('; '));
    core.info(`Spark test passed; job receipt ${posted.detail} (sha256 ${digest})`);
  } catch (e) {
    core.setFailed(e instanceof Error ? e.message : String(e));
  }
}
