import type { DesiredState } from '../../core/protocol/agent.ts';
import type { Step } from '../reconcile.ts';
import { beginClean, checkHold, finishClean, stopWorkload } from './clean.ts';
import type { StepContext, StepResult } from './context.ts';
import { checkExpired, reportActive, startDevelopment } from './develop.ts';
import { adoptLease, dropLease, raiseFencingToken, refuseStale } from './lease-record.ts';
import { lendDrain, lendStop, lendVerify } from './lend.ts';
import { failPrepare, prepareHost, reportPrepared, reportPrepareFailed } from './prepare.ts';
import { reportRestoreImpossible, restoreService } from './restore.ts';
import { replaceWorkload, reportExited, reportStarted, startWorkload } from './run.ts';

export type { StepContext, StepResult } from './context.ts';

/** Runs one step chosen by `reconcile` for desired state `d`. */
export async function runStep(ctx: StepContext, step: Step, d: DesiredState): Promise<StepResult> {
  switch (step.kind) {
    case 'refuse-stale':
      return refuseStale(ctx, d.state, step.fencingToken, step.highest);
    case 'raise-fencing-token':
      return raiseFencingToken(ctx, step.fencingToken);
    case 'drop-lease':
      return dropLease(ctx, step.why);
    case 'adopt-lease':
      return adoptLease(ctx, step.lease);
    case 'fail-prepare':
      return failPrepare(ctx, step.reason);
    case 'report-prepare-failed':
      return reportPrepareFailed(ctx);
    case 'lend-drain':
      return lendDrain(ctx);
    case 'lend-stop':
      return lendStop(ctx);
    case 'lend-verify':
      return lendVerify(ctx);
    case 'prepare-host':
      return prepareHost(ctx);
    case 'report-prepared':
      return reportPrepared(ctx);
    case 'replace-workload':
      return replaceWorkload(ctx, step.next);
    case 'start-workload':
      return startWorkload(ctx, step.workload);
    case 'report-started':
      return reportStarted(ctx);
    case 'report-exited':
      return reportExited(ctx, step.bestEffort);
    case 'start-development':
      return startDevelopment(ctx);
    case 'report-active':
      return reportActive(ctx);
    case 'check-expired':
      return checkExpired(ctx);
    case 'begin-clean':
      return beginClean(ctx);
    case 'stop-workload':
      return stopWorkload(ctx);
    case 'finish-clean':
      return finishClean(ctx);
    case 'check-hold':
      return checkHold(ctx);
    case 'restore':
      if (d.state !== 'restore') throw new TypeError('restore step without a restore desired state');
      return restoreService(ctx, d);
    case 'report-restore-impossible':
      if (d.state !== 'restore') throw new TypeError('restore step without a restore desired state');
      return reportRestoreImpossible(ctx, d.fencingToken);
    case 'wait':
      return { next: 'wait', ms: step.ms };
  }
}
