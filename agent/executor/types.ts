import type { LeasePaths } from '../host/sandbox.ts';
import type { LeaseState } from '../state-file.ts';

/**
 * The executor seam: how a lease's workload is prepared, started with the
 * lease's fencing token, observed, stopped and confirmed terminated. The invariants hold for every
 * backend: the agent persists the workload record before anything is created, reports `cleaned`
 * (which releases the lease) only after {@link Executor.confirmTerminated} says so, and stops only
 * what this lease started.
 */

/** Backends the agent knows (core's vocabulary); `jit-runner` (today's one-job GitHub runner) is the default. */
import type { CiTask, ExecutorName } from '../../core/protocol/agent.ts';

export { EXECUTOR_NAMES, type ExecutorName } from '../../core/protocol/agent.ts';

/** What the agent read of the task's output from dstack. */
export interface TaskOutput {
  text: string;
  /** False when the logs could not be read (whole or in part); the receipt says so. */
  complete: boolean;
  detail?: string;
  /** Why dstack ended the run when its commands did not (no exit status), e.g. no instance fits. */
  endedBy?: string;
}

/** What a lease runs. For `jit-runner`: the runner named by the controller and its one-time secrets. */
export interface Workload {
  name: string;
  /** One-time runner configuration (GitHub's encoded JIT config); never persisted. */
  jitConfig: string;
  /** Per-lease job token for the in-job actions; never persisted. */
  jobToken: string | null;
  /**
   * A CI task instead of a runner (`ci: "task"`): the script to run at the exact SHA and
   * the read-only clone token (never persisted). Only the `dstack` backend runs tasks.
   */
  task?: { spec: CiTask; cloneToken: string };
}

/** What the executor sees of the lease's workload right now. */
export type Observation =
  | { state: 'none' }
  | {
      state: 'running';
      /**
       * Created, but its backend has not started it yet (dstack: `pending`, `submitted`,
       * `provisioning`, or no clear answer). It is stopped and waited for like a running workload,
       * but its start is not reported until the backend runs it: the controller's task-start
       * timeout counts until then (ADR 0120).
       */
      pending?: boolean;
    }
  | {
      state: 'exited';
      exitCode: number | null;
      /**
       * The backend says the workload ran before it ended (dstack: the job has an exit status). A
       * start the agent did not see (it ran and ended between two looks) is then reported first.
       */
      ran?: boolean;
    };

/** `ok`, or what is in the way, in words. */
export type Termination = { ok: true } | { ok: false; detail: string };

export interface Executor {
  readonly name: ExecutorName;
  /**
   * Makes the lease's fresh, private work area (removing a leftover one). Refuses (with the
   * reason) when something this lease did not start still runs as the workload's user.
   */
  prepare(lease: LeaseState): Promise<Termination>;
  /**
   * Starts `workload` for `lease` (its fencing token goes along). Records the workload in
   * `lease.runner` and persists it before anything is created, so a crash right after still
   * finds it.
   */
  start(lease: LeaseState, workload: Workload): Promise<void>;
  /** The state of the workload recorded in `lease.runner` (`none` when there is none). */
  observe(lease: LeaseState): Promise<Observation>;
  /** Stops the workload this lease started (and only that). */
  stop(lease: LeaseState): Promise<void>;
  /** Whether everything the workload started is gone; only then may the lease be released. */
  confirmTerminated(lease: LeaseState): Promise<Termination>;
  /** The workload's last output lines for evidence, secrets redacted. */
  lastLines(lease: LeaseState, n: number): Promise<string[]>;
  /** Forgets a stopped workload (its record and run files) but keeps the lease's work area. */
  forget(lease: LeaseState): Promise<void>;
  /**
   * Removes the lease's work area and what the executor kept for the workload; throws with what
   * is in the way (the cleanup step retries a bounded time, then quarantines the host).
   */
  discard(lease: LeaseState): Promise<void>;
  /**
   * Backends whose leases live on this host (`jit-runner`, `slurm`): where the lease's files are —
   * its work dir, its sandbox's home and /tmp, what it wrote into the runner dir (a JIT runner's
   * checkout), its build cache (ADR 0155, 0157); null when the lease has none here. Read before
   * `discard`, which removes them.
   */
  leasePaths?(lease: LeaseState): LeasePaths | null;
  /**
   * Backends with development environments (`dstack`): creates the development lease's environment
   * pinned to this host, recording it in `lease.runner` and persisting that before it is created.
   * Stopped and confirmed terminated like any workload.
   */
  startDevelopment?(lease: LeaseState): Promise<void>;
  /**
   * The development environment's attach command once it runs (`dstack attach <run>`); `null`
   * while it is still starting; `ended` when it finished before it ever ran (a new one is started).
   */
  attach?(lease: LeaseState): Promise<{ command: string } | { ended: string } | null>;
  /**
   * Backends that run CI tasks (`dstack`): the task's whole output, for its receipt (hash, line
   * count, phases); `complete: false` when it could not all be read.
   */
  taskOutput?(lease: LeaseState): Promise<TaskOutput>;
  /** The secrets of the lease's task (in memory only), for redacting its receipt. */
  taskSecrets?(lease: LeaseState): string[];
  /**
   * After a CI task ended without its `clone token revoked` line (ADR 0115): revoke the clone
   * token from the agent, if it still holds it in memory; `null` when it holds none (handed over
   * to an agent that has since restarted, or already dead). The token is dropped once GitHub
   * confirms it dead.
   */
  revokeTaskToken?(lease: LeaseState): Promise<{ dead: boolean; detail: string } | null>;
}
