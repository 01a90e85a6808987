import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { AgentConfig } from '../config.ts';
import type { AgentLogger } from '../log.ts';
import {
  isRunnerAlive,
  processStartTicks,
  readExitCode,
  redactLines,
  startRunner,
  stopRunner,
  tailLines,
} from '../runner.ts';
import type { LeaseState, RunnerState } from '../state-file.ts';
import { baseRunnerEnv, shellJoin } from './runner-env.ts';
import type { Executor, Observation, Termination, Workload } from './types.ts';
import { assertUnder, childPath } from './work-dir.ts';

export interface JitRunnerDeps {
  cfg: AgentConfig;
  log: AgentLogger;
  /** Persists the agent state (the lease record is part of it). */
  save(): void;
  /** Called when a runner this process spawned exits (ends the long-poll early). */
  onExit(): void;
}

/**
 * The `jit-runner` executor (issue 15 item 2): today's path. The workload is one GitHub Actions
 * runner started with its JIT config in `ACTIONS_RUNNER_INPUT_JITCONFIG`, detached in its own
 * process group under a small wrapper that records its pid and exit status in a run dir the agent
 * keeps beside its state file, so a restarted agent finds the job (or its exit status) again.
 */
export function createJitRunnerExecutor(deps: JitRunnerDeps): Executor {
  const { cfg, log, save } = deps;
  /** The current runner's secrets, in memory only, to redact them from evidence. */
  let secrets: string[] = [];
  const runsRoot = join(dirname(cfg.stateFile), 'runs');

  const resolvePid = (r: RunnerState): void => {
    if (r.pid != null) return;
    const f = join(r.runDir, 'pid');
    if (!existsSync(f)) return;
    const pid = Number(readFileSync(f, 'utf8').trim());
    if (Number.isInteger(pid) && pid > 0) {
      r.pid = pid;
      r.startTicks = processStartTicks(pid);
      save();
    }
  };
  const alive = (r: RunnerState): boolean => {
    resolvePid(r);
    return r.pid != null && isRunnerAlive(r.pid, r.startTicks);
  };
  const removeWorkDir = (l: LeaseState): void => {
    // never remove anything outside the work volume, whatever the state file says
    assertUnder(cfg.workRoot, l.workDir);
    rmSync(l.workDir, { recursive: true, force: true });
  };

  return {
    name: 'jit-runner',

    async prepare(l: LeaseState): Promise<void> {
      removeWorkDir(l);
      mkdirSync(l.workDir, { recursive: true, mode: 0o700 });
    },

    async start(l: LeaseState, w: Workload): Promise<void> {
      const runDir = childPath(runsRoot, w.name);
      rmSync(runDir, { recursive: true, force: true });
      assertUnder(cfg.workRoot, l.workDir);
      if (!existsSync(l.workDir)) mkdirSync(l.workDir, { recursive: true, mode: 0o700 });
      // written before the spawn: a crash right after still finds the run dir (and its pid file)
      l.runner = {
        runnerName: w.name,
        runDir,
        pid: null,
        startTicks: null,
        startedAt: Date.now(),
        startReported: false,
        stoppedByAgent: false,
        exitReported: false,
      };
      l.phase = 'running';
      save();
      const env: NodeJS.ProcessEnv = {
        // the job runs PR code: it gets a minimal environment, never the agent's own
        ...baseRunnerEnv(process.env, cfg.runner.passEnv),
        ...(cfg.service
          ? { SPARK_HOME_SERVICE: cfg.service.name, SPARK_SERVICE_HEALTH_URL: cfg.service.healthUrl }
          : {}),
        ...(cfg.interconnectCheck ? { SPARK_INTERCONNECT_CHECK: shellJoin(cfg.interconnectCheck) } : {}),
        ACTIONS_RUNNER_INPUT_JITCONFIG: w.jitConfig,
        SPARK_CONTROLLER_URL: cfg.controllerUrl,
        SPARK_RESERVATION_ID: l.reservationId,
        SPARK_HOST_ID: cfg.hostId,
        SPARK_FENCING_TOKEN: String(l.fencingToken),
        SPARK_LEASE_TOKEN: w.jobToken ?? '',
        SPARK_TOPOLOGY: l.topology,
        SPARK_WORK_DIR: l.workDir,
        SPARK_MODEL_CACHE: cfg.modelCacheDir,
      };
      const started = startRunner({ runDir, command: cfg.runner.command, cwd: l.workDir, env });
      l.runner.pid = started.pid;
      l.runner.startTicks = started.startTicks;
      save();
      secrets = [w.jitConfig, w.jobToken ?? ''];
      log.info('runner started', { leaseId: l.leaseId, runnerName: w.name, pid: started.pid });
      void started.exited.then(deps.onExit);
    },

    observe(l: LeaseState): Observation {
      const r = l.runner;
      if (!r) return { state: 'none' };
      if (alive(r)) return { state: 'running' };
      if (r.exitCode === undefined) {
        r.exitCode = readExitCode(r.runDir);
        save();
      }
      return { state: 'exited', exitCode: r.exitCode ?? null };
    },

    async stop(l: LeaseState): Promise<void> {
      const r = l.runner;
      if (!r || !alive(r)) return;
      r.stoppedByAgent = true;
      save();
      log.info('stopping the runner this agent started', { leaseId: l.leaseId, runnerName: r.runnerName });
      await stopRunner(r.pid!, r.startTicks, cfg.runner.stopGraceS * 1000);
    },

    async confirmTerminated(l: LeaseState): Promise<Termination> {
      const r = l.runner;
      if (r && alive(r)) return { ok: false, detail: `runner ${r.runnerName} (pid ${r.pid}) still runs` };
      return { ok: true };
    },

    lastLines(l: LeaseState, n: number): string[] {
      return l.runner ? redactLines(tailLines(l.runner.runDir, n), secrets) : [];
    },

    async forget(l: LeaseState): Promise<void> {
      if (l.runner) {
        assertUnder(runsRoot, l.runner.runDir);
        rmSync(l.runner.runDir, { recursive: true, force: true });
      }
      l.runner = null;
      secrets = [];
      save();
    },

    async discard(l: LeaseState): Promise<void> {
      removeWorkDir(l);
      if (l.runner) {
        assertUnder(runsRoot, l.runner.runDir);
        rmSync(l.runner.runDir, { recursive: true, force: true });
      }
      secrets = [];
    },
  };
}
