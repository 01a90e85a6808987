import { execFileSync } from 'node:child_process';
import { basename, dirname, join, relative } from 'node:path';
import { type AgentConfig, AgentConfigError, hostEnv } from '../config.ts';
import { type CommandResult, runCommand } from '../exec.ts';
import type { LeaseState } from '../state-file.ts';
import type { RunnerAccount } from './runner-account.ts';

/**
 * The agent's side of its one privileged helper, `spark-lease-sandbox` (ADR 0155,
 * agent/host/spark-lease-sandbox.sh): the agent holds no capability; everything it does as the
 * runner user or as root — a lease's fresh dirs, its namespace, signals, removal — goes through
 * `runner.helper` (by default `sudo -n -C 5 /usr/local/libexec/spark-lease-sandbox
 * /etc/spark-lease-sandbox.conf`, one sudoers rule). Environments travel on the helper's standard
 * input (never argv: a JIT config must not show in `ps`), read only after the switch to the
 * runner user.
 */

/**
 * A job environment as the helper reads it (protocol 2, ADR 0200): `NAME+VALUE` lines for values
 * without a newline (read as they are, no command per variable), `NAME=BASE64` lines for the
 * others, then an empty line.
 */
export function encodeEnv(env: NodeJS.ProcessEnv): string {
  let out = '';
  for (const [k, v] of Object.entries(env)) {
    if (v === undefined) continue;
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k)) throw new TypeError(`not an environment variable name: ${k}`);
    if (v.includes('\0')) throw new TypeError(`the value of ${k} holds a NUL byte`);
    out += v.includes('\n') ? `${k}=${Buffer.from(v, 'utf8').toString('base64')}\n` : `${k}+${v}\n`;
  }
  return `${out}\n`;
}

/** The helper's protocol this agent speaks: `prepare-run` and `NAME+VALUE` environment lines. */
export const HELPER_PROTOCOL = 2;

/** The environment of a helper command that is not the job: enough to find coreutils. */
const plainEnv = (): NodeJS.ProcessEnv => ({ PATH: '/usr/bin:/bin', LANG: 'C.UTF-8' });

/** What the helper gets from the agent's own environment: enough to find `sudo` (sudo resets the rest). */
export const helperSpawnEnv = (): NodeJS.ProcessEnv => ({
  PATH: hostEnv.PATH ?? '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
});

/** Runs `argv` as the runner user (no capability, no_new_privs); never throws. */
export function runAsRunner(
  account: RunnerAccount,
  argv: readonly string[],
  opts: { timeoutMs: number; env?: NodeJS.ProcessEnv },
): Promise<CommandResult> {
  return runCommand([...account.helper, 'as-runner', '--', ...argv], {
    timeoutMs: opts.timeoutMs,
    env: helperSpawnEnv(),
    input: encodeEnv(opts.env ?? plainEnv()),
  });
}

/** One helper verb (`prepare`, `prepare-run`, `remove`, `wipe-cache`); never throws. */
export function runHelper(account: RunnerAccount, args: readonly string[], timeoutMs = 120_000) {
  return runCommand([...account.helper, ...args], { timeoutMs, env: helperSpawnEnv() });
}

/** The argv that starts `command` as the runner user inside the lease's sandbox. */
export function sandboxRunArgv(
  account: RunnerAccount,
  lease: string,
  key: string,
  command: readonly string[],
) {
  return [...account.helper, 'run', lease, key, '--', ...command];
}

/** The helper's name for a lease: its work dir's name under the work root. */
export const leaseName = (l: Pick<LeaseState, 'workDir'>): string => basename(l.workDir);

/**
 * The build cache key of a repository (`owner/name`, case-insensitive on GitHub): `owner+name` in
 * lower case — `+` is in neither part, so a key names one repository. Null for a name that would
 * not make a plain directory name (the lease then gets a cache of its own).
 */
export function repoCacheKey(repo: string): string | null {
  const m = /^([A-Za-z0-9][A-Za-z0-9_.-]{0,99})\/([A-Za-z0-9_.-]{1,100})$/.exec(repo);
  return m ? `${m[1]}+${m[2]}`.toLowerCase() : null;
}

/** Where a lease's files are, as the agent sees them (outside the lease's namespace). */
export interface LeasePaths {
  /** `SPARK_WORK_DIR`: the lease's work dir (the same path inside the lease's namespace). */
  workDir: string;
  /** The lease's sandbox dirs (root-owned; its home, /tmp, /var/tmp and the runner dir's writes). */
  sandboxDir: string;
  /** The lease's own home (mounted on the runner user's home inside the namespace). */
  home: string;
  /** The lease's /tmp. */
  tmp: string;
  /**
   * What the lease wrote into the runner dir (the upper layer of its copy-on-write view): a JIT
   * runner's `_work` (the job's checkout) is at `<runnerWrites>/_work` after the job.
   */
  runnerWrites: string;
  /** `SPARK_BUILD_CACHE_DIR`: the repository's shared build cache, or the lease's own one. */
  buildCache: string;
  /** The helper's build cache key ("-": the lease's own, removed with it). */
  cacheKey: string;
}

