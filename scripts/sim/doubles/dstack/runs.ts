import { randomUUID } from 'node:crypto';
import { IMAGE_PATH, type JobProcess, launchJob } from './container.ts';
import { SubmissionLog } from './logs.ts';
import type { DevConfig, RunSpecInput, TaskConfig } from './models.ts';

/**
 * Runs and their one job as dstack's server moves them — dstackai/dstack 0.21.2,
 * `contributing/RUNS-AND-JOBS.md` and `src/dstack/_internal/` (cited per step below):
 *
 * - statuses: `RunStatus` and `JobStatus` (core/models/runs.py). A job goes `submitted →
 *   provisioning → pulling → running → terminating → done|failed|terminated|aborted`; every end
 *   passes through `terminating` (`_terminate_job` in server/background/pipeline_tasks/jobs_running.py).
 * - the run's status is derived from its job's (pipeline_tasks/runs/active.py,
 *   RUNS-AND-JOBS.md "Run's Lifecycle" STEP 2): a failed job → run `terminating` with
 *   `job_failed`; a job done → `terminating` with `all_jobs_done`; otherwise `running`,
 *   `provisioning` (job provisioning or pulling) or `submitted`. Once every job is finished the run
 *   takes `RunTerminationReason.to_status()` (STEP 5). No `retry` in the spec means no retry
 *   (`get_retry`, core/services/profiles.py), so a failure is final.
 * - job termination reasons (`JobTerminationReason`): `done_by_runner` (exit 0),
 *   `container_exited_with_error` with the exit status (jobs_running.py `_process_running`),
 *   `failed_to_start_due_to_no_capacity` "Failed to use specified fleets" when no instance of the
 *   run's fleets fits (pipeline_tasks/jobs_submitted.py), `terminated_by_user`/`aborted_by_user`
 *   after `runs/stop` (`RunTerminationReason.to_job_termination_reason`),
 *   `waiting_runner_limit_exceeded` when the instance's runner never answers (jobs_running.py).
 * - a terminating job with an instance is first stopped gracefully — the runner interrupts the
 *   command (SIGINT) — and its container is removed only after `remove_at` (`_stop_job_gracefully`
 *   in pipeline_tasks/jobs_terminating.py: 10 s; here {@link GRACEFUL_STOP_MS}); a job stopped that
 *   way gets no exit status.
 */

/** How often the stand-in's "pipelines" look at a run (dstack's take a few seconds). */
export const STEP_MS = 100;
/** `remove_at` after a graceful stop request: 10 s in dstack, scaled down here (order kept). */
export const GRACEFUL_STOP_MS = 1000;

export type RunStatus =
  | 'pending'
  | 'submitted'
  | 'provisioning'
  | 'running'
  | 'terminating'
  | 'terminated'
  | 'failed'
  | 'done';
export type JobStatus =
  | 'submitted'
  | 'provisioning'
  | 'pulling'
  | 'running'
  | 'terminating'
  | 'terminated'
  | 'aborted'
  | 'failed'
  | 'done';
export type RunTerminationReason = 'all_jobs_done' | 'job_failed' | 'stopped_by_user' | 'aborted_by_user';

const RUN_FINISHED: RunStatus[] = ['terminated', 'failed', 'done'];
const JOB_FINISHED: JobStatus[] = ['terminated', 'aborted', 'failed', 'done'];
export const runFinished = (s: RunStatus) => RUN_FINISHED.includes(s);

/** `JobTerminationReason.to_status()` for the reasons played here. */
const JOB_REASON_STATUS: Record<string, JobStatus> = {
  done_by_runner: 'done',
  container_exited_with_error: 'failed',
  failed_to_start_due_to_no_capacity: 'failed',
  waiting_runner_limit_exceeded: 'failed',
  terminated_by_user: 'terminated',
  aborted_by_user: 'aborted',
  terminated_by_server: 'terminated',
};
/** `RunTerminationReason.to_status()` / `.to_job_termination_reason()`. */
const RUN_REASON: Record<RunTerminationReason, { status: RunStatus; job: string }> = {
  all_jobs_done: { status: 'done', job: 'done_by_runner' },
  job_failed: { status: 'failed', job: 'terminated_by_server' },
  stopped_by_user: { status: 'terminated', job: 'terminated_by_user' },
  aborted_by_user: { status: 'terminated', job: 'aborted_by_user' },
};

