import type { DesiredState, LeaseRef } from '../core/protocol/agent.ts';
import type { Observation, Workload } from './executor/types.ts';
import type { LeaseState } from './state-file.ts';

/**
 * The agent's decision layer: given the controller's desired state and what the
 * agent knows locally, the one next step. Pure — no I/O, no clock — so every transition is
 * unit-tested (`test/unit/reconcile.test.ts`). The poll loop observes, asks, runs the step, and
 * asks again until the answer is `wait`. Level-triggered: asking again after a crash gives the
 * step that is still missing.
 */

/** What the agent knows locally when it decides. */
export interface LocalView {
  /** Highest fencing token seen (from the state file). */
  maxFencingToken: number;
  /** The local record of the lease being worked on, if any. */
  lease: LeaseState | null;
  /** What the executor sees of that lease's workload. */
  workload: Observation;
  /** Whether this host has a home service configured. */
  hasService: boolean;
  /** The current heartbeat period. */
  heartbeatMs: number;
  /** The executor gives development leases an environment to attach to (`dstack`). */
  devEnvironments?: boolean;
}

export type Step =
  /** The command carries a fencing token lower than one already seen: do nothing. */
  | { kind: 'refuse-stale'; fencingToken: number; highest: number }
  /** Remember a higher fencing token before acting on it. */
  | { kind: 'raise-fencing-token'; fencingToken: number }
  /** The controller shows no trace of the local lease: undo only what the agent did itself. */
  | { kind: 'drop-lease'; why: string }
  /** Create the local record of a lease on first sight (raising the highest token seen with it). */
  | { kind: 'adopt-lease'; lease: LeaseRef }
  /** Preparation cannot succeed: record and report the reason. */
  | { kind: 'fail-prepare'; reason: string }
  /** Preparation failed earlier: repeat the report (reports are idempotent). */
  | { kind: 'report-prepare-failed' }
  | { kind: 'lend-drain' }
  | { kind: 'lend-stop' }
  /** A stopped service must also be gone from the GPU: a paused container is not a release. */
  | { kind: 'lend-verify' }
  /** GPU free (unless just lent), interconnect for pairs, fresh work area. */
  | { kind: 'prepare-host' }
  | { kind: 'report-prepared' }
  /** The controller replaced the runner: stop ours, forget it. */
  | { kind: 'replace-workload'; next: string }
  | { kind: 'start-workload'; workload: Workload }
  | { kind: 'report-started' }
  /** `bestEffort`: the release has begun, a refused report must not stop the cleanup. */
  | { kind: 'report-exited'; bestEffort: boolean }
  /** A development lease on a backend with dev environments: create it (persisted first). */
  | { kind: 'start-development' }
  | { kind: 'report-active' }
  /** A development lease past expiry plus grace: report processes that outlived it, kill nothing. */
  | { kind: 'check-expired' }
  | { kind: 'begin-clean' }
  | { kind: 'stop-workload' }
  /** Remove the work area, confirm termination and a free GPU, report `cleaned` (or what remains). */
  | { kind: 'finish-clean' }
  /** Held with a lease: confirm cleanup once the GPU shows no process, killing nothing. */
  | { kind: 'check-hold' }
  | { kind: 'restore' }
  | { kind: 'report-restore-impossible' }
  /** Nothing to do now: look again after `ms` (null: when the desired state changes). */
  | { kind: 'wait'; ms: number | null; why: string };

const wait = (ms: number | null, why: string): Step => ({ kind: 'wait', ms, why });

/** The fencing token a desired state carries, if any. */
export function fencingTokenOf(d: DesiredState): number | null {
  if ('lease' in d && d.lease) return d.lease.fencingToken;
  return d.state === 'restore' ? d.fencingToken : null;
}

