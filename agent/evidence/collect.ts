import type { HostEvidence, WorkTree } from '../../core/protocol/host-evidence.ts';
import type { AgentConfig } from '../config.ts';
import { TASK_MARK } from '../executor/ci-task.ts';
import type { Executor } from '../executor/types.ts';
import { leasePaths } from '../host/sandbox.ts';
import type { RunnerAccount } from '../runner.ts';
import type { LeaseState } from '../state-file.ts';
import { parseRunnerConsole, taskExitResult } from './runner-result.ts';
import { loadHostPreflight } from './store.ts';
import { readWorkTrees, runnerWorkFolder } from './work-tree.ts';

/**
 * Gathers the host's evidence of a lease's run once its workload has ended (ADR 0160): the
 * preflight the agent ran before the start, the runner's own job result, and the commit in the
 * work tree — all observed by the agent, none of it taken from the job.
 */

/** Lines of the runner's console scanned for its job result (a listener prints a handful). */
const CONSOLE_LINES = 400;

/**
 * The commit a CI task bound before the repository's code ran (agent/executor/ci-task.ts
 * `TASK_PROGRAM`: `commit binding ok: HEAD is <sha>`, or `failed: HEAD is <x>`). Only the first
 * binding line counts: the task's own step prints it before any of the PR's code runs, and what
 * that code prints later cannot come first.
 */
export function taskWorkTree(output: string): WorkTree {
  const prefix = `${TASK_MARK} commit binding `;
  const line = output.split('\n').find((l) => l.startsWith(prefix));
  if (!line)
    return { path: 'checkout', sha: null, detail: 'the task printed no commit binding (it ended before it)' };
  const m = /^(ok|failed): HEAD is ([0-9a-f]{40})\b/.exec(line.slice(prefix.length));
  if (!m) return { path: 'checkout', sha: null, detail: 'the task could not read its checkout' };
  return {
    path: 'checkout',
    sha: m[2]!,
    detail: `commit binding ${m[1]} (before the repository's code ran)`,
  };
}

export interface GatherDeps {
  cfg: Pick<AgentConfig, 'stateFile' | 'runner' | 'buildCache'>;
  executor: Executor;
  /** The runner user (null: the agent's own); an error: it could not be looked up, nothing is read. */
  account: RunnerAccount | null | Error;
  now: () => number;
}

/**
 * Where the runner's work folder is after the job, as the agent sees it: with a runner user the
 * lease ran in its sandbox (ADR 0155), where the runner dir is a copy-on-write view and all the
 * lease wrote there — the job's checkout included — is in the lease's `runnerWrites`; without one
 * (development only) the runner wrote into its install dir itself.
 */
export function workFolderOf(
  cfg: Pick<AgentConfig, 'runner' | 'buildCache'>,
  l: LeaseState,
  account: RunnerAccount | null,
): string {
  return account ? runnerWorkFolder(leasePaths(cfg, l, true).runnerWrites) : runnerWorkFolder(cfg.runner.dir);
}

export async function gatherHostEvidence(
  d: GatherDeps,
  l: LeaseState,
  exitCode: number | null,
  /** A CI task's whole output (agent/executor/dstack.ts `taskOutput`); absent for a runner. */
  taskOutput?: string,
): Promise<HostEvidence> {
  const stopped = l.runner?.stoppedByAgent ?? false;
  const preflight = loadHostPreflight(d.cfg.stateFile, l.leaseId);
  if (l.task) {
    const r = taskExitResult(exitCode, stopped);
    return {
      version: 1,
      mode: 'task',
      preflight,
      runner: { ...r, exitCode, stoppedByAgent: stopped },
      workTrees: taskOutput != null ? [taskWorkTree(taskOutput)] : [],
      observedAt: d.now(),
    };
  }
  const [lines, trees] = await Promise.all([
    d.executor.lastLines(l, CONSOLE_LINES),
    d.account instanceof Error
      ? { trees: [], detail: `the work tree was not read: ${d.account.message}`.slice(0, 200) }
      : readWorkTrees(workFolderOf(d.cfg, l, d.account), d.account),
  ]);
  const r = parseRunnerConsole(lines);
  return {
    version: 1,
    mode: 'runner',
    preflight,
    runner: {
      result: r.result,
      job: r.job,
      exitCode,
      stoppedByAgent: stopped,
      detail: (trees.trees.length ? r.detail : `${r.detail}; ${trees.detail}`).slice(0, 300),
    },
    workTrees: trees.trees,
    observedAt: d.now(),
  };
}