export interface StandInJob {
  submissionId: string;
  status: JobStatus;
  terminationReason: string | null;
  terminationReasonMessage: string | null;
  exitStatus: number | null;
  history: JobStatus[];
  /** The job spec dstack built (`JobConfigurator`): what the runner executes. */
  commands: string[];
  imageName: string;
  workingDir: string | null;
  /** `requirements.resources.cpu.arch` (null: any the image supports). */
  arch: 'x86' | 'arm' | null;
  log: SubmissionLog;
  proc: JobProcess | null;
  /** When the container goes (`remove_at`), once a graceful stop was asked. */
  removeAt: number | null;
  /** Whether the job got an instance (a job with none ends without a container stop). */
  placed: boolean;
}

export interface StandInRun {
  id: string;
  name: string;
  spec: RunSpecInput;
  status: RunStatus;
  terminationReason: RunTerminationReason | null;
  submittedAt: string;
  history: RunStatus[];
  finishedAt: number | null;
  job: StandInJob;
  /** Fault: never let the runner answer (ADR 0120's case). */
  hold: boolean;
  /** Fault: the runner never answers and dstack gives up. */
  failStart: boolean;
}

/** What the fleet instance is and can see (see container.ts). */
export interface InstanceEnv {
  arch: 'x86' | 'arm';
  hostOnly: readonly string[];
}

/** `_join_shell_commands` (configurators/base.py): a trailing `&` is wrapped, then ` && `. */
const joinShellCommands = (commands: readonly string[]) =>
  commands
    .map((c) => {
      const t = c.trim();
      return t.endsWith('&') ? `{ ${t} }` : t;
    })
    .join(' && ');

/** A run's job spec: `JobConfigurator._commands`, `_shell`, `_working_dir`, `_requirements`. */
export function jobSpecOf(
  spec: RunSpecInput,
  imageName: string,
  arch: 'x86' | 'arm' | null,
): Pick<StandInJob, 'commands' | 'imageName' | 'workingDir' | 'arch'> {
  const c = spec.configuration as TaskConfig | DevConfig;
  const shell = c.shell
    ? c.shell.startsWith('/')
      ? c.shell
      : `/bin/${c.shell}`
    : c.image == null
      ? '/bin/bash'
      : '/bin/sh';
  // a dev environment's own commands (configurators/dev.py): the IDE, `init`, then it sleeps
  const user = c.type === 'task' ? (c.commands ?? []) : [...(c.init ?? []), 'sleep infinity'];
  const wd = c.working_dir ?? null;
  return {
    commands: [shell, '-i', '-c', joinShellCommands(user)],
    imageName,
    // `_working_dir`: absolute as given; a relative one is under the legacy repo dir /workflow
    workingDir: wd == null ? null : wd.startsWith('/') ? wd : `/workflow/${wd}`,
    arch,
  };
}

/** Instance volumes of the run (`volumes: [{instance_path, path}]` or `"/host:/container"`). */
function instanceVolumes(spec: RunSpecInput): { instancePath: string; path: string }[] {
  const out: { instancePath: string; path: string }[] = [];
  for (const v of spec.configuration.volumes ?? []) {
    if (typeof v === 'string') {
      const [src, dst] = v.split(':');
      if (src?.includes('/') && dst) out.push({ instancePath: src, path: dst });
    } else if ('instance_path' in v) out.push({ instancePath: v.instance_path, path: v.path });
  }
  return out;
}

/** The runner's environment for the job (executor.go `execJob`): image, `DSTACK_*`, run `env`. */
function jobEnv(r: StandInRun, workingDir: string): Record<string, string> {
  const own = r.spec.configuration.env ?? {};
  const env: Record<string, string> = Array.isArray(own)
    ? Object.fromEntries(
        own
          .filter((x) => x.includes('='))
          .map((x) => [x.slice(0, x.indexOf('=')), x.slice(x.indexOf('=') + 1)]),
      )
    : Object.fromEntries(Object.entries(own).map(([k, v]) => [k, String(v)]));
  return {
    PATH: IMAGE_PATH,
    DSTACK_RUN_ID: r.id,
    DSTACK_JOB_ID: r.job.submissionId,
    DSTACK_RUN_NAME: r.name,
    DSTACK_WORKING_DIR: workingDir,
    DSTACK_NODE_RANK: '0',
    DSTACK_NODES_NUM: '1',
    ...env,
    HOME: '/root',
  };
}