/** The next step towards `d` from `local`. */
export function reconcile(d: DesiredState, local: LocalView): Step {
  const token = fencingTokenOf(d);
  if (token != null) {
    if (token < local.maxFencingToken) {
      return { kind: 'refuse-stale', fencingToken: token, highest: local.maxFencingToken };
    }
    if (token > local.maxFencingToken) {
      // a lease seen first: its record carries the token up in the same save (one fsync pair
      // less on the way to a runner); otherwise the token is raised on its own
      if ('lease' in d && d.lease && !local.lease) return { kind: 'adopt-lease', lease: d.lease };
      return { kind: 'raise-fencing-token', fencingToken: token };
    }
  }
  const lease = 'lease' in d ? d.lease : undefined;
  const l = local.lease;
  if (l && l.fencingToken !== lease?.fencingToken && d.state !== 'hold') {
    return { kind: 'drop-lease', why: `lease ${l.leaseId} is no longer current (now: ${d.state})` };
  }
  // below, `lease` is the desired lease and `l` (if set) is its local record
  const mine = lease && l && l.fencingToken === lease.fencingToken ? l : null;
  switch (d.state) {
    case 'idle':
    case 'serve':
      return wait(null, 'nothing bound');
    case 'prepare': {
      if (!mine) return { kind: 'adopt-lease', lease: d.lease };
      if (mine.phase === 'prepare_failed') return { kind: 'report-prepare-failed' };
      if (mine.phase === 'preparing') {
        if (mine.lend) {
          if (!local.hasService) {
            return {
              kind: 'fail-prepare',
              reason: 'lease lends the home service but this agent has none configured',
            };
          }
          if (mine.lendStep === 'none' || mine.lendStep === 'draining') return { kind: 'lend-drain' };
          if (mine.lendStep === 'stopping') return { kind: 'lend-stop' };
          if (mine.lendStep === 'verifying') return { kind: 'lend-verify' };
        }
        return { kind: 'prepare-host' };
      }
      return { kind: 'report-prepared' };
    }
    case 'wait':
      if (!mine) return { kind: 'adopt-lease', lease: d.lease };
      return wait(null, 'prepared; waiting for the other node or the runner config');
    case 'run': {
      if (!mine) return { kind: 'adopt-lease', lease: d.lease };
      const r = mine.runner;
      if (r && r.runnerName !== d.runnerName) return { kind: 'replace-workload', next: d.runnerName };
      if (!r) {
        // a CI task: its clone token is handed over once, like a runner's JIT config
        if (d.task) {
          if (!d.cloneToken) return wait(null, 'task credential was handed over but no task of it runs here');
          return {
            kind: 'start-workload',
            workload: {
              name: d.runnerName,
              jitConfig: '',
              jobToken: d.jobToken ?? null,
              task: { spec: d.task, cloneToken: d.cloneToken },
            },
          };
        }
        if (!d.jitConfig) return wait(null, 'runner config was handed over but no runner of it runs here');
        return {
          kind: 'start-workload',
          workload: { name: d.runnerName, jitConfig: d.jitConfig, jobToken: d.jobToken ?? null },
        };
      }
      if (local.workload.state === 'running') {
        // a runner adopted after a restart is not our child: look at it every second
        if (r.startReported) return wait(1000, 'runner running');
        // submitted, not started by its backend yet (dstack provisioning): no start is reported,
        // so the controller's task-start timeout sees a backend that never starts it (ADR 0120)
        if (local.workload.pending) return wait(1000, 'workload submitted; its backend has not started it');
        return { kind: 'report-started' };
      }
      // it ran and ended between two looks: its start is reported before its exit
      if (local.workload.state === 'exited' && local.workload.ran && !r.startReported && !r.exitReported)
        return { kind: 'report-started' };
      return r.exitReported
        ? wait(null, 'runner exited and reported')
        : { kind: 'report-exited', bestEffort: false };
    }
    case 'develop': {
      if (!mine) return { kind: 'adopt-lease', lease: d.lease };
      if (local.devEnvironments && !mine.runner && !mine.activeReported) return { kind: 'start-development' };
      if (!mine.activeReported) return { kind: 'report-active' };
      // the controller's own expiry pass normally acts first (release, or release-required from
      // the heartbeat facts); the agent's report is the fallback if it has not within two heartbeats
      const graceMs = 2 * local.heartbeatMs;
      if (d.lease.expiresInMs > -graceMs) return wait(d.lease.expiresInMs + graceMs + 250, 'lease live');
      return { kind: 'check-expired' };
    }
    case 'clean':
      if (!mine) return { kind: 'adopt-lease', lease: d.lease };
      return cleanStep(mine, local);
    case 'hold': {
      // the controller ended the lease and holds the host (quarantined): what the agent started
      // for it is still the agent's to stop and remove (ADR 0156)
      if (!d.lease && l)
        return { kind: 'drop-lease', why: `lease ${l.leaseId} ended; host held: ${d.reason}` };
      if (!d.lease) return wait(null, `hold: ${d.reason}`);
      if (!mine) return { kind: 'adopt-lease', lease: d.lease };
      if (mine.phase === 'cleaning') return cleanStep(mine, local);
      // a CI runner may still be running its job: it ends by itself. A development lease's dev
      // environment never does: once the GPU shows none of the lease's processes, the agent stops
      // what it started for the lease and confirms (ADR 0176); until then nothing is touched
      if (mine.runner && local.workload.state === 'running' && mine.kind !== 'development')
        return wait(local.heartbeatMs, 'runner still running');
      return { kind: 'check-hold' };
    }
    case 'restore':
      if (d.waitMs > 0) return wait(d.waitMs, 'restore backoff');
      if (!local.hasService) return { kind: 'report-restore-impossible' };
      return { kind: 'restore' };
  }
}

function cleanStep(l: LeaseState, local: LocalView): Step {
  if (l.phase !== 'cleaning') return { kind: 'begin-clean' };
  if (l.runner && local.workload.state === 'running') return { kind: 'stop-workload' };
  if (l.runner && !l.runner.exitReported) return { kind: 'report-exited', bestEffort: true };
  return { kind: 'finish-clean' };
}
