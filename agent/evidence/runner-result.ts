import { RUNNER_JOB_RESULTS, type RunnerJobResult } from '../../core/protocol/host-evidence.ts';

/**
 * The runner's own job result (ADR 0160), read from its console output — the stdout the agent
 * captured itself (the run dir's `output.log`, the agent's 0600 file the wrapper got as a
 * descriptor). actions/runner's listener prints exactly one such line per job it ran,
 * `src/Runner.Listener/JobDispatcher.cs`:
 *
 *   term.WriteLine($"{DateTime.UtcNow:u}: Job {message.JobDisplayName} completed with result: {result}");
 *
 * (`u` is .NET's universal sortable format, `2026-05-01 12:00:00Z`), where `result` is the
 * worker's exit code translated to a `TaskResult` (`TaskResultUtil.TranslateFromReturnCode`).
 * The job's own steps never write to that console: the listener starts the worker, and the
 * worker each step, through `src/Runner.Sdk/ProcessInvoker.cs`, which always redirects the
 * child's stdout and stderr into pipes the parent reads.
 */

const RESULT_LINE = new RegExp(
  `^\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\dZ: Job (.{1,200}) completed with result: (${RUNNER_JOB_RESULTS.join('|')})$`,
);

export interface RunnerConsoleResult {
  result: RunnerJobResult | null;
  job: string | null;
  detail: string;
}

/**
 * The job result in the runner's console lines. A one-job runner prints one; none (it never got a
 * job, or was killed first) or several (not what a one-job runner prints) give no result.
 */
export function parseRunnerConsole(lines: readonly string[]): RunnerConsoleResult {
  const found = lines
    .map((l) => RESULT_LINE.exec(l.trimEnd()))
    .filter((m): m is RegExpExecArray => m != null);
  if (found.length === 0)
    return { result: null, job: null, detail: 'the runner printed no job result (no job ran to its end)' };
  if (found.length > 1)
    return {
      result: null,
      job: null,
      detail: `the runner printed ${found.length} job results; a one-job runner prints one`,
    };
  const m = found[0]!;
  return { result: m[2] as RunnerJobResult, job: m[1]!, detail: `runner console: job ${m[1]} ${m[2]}` };
}

/**
 * A CI task's result from its backend's exit status (ADR 0110): the task is the agent's own
 * program, and the exit status is dstack's record of it, not a line the task printed.
 */
export function taskExitResult(exitCode: number | null, stoppedByAgent: boolean): RunnerConsoleResult {
  if (exitCode === 0) return { result: 'Succeeded', job: 'spark-test.sh', detail: 'task exited 0' };
  if (exitCode == null)
    return stoppedByAgent
      ? { result: 'Canceled', job: 'spark-test.sh', detail: 'task stopped by the agent' }
      : { result: null, job: 'spark-test.sh', detail: 'the task exit status could not be read' };
  return { result: 'Failed', job: 'spark-test.sh', detail: `task exited ${exitCode}` };
}
