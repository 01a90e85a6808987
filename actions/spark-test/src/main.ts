import { existsSync, mkdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as core from '@actions/core';
import { laneTiming, type Receipt, type ReceiptResult } from '../../../core/protocol/receipt.ts';
import { getInputs, type SparkTestSettings } from './input-helper.ts';
import { checkReceipt, postReceipt, receiptDigest, receiptLines, renderSummary } from './receipt.ts';
import { type Cancellation, RunLog, runPhase, signalPhase } from './run-suite.ts';
import { collectToolchain } from './toolchain.ts';

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
 * spark-test: print toolchain and source revisions, run the repository's scripts/ci/spark-test.sh
 * once for the lane in the controller-provided dirs, then write the job's compact receipt to the
 * job summary and the results dir and post it to the controller. The receipt is detail: the
 * check's verdict comes from the Spark agent's own evidence on the host (ADR 0160).
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

    mkdirSync(s.resultsDir, { recursive: true });
    const log = new RunLog(
      join(s.resultsDir, `spark-test-${s.reservationId}-${s.lease.hostId}.log`),
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
    let reason = refuseReason(s, toolchain.source ?? '');
    if (reason) {
      log.write(`spark-test: ${reason}\n`);
    } else if (!cancel.cancelled) {
      // One run of the script for the lane: with SPARK_TEST_SUITE=performance the script runs
      // correctness first itself (the spec's lane definition lives in the script). The lane's
      // time target is not enforced here: a run over it goes on, and the receipt says it went
      // over; the job's hard limit is the workflow's timeout-minutes (docs/in-job.md).
      log.write(
        `spark-test: lane ${s.lane.name} (SPARK_TEST_SUITE=${s.suite}${s.suite === 'performance' ? ': correctness, then performance' : ': correctness'}), ${s.lane.targetMinutes}-minute target\n`,
      );
      const r = await runPhase(s.script.abs, s.topology, {
        cwd: s.repoDir,
        env: {
          ...s.childEnv,
          SPARK_TEST_SUITE: s.suite,
          SPARK_TOPOLOGY: s.topology,
          SPARK_WORK_DIR: s.workDir,
          SPARK_MODEL_CACHE: s.modelCache,
          SPARK_RESULTS_DIR: s.resultsDir,
          SPARK_HEAD_SHA: s.headSha,
          SPARK_LANE: s.lane.name,
          SPARK_LANE_TARGET_MINUTES: String(s.lane.targetMinutes),
          ...(s.distributedAssertion ? { SPARK_DISTRIBUTED_ASSERTION: s.distributedAssertion.abs } : {}),
        },
        log,
        cancel,
      });
      phases.push({ suite: s.suite, exitCode: r.exitCode, durationMs: r.durationMs });
      if (r.exitCode !== 0) {
        reason = `${s.lane.name} (${s.suite}) ${r.signal ? `ended by ${r.signal}` : `exited ${r.exitCode}`}`;
      }
    }
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    const logSha = await log.close();

    const last = phases[phases.length - 1];
    const lane = laneTiming(s.lane.name, s.lane.targetMinutes, Date.now() - startedAt.getTime());
    if (lane.overTarget) {
      core.warning(
        `lane ${lane.name} took ${(lane.elapsedMs / 60_000).toFixed(1)} min, over its ${lane.targetMinutes}-minute target (a target, not a limit)`,
      );
    }
    const result: ReceiptResult = cancel.cancelled
      ? 'cancelled'
      : reason == null && last?.exitCode === 0
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
      lane,
      ...(result !== 'passed' && s.logTailLines > 0
        ? { lastLines: receiptLines(log.lastLines().slice(-s.logTailLines), [s.lease.jobToken]) }
        : {}),
      toolchain,
    });
    const body = JSON.stringify(receipt);
    const digest = receiptDigest(body);
    // beside the lane's results, so the workflow's artifact carries it with them
    writeFileSync(join(s.resultsDir, 'receipt.json'), `${body}\n`);
    const posted = await postReceipt(s.lease.controllerUrl, s.reservationId, s.lease.jobToken, body);
    await core.summary.addRaw(renderSummary(receipt, digest, posted.detail)).write();

    core.setOutput('result', result);
    core.setOutput('log_path', log.path);
    core.setOutput('results_dir', s.resultsDir);
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
