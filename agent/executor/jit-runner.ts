import { existsSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { AgentConfig } from '../config.ts';
import { leaseName } from '../host/sandbox.ts';
import type { AgentLogger } from '../log.ts';
import {
  isRunnerAlive,
  killAccountProcesses,
  processesOfUid,
  processStartTicks,
  type RunnerAccount,
  readExitCode,
  redactLines,
  startRunner,
  stopRunner,
  tailLines,
} from '../runner.ts';
import type { LeaseState, RunnerState } from '../state-file.ts';
import { jobEnv } from './runner-env.ts';
import type { Executor, Observation, Termination, Workload } from './types.ts';
import { createWorkArea, recordRunStart } from './work-area.ts';
import { assertUnder, childPath } from './work-dir.ts';

export interface JitRunnerDeps {
  cfg: AgentConfig;
  log: AgentLogger;
  /** The runner user, or null to run the runner as the agent's user (development only). */
  account: RunnerAccount | null;
  /** Persists the agent state (the lease record is part of it). */
  save(): void;
  /** Called when a runner this process spawned exits (ends the long-poll early). */
  onExit(): void;
}

/**
 * The `jit-runner` executor: today's path. The workload is one GitHub Actions
 * runner started with its JIT config in `ACTIONS_RUNNER_INPUT_JITCONFIG`, detached in its own
 * process group under a small wrapper that records its pid and exit status in a run dir the agent
 * keeps beside its state file, so a restarted agent finds the job (or its exit status) again.
 *
 * With a runner account the runner, the job and the work dir belong to that user: the agent makes
 * and removes work dirs as it (the work root is the runner user's, 0700), and at the end of a lease
 * ends every process of it — the host runs one lease at a time and refuses to prepare one while
 * the runner user still has a process, so all of them are this lease's (ADR 0010).
 */
export function createJitRunnerExecutor(deps: JitRunnerDeps): Executor {
  const { cfg, log, save, account } = deps;
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
  // inside its namespace a lease sees its own repository's build cache only (ADR 0157); the
  // namespace is built when the lease is prepared, so the runner's start only enters it (ADR 0200)
  const area = createWorkArea(cfg, account, { sharedCache: true, sandboxRun: true });
  const foreign = area.foreign;

  /** The repository's build cache past its cap is emptied after the lease (ADR 0157). */
  const capCache = async (l: LeaseState): Promise<void> => {
    const max = cfg.buildCache.maxGiB * 2 ** 30;
    const bytes = await area.cacheBytes(l);
    if (bytes == null || bytes <= max) return;
    const wiped = await area.wipeCache(l);
    log[wiped.ok ? 'info' : 'warn']('emptied the build cache over its size cap', {
      leaseId: l.leaseId,
      repo: l.repo,
      bytes,
      maxGiB: cfg.buildCache.maxGiB,
      ...(wiped.ok ? {} : { error: wiped.detail }),
    });
  };

  return {
    name: 'jit-runner',

    async prepare(l: LeaseState): Promise<Termination> {
      return area.fresh(l);
    },

    async start(l: LeaseState, w: Workload): Promise<void> {
      const runDir = childPath(runsRoot, w.name);
      rmSync(runDir, { recursive: true, force: true });
      // prepared leases have their work dir; one adopted in another phase (a restart) may not
      if (l.phase !== 'prepared') await area.make(l);
      // written before the spawn: a crash right after still finds the run dir (and its pid file)
      const run = recordRunStart(l, { runnerName: w.name, runDir }, save);
      const paths = area.paths(l);
      const env = jobEnv(cfg, account, l, w, paths);
      const started = startRunner({
        runDir,
        command: cfg.runner.command,
        workDir: l.workDir,
        env,
        account,
        sandbox: { lease: leaseName(l), cacheKey: paths.cacheKey },
      });
      run.pid = started.pid;
      run.startTicks = started.startTicks;
      save();
      secrets = [w.jitConfig, w.jobToken ?? ''];
      log.info('runner started', { leaseId: l.leaseId, runnerName: w.name, pid: started.pid });
      void started.exited.then(deps.onExit);
    },

    async observe(l: LeaseState): Promise<Observation> {
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
      if (r && alive(r)) {
        r.stoppedByAgent = true;
        save();
        log.info('stopping the runner this agent started', { leaseId: l.leaseId, runnerName: r.runnerName });
        await stopRunner(r.pid!, r.startTicks, cfg.runner.stopGraceS * 1000, account);
      }
      // a job may have left its process group (setsid, double fork): as the runner user it is
      // still this lease's, and it must not live on into the next reservation
      if (r && account && processesOfUid(account.uid).length) {
        const left = await killAccountProcesses(account);
        log.info("ended the runner user's remaining processes", { leaseId: l.leaseId, left: left.length });
      }
    },

    async confirmTerminated(l: LeaseState): Promise<Termination> {
      const r = l.runner;
      if (r && alive(r)) return { ok: false, detail: `runner ${r.runnerName} (pid ${r.pid}) still runs` };
      const left = r ? foreign() : [];
      if (left.length) {
        return {
          ok: false,
          detail: `${left.length} process(es) of ${account!.name} still run (pid ${left.slice(0, 5).join(', ')})`,
        };
      }
      return { ok: true };
    },

    async lastLines(l: LeaseState, n: number): Promise<string[]> {
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

    leasePaths: (l) => area.paths(l),

    async discard(l: LeaseState): Promise<void> {
      const removed = await area.remove(l);
      if (!removed.ok) throw new Error(removed.detail);
      await capCache(l);
      if (l.runner) {
        assertUnder(runsRoot, l.runner.runDir);
        rmSync(l.runner.runDir, { recursive: true, force: true });
      }
      secrets = [];
    },
  };
}