/** Advances one run by one pipeline step. */
export function step(r: StandInRun, inst: InstanceEnv): void {
  const j = r.job;
  const setJob = (s: JobStatus) => {
    if (j.status === s) return;
    j.status = s;
    j.history.push(s);
  };
  const terminateJob = (reason: string, message: string | null = null) => {
    if (j.status === 'terminating' || JOB_FINISHED.includes(j.status)) return;
    j.terminationReason = reason;
    j.terminationReasonMessage = message;
    setJob('terminating');
  };
  const setRun = (s: RunStatus) => {
    if (r.status === s) return;
    r.status = s;
    r.history.push(s);
    if (runFinished(s)) r.finishedAt = Date.now();
  };

  // a stopped run: its job terminates with the run's reason (RUNS-AND-JOBS.md run STEP 4)
  if (r.status === 'terminating' && r.terminationReason) terminateJob(RUN_REASON[r.terminationReason].job);

  switch (j.status) {
    case 'submitted':
      // assignment (jobs_submitted.py): an instance of the run's fleets whose arch fits, or none
      if (j.arch != null && j.arch !== inst.arch) {
        terminateJob('failed_to_start_due_to_no_capacity', 'Failed to use specified fleets');
      } else {
        j.placed = true;
        setJob('provisioning');
      }
      break;
    case 'provisioning':
      if (r.failStart)
        terminateJob('waiting_runner_limit_exceeded', 'Runner did not become available in time');
      // "While dstack-shim / dstack-runner is not responding, the job stays PROVISIONING"
      else if (!r.hold) setJob('pulling');
      break;
    case 'pulling': {
      const wd = j.workingDir ?? '/';
      const proc = launchJob({
        argv: j.commands,
        env: jobEnv(r, wd),
        workingDir: wd,
        volumes: instanceVolumes(r.spec),
        hostOnly: inst.hostOnly,
      });
      j.proc = proc;
      proc.onOutput((b) => j.log.append(b));
      void proc.exited.then((code) => {
        j.proc = null;
        // a job already terminating (stopped) keeps its reason and gets no exit status
        if (j.status !== 'running') return;
        // Go's ExitError.ExitCode(): -1 for a command ended by a signal
        j.exitStatus = code ?? -1;
        if (code === 0) terminateJob('done_by_runner');
        else terminateJob('container_exited_with_error');
      });
      setJob('running');
      break;
    }
    case 'terminating':
      // a job without an instance has no container to stop (jobs_terminating.py)
      if (!j.placed) {
        setJob(JOB_REASON_STATUS[j.terminationReason ?? ''] ?? 'failed');
      } else if (j.removeAt == null) {
        j.proc?.interrupt();
        j.removeAt = Date.now() + GRACEFUL_STOP_MS;
      } else if (Date.now() >= j.removeAt) {
        j.proc?.remove();
        if (!j.proc) setJob(JOB_REASON_STATUS[j.terminationReason ?? ''] ?? 'failed');
      }
      break;
    default:
      break;
  }

  // the run's status from its job (pipeline_tasks/runs/active.py, terminating.py)
  if (r.status === 'terminating') {
    if (JOB_FINISHED.includes(j.status) && r.terminationReason)
      setRun(RUN_REASON[r.terminationReason].status);
    return;
  }
  if (runFinished(r.status)) return;
  const reason = j.terminationReason;
  if (
    j.status === 'failed' ||
    (j.status === 'terminating' && reason && JOB_REASON_STATUS[reason] === 'failed')
  ) {
    r.terminationReason = 'job_failed';
    setRun('terminating');
  } else if (j.status === 'done' || (j.status === 'terminating' && reason === 'done_by_runner')) {
    r.terminationReason = 'all_jobs_done';
    setRun('terminating');
  } else if (j.status === 'running') setRun('running');
  else if (j.status === 'provisioning' || j.status === 'pulling') setRun('provisioning');
}

/** `runs/stop` (services/runs/__init__.py `stop_runs`): unfinished runs become `terminating`. */
export function stopRun(r: StandInRun, abort: boolean): void {
  if (runFinished(r.status)) return;
  r.terminationReason = abort ? 'aborted_by_user' : 'stopped_by_user';
  if (r.status !== 'terminating') {
    r.status = 'terminating';
    r.history.push('terminating');
  }
}

/** A new run as `submit_run` stores it: run and job `submitted`. */
export function newRun(
  name: string,
  spec: RunSpecInput,
  job: Pick<StandInJob, 'commands' | 'imageName' | 'workingDir' | 'arch'>,
): StandInRun {
  return {
    id: randomUUID(),
    name,
    spec,
    status: 'submitted',
    terminationReason: null,
    submittedAt: new Date().toISOString(),
    history: ['submitted'],
    finishedAt: null,
    hold: false,
    failStart: false,
    job: {
      ...job,
      submissionId: randomUUID(),
      status: 'submitted',
      terminationReason: null,
      terminationReasonMessage: null,
      exitStatus: null,
      history: ['submitted'],
      log: new SubmissionLog(),
      proc: null,
      removeAt: null,
      placed: false,
    },
  };
}
