import { closeSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';
import { z } from 'zod';
import { TOPOLOGIES } from '../core/model.ts';
import { CiTaskSchema, EXECUTOR_NAMES } from '../core/protocol/agent.ts';

/**
 * The agent's local progress ("Crash safety"). Written by write-to-temp + fsync + rename,
 * so after `kill -9` at any point the file holds either the previous or the next state, never a
 * torn one. It never holds a JIT config or a job token.
 */

const runnerSchema = z.object({
  runnerName: z.string(),
  runDir: z.string(),
  /** Process-group leader (the wrapper shell) and its /proc start time, against pid reuse. */
  pid: z.number().int().nullable(),
  startTicks: z.string().nullable(),
  startedAt: z.number(),
  startReported: z.boolean(),
  /** Set when the agent itself stopped the runner (release or replacement). */
  stoppedByAgent: z.boolean(),
  exitCode: z.number().int().nullable().optional(),
  /** The Slurm job id (executor `slurm`); null until sbatch answered. */
  jobId: z.string().nullable().optional(),
  exitReported: z.boolean(),
});
export type RunnerState = z.infer<typeof runnerSchema>;

const leaseSchema = z.object({
  leaseId: z.string(),
  reservationId: z.string(),
  fencingToken: z.number().int(),
  kind: z.string(),
  topology: z.enum(TOPOLOGIES),
  lend: z.boolean(),
  /** The backend the lease's repository chose; absent: the host's `executor`. */
  executor: z.enum(EXECUTOR_NAMES).optional(),
  /**
   * A CI task's workload (ADR 0110), without its clone token: recorded before the task
   * is created, so the receipt built after a restart still names the commit, suite and lane.
   */
  task: CiTaskSchema.optional(),
  /** The repository of CI work (`owner/name`): its shared build cache (ADR 0157). */
  repo: z.string().optional(),
  workDir: z.string(),
  /** Lending steps: each is written before its command runs, so a restart repeats it. */
  lendStep: z.enum(['none', 'draining', 'stopping', 'verifying', 'lent', 'failed']),
  phase: z.enum(['preparing', 'prepared', 'prepare_failed', 'running', 'cleaning']),
  failure: z.string().nullable(),
  runner: runnerSchema.nullable(),
  activeReported: z.boolean(),
  remainReported: z.boolean(),
  /**
   * A cleanup that keeps failing (ADR 0156): since when, how often, the last reason, and when to
   * try again. Logged once per change of reason; past `timeouts.cleanupS` the host is quarantined.
   */
  cleanup: z
    .object({ since: z.number(), attempts: z.number().int(), reason: z.string(), nextAt: z.number() })
    .nullable()
    .optional(),
});
export type LeaseState = z.infer<typeof leaseSchema>;

export const AgentStateSchema = z.object({
  v: z.literal(1),
  /** Highest fencing token seen; commands carrying a lower one are refused. */
  maxFencingToken: z.number().int().nonnegative(),
  lease: leaseSchema.nullable(),
  /** A restore in progress (repeated after a restart: start and health checks are idempotent). */
  restore: z
    .object({ fencingToken: z.number().int(), attempt: z.number().int(), startedAt: z.number() })
    .nullable(),
  /**
   * Work dirs of ended leases that could not be removed (ADR 0156): removed again before the next
   * lease is prepared. No lease's job sees them (its namespace hides the work root).
   */
  leftovers: z.array(z.string()).max(64).optional(),
});
export type AgentState = z.infer<typeof AgentStateSchema>;

export const emptyState = (): AgentState => ({ v: 1, maxFencingToken: 0, lease: null, restore: null });

/** Loads the state file; a missing file is a fresh agent, a corrupt one an error naming the file. */
export function loadState(path: string): AgentState {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return emptyState();
    throw e;
  }
  const parsed = AgentStateSchema.safeParse(JSON.parse(text));
  if (!parsed.success) {
    throw new Error(
      `agent state file ${path} is not valid (${parsed.error.issues[0]?.message}); move it away only after checking no runner is left running`,
    );
  }
  return parsed.data;
}

/** Atomically replaces the state file. */
export function saveState(path: string, state: AgentState): void {
  mkdirSync(dirname(path), { recursive: true });
  const tmp = `${path}.tmp-${process.pid}`;
  const fd = openSync(tmp, 'w', 0o600);
  try {
    writeSync(fd, `${JSON.stringify(state, null, 2)}\n`);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
  // the rename is durable only once the directory entry is
  const dfd = openSync(dirname(path), 'r');
  try {
    fsyncSync(dfd);
  } finally {
    closeSync(dfd);
  }
}
