import { type AgentConfig, hostEnv } from '../config.ts';
import type { RunnerAccount } from '../host/runner-account.ts';
import type { LeasePaths } from '../host/sandbox.ts';
import type { LeaseState } from '../state-file.ts';
import type { Workload } from './types.ts';

/** Variables a runner legitimately needs from the host; everything else of the agent's stays out. */
const RUNNER_ENV_KEEP = ['PATH', 'HOME', 'USER', 'LOGNAME', 'SHELL', 'LANG', 'TZ', 'TMPDIR'];

/** The part of the agent's environment a job may see: the basics, locale, and what the config passes. */
export function baseRunnerEnv(from: NodeJS.ProcessEnv, passEnv: readonly string[] = []): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(from)) {
    if (v !== undefined && (RUNNER_ENV_KEEP.includes(k) || k.startsWith('LC_') || passEnv.includes(k)))
      env[k] = v;
  }
  return env;
}

/** An argv as one POSIX shell command line (the preflight runs it with `/bin/sh -c`). */
export function shellJoin(argv: readonly string[]): string {
  return argv.map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`)).join(' ');
}

/**
 * The runner's environment when it runs as its own user: built fresh (nothing inherited from the
 * agent but the names `passEnv` lists), with the runner user's identity and home.
 */
export function freshRunnerEnv(
  from: NodeJS.ProcessEnv,
  account: { name: string; home: string },
  path: string,
  passEnv: readonly string[] = [],
): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    PATH: path,
    HOME: account.home,
    USER: account.name,
    LOGNAME: account.name,
    SHELL: '/bin/sh',
    LANG: 'C.UTF-8',
  };
  for (const k of passEnv) if (from[k] !== undefined) env[k] = from[k];
  return env;
}

/**
 * The whole environment of a lease's workload: a minimal base (fresh with a runner user), what
 * the in-job actions need (SPARK_*), and the JIT config — in the environment only, never argv.
 *
 * `sandboxed`: the workload runs in the lease's namespace (ADR 0155), where the runner user's home
 * and /tmp are the lease's own. A workload another system starts (a Slurm job) runs outside it: its
 * HOME and TMPDIR then point at the lease's own dirs, so the usual places for global git config,
 * shell rc files and caches are fresh for each lease there too.
 */
export function jobEnv(
  cfg: AgentConfig,
  account: RunnerAccount | null,
  l: LeaseState,
  w: Workload,
  /** The lease's dirs on this host (`jit-runner`, `slurm`); a remote backend (dstack) has none here. */
  paths?: LeasePaths,
  sandboxed = true,
): NodeJS.ProcessEnv {
  return {
    // the job runs PR code: it gets a minimal environment, never the agent's own
    ...(account
      ? freshRunnerEnv(hostEnv, account, cfg.runner.path, cfg.runner.passEnv)
      : baseRunnerEnv(hostEnv, cfg.runner.passEnv)),
    ...(account && paths && !sandboxed ? { HOME: paths.home, TMPDIR: paths.tmp } : {}),
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
    // writable, kept across this repository's leases (ADR 0157); serialize writes with flock
    ...(paths ? { SPARK_BUILD_CACHE_DIR: paths.buildCache } : {}),
    // the in-job receipt names the backend that ran the work
    SPARK_EXECUTOR: l.executor ?? cfg.executor,
  };
}