/**
 * The lease's paths (the evidence gathered after the job finds the work tree here).
 * `shared`: whether this executor gives the lease its repository's shared build cache (only inside
 * the namespace, which hides every other repository's: the `jit-runner` executor).
 */
export function leasePaths(
  cfg: Pick<AgentConfig, 'buildCache'>,
  l: Pick<LeaseState, 'workDir' | 'kind' | 'repo'>,
  shared: boolean,
): LeasePaths {
  const root = dirname(l.workDir);
  const sandboxDir = `${l.workDir}.sandbox`;
  const key =
    (shared && cfg.buildCache.perRepository && l.kind !== 'development' && l.repo && repoCacheKey(l.repo)) ||
    '-';
  return {
    workDir: l.workDir,
    sandboxDir,
    home: join(sandboxDir, 'home'),
    tmp: join(sandboxDir, 'tmp'),
    runnerWrites: join(sandboxDir, 'runner'),
    buildCache: key === '-' ? join(l.workDir, '.build-cache') : join(root, '.build-cache', key),
    cacheKey: key,
  };
}

/** What `spark-lease-sandbox CONFIG check` printed. */
export type HelperSettings = Record<string, string>;

/**
 * Asks the helper for its settings at start and refuses to start unless they are the agent's own:
 * the same runner user and work root, the runner dir seen copy-on-write, the model cache nowhere a
 * job may write. Each refusal names what to fix.
 */
export function checkSandbox(cfg: AgentConfig, account: RunnerAccount): HelperSettings {
  const hint =
    'install the helper (docs/agent.md "Install"): agent/host/spark-lease-sandbox.sh as /usr/local/libexec/spark-lease-sandbox, /etc/spark-lease-sandbox.conf, and the sudoers rule';
  let out: string;
  try {
    out = execFileSync(account.helper[0]!, [...account.helper.slice(1), 'check'], {
      encoding: 'utf8',
      env: helperSpawnEnv(),
      timeout: 30_000,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
  } catch (e) {
    const err = e as { stderr?: string; message: string };
    const why = (err.stderr?.trim() || err.message).split('\n').slice(-2).join(' ');
    throw new AgentConfigError(`runner.helper ${account.helper.join(' ')} check failed: ${why}; ${hint}`);
  }
  const s: HelperSettings = {};
  for (const line of out.split('\n')) {
    const i = line.indexOf('=');
    if (i > 0) s[line.slice(0, i)] = line.slice(i + 1);
  }
  // a helper installed from an older release cannot build a lease's namespace ahead nor read the
  // environment this agent sends: every lease would fail at its start
  if (!(Number(s.protocol) >= HELPER_PROTOCOL)) {
    throw new AgentConfigError(
      `the helper ${account.helper.join(' ')} speaks protocol ${s.protocol ?? '1'}, this agent needs ${HELPER_PROTOCOL}; reinstall agent/host/spark-lease-sandbox.sh from this release as /usr/local/libexec/spark-lease-sandbox (docs/agent.md "Install")`,
    );
  }
  const differ = (what: string, theirs: string | undefined, ours: string, field: string) => {
    if (theirs !== ours) {
      throw new AgentConfigError(
        `the helper's ${what} is ${JSON.stringify(theirs ?? null)} but ${field} is ${JSON.stringify(ours)}; make the helper's configuration and agent.json agree`,
      );
    }
  };
  differ('runner_user', s.runner_user, account.name, 'runner.user');
  differ('uid', s.uid, String(account.uid), `the uid of ${account.name}`);
  differ('work_root', s.work_root, cfg.workRoot, 'workRoot');
  differ('runner_dir', s.runner_dir, cfg.runner.dir, 'runner.dir');
  const writable = (s.writable ?? '').split(':').filter(Boolean);
  const inside = (p: string, dir: string) => {
    const rel = relative(dir, p);
    return rel === '' || (!rel.startsWith('..') && !rel.startsWith('/'));
  };
  for (const w of [...writable, cfg.workRoot]) {
    if (inside(cfg.modelCacheDir, w) || inside(w, cfg.modelCacheDir)) {
      throw new AgentConfigError(
        `modelCacheDir ${cfg.modelCacheDir} overlaps ${w}, which jobs may write; the model cache is read-only to jobs (only the host's provisioning writes it)`,
      );
    }
  }
  return s;
}
