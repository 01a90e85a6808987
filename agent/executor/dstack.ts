import { readFileSync } from 'node:fs';
import type { AgentConfig } from '../config.ts';
import type { AgentLogger } from '../log.ts';
import { redactLines } from '../runner.ts';
import type { LeaseState } from '../state-file.ts';
import { revokeCloneToken, TASK_PROGRAM, type TaskOutput, taskEnv, taskSecrets } from './ci-task.ts';
import type { DstackRun, RunSpec } from './dstack-api.ts';
import {
  createDstackClient,
  type DstackClient,
  DstackRefused,
  DstackUncertain,
  isFinished,
} from './dstack-client.ts';
import { jobEnv, shellJoin } from './runner-env.ts';
import type { Executor, Observation, Termination, Workload } from './types.ts';
import { createWorkArea, recordRunStart } from './work-area.ts';

export interface DstackDeps {
  cfg: AgentConfig;
  log: AgentLogger;
  save(): void;
  /** A client for tests; default: dstack's REST API at `cfg.dstack.url`. */
  client?: DstackClient;
}

/**
 * The dstack run of a lease: one name per reservation, host, fencing token and runner attempt, so a restarted
 * agent (or a second look after an uncertain apply) finds the same run by name, and a later lease
 * of the same host never mistakes an older run for its own.
 */
export function dstackRunName(
  l: Pick<LeaseState, 'reservationId' | 'fencingToken'>,
  hostId: string,
  attempt = 0,
): string {
  return `spark-${l.reservationId}-${hostId}-t${l.fencingToken}-a${attempt}`
    .replace(/[^a-z0-9-]/g, '-')
    .slice(0, 41);
}

/** Variables of the agent's own host that `baseRunnerEnv` adds and a container must not get. */
const HOST_BASICS = /^(PATH|HOME|USER|LOGNAME|SHELL|LANG|TZ|TMPDIR|LC_.*)$/;

/**
 * A dstack run's `env`: what the job needs, without the agent host's basics. dstack's runner lays
 * the run's `env` over the image's own environment (`EnvMap.Update`, runner/internal/runner/
 * executor/executor.go in dstackai/dstack 0.21.2), so the host's `PATH`, `HOME` or `TMPDIR` would
 * replace the image's with paths the container does not have. Only what `runner.passEnv` names
 * explicitly is passed on.
 */
export function containerEnv(env: NodeJS.ProcessEnv, passEnv: readonly string[]): Record<string, string> {
  return Object.fromEntries(
    Object.entries(env).filter(
      (e): e is [string, string] => e[1] !== undefined && (!HOST_BASICS.test(e[0]) || passEnv.includes(e[0])),
    ),
  );
}

/**
 * Host directories the job uses, as dstack instance volumes at the same path
 * (`InstanceMountPoint`, core/models/volumes.py; supported on SSH fleets): the job runs in the
 * image's container and sees nothing of the host otherwise.
 */
export const hostMounts = (dirs: readonly string[]) =>
  [...new Set(dirs)].map((d) => ({ instance_path: d, path: d }));

/** The attempt number the controller put at the end of a runner name (`…-a2`), else 0. */
const attemptOf = (workloadName: string): number => Number(/-a(\d{1,4})$/.exec(workloadName)?.[1] ?? 0);

/** The dev environment of a development lease (one per host: a pair gets one on each host). */
export function devRunName(l: Pick<LeaseState, 'reservationId' | 'fencingToken'>, hostId: string): string {
  return `spark-${l.reservationId}-${hostId}-t${l.fencingToken}-dev`.replace(/[^a-z0-9-]/g, '-').slice(0, 41);
}

/** The command a developer runs to attach to the lease's dev environment (`dstack attach`). */
export const attachCommand = (runName: string): string => `dstack attach ${runName}`;

/**
 * The `dstack` executor. CI leases: the lease's workload — the runner command with
 * the same environment as `jit-runner` — is one dstack task pinned to this host's on-prem SSH fleet
 * (`fleets: [<fleet>]`, `nodes: 1`), created with `runs/apply`, observed with `runs/get`, stopped
 * with `runs/stop`, and confirmed terminated only when dstack reports the run finished
 * (`terminated`, `failed` or `done`). Anything dstack does not answer clearly (unreachable, a
 * timeout, 5xx) counts as "may still run": the lease is kept until a later look confirms the end.
 * Development leases: a dstack dev environment pinned the same way; its attach command is reported
 * once dstack says it runs, and the release stops it and waits for `terminated` like a task.
 */
export function createDstackExecutor(deps: DstackDeps): Executor {
  const { cfg, log, save } = deps;
  const d = cfg.dstack;
  if (!d) throw new TypeError('the dstack executor needs the "dstack" section of the agent config');
  const client =
    deps.client ??
    createDstackClient({
      url: d.url,
      project: d.project,
      token: readFileSync(d.tokenFile, 'utf8').trim(),
      timeoutMs: d.requestTimeoutS * 1000,
    });
  // the work dir is the lease's bookkeeping area on the host; the task runs on the same host
  const area = createWorkArea(cfg, null);
  /** Why dstack refused the last run, for the evidence (the run then never existed). */
  let refusal: string | null = null;
  /** The current task's secrets, in memory only, to redact them from the evidence (as `jit-runner`). */
  let secrets: string[] = [];
  /** The current task's clone token, in memory only, for the agent's revoke backstop (ADR 0115). */
  let cloneToken: string | null = null;
  const runName = (l: LeaseState) => l.runner?.jobId ?? dstackRunName(l, cfg.hostId);

  /** The run of the lease, `null` when dstack has none, `undefined` when dstack did not answer. */
  const look = async (l: LeaseState): Promise<DstackRun | null | undefined> => {
    try {
      return await client.get(runName(l));
    } catch (e) {
      log.warn('dstack did not answer about the run', { run: runName(l), error: (e as Error).message });
      return undefined;
    }
  };
  const exitOf = (run: DstackRun): number | null => {
    const sub = run.latest_job_submission ?? run.jobs[0]?.job_submissions.at(-1);
    if (run.status === 'done') return sub?.exit_status ?? 0;
    return sub?.exit_status ?? null;
  };
  /**
   * Why dstack ended a run whose commands did not decide it (no exit status): the job's
   * `termination_reason` and its message, e.g. `failed_to_start_due_to_no_capacity: Failed to use
   * specified fleets` when no instance of the fleet fits the run (docs/executors.md).
   */
  const endedWithout = (run: DstackRun | null | undefined): string | null => {
    if (!run || !isFinished(run) || run.status === 'done') return null;
    const sub = run.latest_job_submission ?? run.jobs[0]?.job_submissions.at(-1);
    if (sub?.exit_status != null) return null;
    const why = [sub?.termination_reason ?? run.termination_reason, sub?.termination_reason_message]
      .filter(Boolean)
      .join(': ');
    return `dstack run ${run.run_spec.run_name ?? ''} ${run.status} before its commands ended (${why || 'no reason given'})`.slice(
      0,
      300,
    );
  };

  return {
    name: 'dstack',

    prepare: (l) => area.fresh(l),

    async start(l: LeaseState, w: Workload): Promise<void> {
      if (l.phase !== 'prepared') await area.make(l);
      const name = dstackRunName(l, cfg.hostId, attemptOf(w.name));
      // a CI task (ADR 0110): its workload (no token) is kept with the lease for the receipt
      if (w.task) l.task = w.task.spec;
      // persisted before the run exists: a crash after apply finds it again by its name
      recordRunStart(l, { runnerName: w.name, runDir: l.workDir, jobId: name }, save);
      const env = containerEnv(
        w.task ? taskEnv(cfg, l, w.task.spec, w.task.cloneToken) : jobEnv(cfg, null, l, w),
        cfg.runner.passEnv,
      );
      const spec: RunSpec = {
        run_name: name,
        configuration: {
          type: 'task',
          name,
          // a CI task runs the checkout, commit binding and script itself; a runner lease, the runner
          commands: [w.task ? TASK_PROGRAM : shellJoin(cfg.runner.command)],
          env,
          nodes: 1,
          working_dir: l.workDir,
          image: d.image,
          // the job runs in the image's container: the host's model cache (and, for a runner
          // lease, the runner's install) is there only as an instance volume (docs/executors.md)
          volumes: hostMounts(w.task ? [cfg.modelCacheDir] : [cfg.modelCacheDir, cfg.runner.dir]),
          fleets: [d.fleet ?? cfg.hostId],
        },
      };
      refusal = null;
      secrets = w.task ? taskSecrets(w.task.cloneToken) : [w.jitConfig, w.jobToken ?? ''];
      cloneToken = w.task?.cloneToken ?? null;
      try {
        await client.apply(spec);
      } catch (e) {
        if (e instanceof DstackRefused) {
          refusal = e.message;
          throw e;
        }
        // the run may or may not exist: observe/confirmTerminated find it by name, stop stops it
        log.warn('dstack apply not confirmed; the run is looked up by name', {
          run: name,
          error: (e as Error).message,
        });
        throw e;
      }
      log.info('dstack task submitted', { leaseId: l.leaseId, runnerName: w.name, run: name });
    },

    async observe(l: LeaseState): Promise<Observation> {
      const r = l.runner;
      if (!r) return { state: 'none' };
      if (r.exitCode !== undefined) return { state: 'exited', exitCode: r.exitCode, ran: r.exitCode != null };
      const run = await look(l);
      // no clear answer: it may still run, so nothing is reported early (and no start either)
      if (run === undefined) return { state: 'running', pending: !r.startReported };
      // recorded, never created (apply refused or lost before dstack stored it)
      if (run === null) return { state: 'exited', exitCode: null };
      // a run dstack has not provisioned yet has not started: the controller's task-start timeout
      // counts until dstack says `running` (ADR 0120); `terminating` before that never started
      if (!isFinished(run))
        return { state: 'running', pending: !r.startReported && run.status !== 'running' };
      r.exitCode = exitOf(run);
      save();
      // an exit status comes only from the job's commands: it ran, even if no look saw it running
      return { state: 'exited', exitCode: r.exitCode, ran: r.exitCode != null };
    },

    async stop(l: LeaseState): Promise<void> {
      if (!l.runner) return;
      const name = runName(l);
      const run = await look(l);
      if (run === null || (run && isFinished(run))) return;
      l.runner.stoppedByAgent = true;
      save();
      log.info('stopping the dstack run this lease created', { leaseId: l.leaseId, run: name });
      try {
        await client.stop([name], false);
      } catch (e) {
        // confirmTerminated keeps the lease until dstack reports the run finished
        log.warn('dstack stop not confirmed; will look again', { run: name, error: (e as Error).message });
        return;
      }
      const deadline = Date.now() + (cfg.runner.stopGraceS + 30) * 1000;
      for (;;) {
        const now = await look(l);
        if (now === null || (now && isFinished(now)) || Date.now() >= deadline) return;
        await new Promise((res) => setTimeout(res, 200));
      }
    },

    async confirmTerminated(l: LeaseState): Promise<Termination> {
      if (!l.runner) return { ok: true };
      const run = await look(l);
      if (run === undefined) {
        return {
          ok: false,
          detail: `dstack run ${runName(l)}: the server did not answer, termination unconfirmed`,
        };
      }
      if (run === null) return { ok: true };
      if (!isFinished(run)) return { ok: false, detail: `dstack run ${runName(l)} is ${run.status}` };
      return { ok: true };
    },

    async lastLines(l: LeaseState, n: number): Promise<string[]> {
      if (refusal) return [refusal];
      if (!l.runner) return [];
      // the task's output lives with dstack (its runner ships it to the server): its logs API
      const run = await look(l);
      const sub = run ? (run.latest_job_submission ?? run.jobs[0]?.job_submissions.at(-1)) : null;
      if (!run || !sub?.id) return [];
      const why = endedWithout(run);
      try {
        // events are chunks of output, not lines: ask for more than n, then cut to whole lines
        const text = await client.tailLogs(runName(l), sub.id, Math.min(1000, n * 4));
        const lines = text.split(/\r?\n/);
        if (lines.at(-1) === '') lines.pop();
        return redactLines([...lines, ...(why ? [why] : [])].slice(-n), secrets);
      } catch (e) {
        log.warn('dstack logs not available', { run: runName(l), error: (e as Error).message });
        return [`dstack logs of ${runName(l)} not available: ${(e as Error).message}`.slice(0, 300)];
      }
    },

    async startDevelopment(l: LeaseState): Promise<void> {
      if (l.phase !== 'prepared') await area.make(l);
      const name = devRunName(l, cfg.hostId);
      // persisted before the run exists; nothing of a dev environment is reported as a runner
      l.runner = {
        runnerName: name,
        runDir: l.workDir,
        pid: null,
        startTicks: null,
        startedAt: Date.now(),
        startReported: true,
        stoppedByAgent: false,
        exitReported: true,
        jobId: name,
      };
      l.phase = 'running';
      save();
      await client.apply({
        run_name: name,
        configuration: {
          type: 'dev-environment',
          name,
          ide: d.ide,
          image: d.image,
          fleets: [d.fleet ?? cfg.hostId],
          // the controller's lease decides how long it lives, not dstack's idle timer
          inactivity_duration: 'off',
        },
      });
      log.info('dstack dev environment submitted', { leaseId: l.leaseId, run: name });
    },

    async attach(l: LeaseState) {
      const run = await look(l);
      if (run === undefined) return null;
      if (run === null) return { ended: `dstack has no run ${runName(l)}` };
      if (run.status === 'running') return { command: attachCommand(run.run_spec.run_name ?? runName(l)) };
      if (isFinished(run)) return { ended: `dstack run ${runName(l)} is ${run.status}` };
      return null;
    },

    async taskOutput(l: LeaseState): Promise<TaskOutput> {
      if (refusal) return { text: '', complete: false, detail: refusal };
      const run = await look(l);
      const sub = run ? (run.latest_job_submission ?? run.jobs[0]?.job_submissions.at(-1)) : null;
      if (!run || !sub?.id)
        return { text: '', complete: false, detail: `dstack has no output of ${runName(l)}` };
      const why = endedWithout(run);
      try {
        return { ...(await client.readLogs(runName(l), sub.id)), ...(why ? { endedBy: why } : {}) };
      } catch (e) {
        log.warn('dstack logs not available for the receipt', {
          run: runName(l),
          error: (e as Error).message,
        });
        return {
          text: '',
          complete: false,
          detail: `dstack logs not available: ${(e as Error).message}`.slice(0, 300),
        };
      }
    },

    taskSecrets: () => [...secrets],

    async revokeTaskToken(l: LeaseState) {
      if (!cloneToken || !l.task?.revokeUrl) return null;
      const outcome = await revokeCloneToken(l.task.revokeUrl, cloneToken);
      if (outcome.dead) cloneToken = null;
      return outcome;
    },

    async forget(l: LeaseState): Promise<void> {
      refusal = null;
      secrets = [];
      cloneToken = null;
      l.runner = null;
      l.task = undefined;
      save();
    },

    async discard(l: LeaseState): Promise<void> {
      await area.remove(l);
    },
  };
}

export { DstackRefused, DstackUncertain };
