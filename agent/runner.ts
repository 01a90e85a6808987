import { spawn } from 'node:child_process';
import {
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  statSync,
} from 'node:fs';
import { join } from 'node:path';
import type { RunnerAccount } from './host/runner-account.ts';
import { encodeEnv, helperSpawnEnv, runAsRunner, sandboxRunArgv } from './host/sandbox.ts';

export type { RunnerAccount } from './host/runner-account.ts';

/**
 * Starting, watching and stopping the one-job runner. The runner runs in its own session and
 * process group under a tiny `sh` wrapper, detached from the agent: a `kill -9` of the agent
 * leaves the job running, and the restarted agent finds its pid and exit status in the run dir.
 *
 * With a runner account (ADR 0010) the wrapper and everything it starts run as that unprivileged
 * user, in a mount and IPC namespace of the lease's own (ADR 0155): the agent's helper
 * (`host/sandbox.ts`) switches to the user with no capability and `no_new_privs` (set-uid binaries
 * such as sudo do not elevate). The run dir stays the agent's (0700): the wrapper gets its pid and
 * exit status files as inherited descriptors 3 and 4, closed before the job starts, so the job can
 * neither read the run dir nor forge its exit status. Signals to the runner's processes are sent
 * as the runner user too, so the agent needs no right to signal anyone else.
 */

const WRAPPER = [
  'cd "$1" || exit 126',
  'shift',
  // the process group's id: the wrapper leads it, or (behind sudo) sudo does
  'cut -d" " -f5 /proc/$$/stat >&3',
  'exec 3>&-',
  '"$@" 4>&-',
  'c=$?',
  'printf "%s\\n" "$c" >&4',
  'exit "$c"',
].join('\n');

export interface StartedRunner {
  pid: number;
  startTicks: string | null;
  /** Resolves when the process exits, if this agent is its parent (not after a restart). */
  exited: Promise<void>;
}

/** Start time of a process in clock ticks since boot (/proc/<pid>/stat field 22), or null. */
export function processStartTicks(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // the command name (field 2) may contain spaces and parentheses: split after the last ')'
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return rest[19] ?? null;
  } catch {
    return null;
  }
}

/**
 * Spawns the runner in `workDir`. The JIT config travels only in `env`
 * (ACTIONS_RUNNER_INPUT_JITCONFIG), never on argv, so it does not show in `ps` or in
 * /proc/<pid>/cmdline.
 */
export function startRunner(opts: {
  runDir: string;
  command: readonly string[];
  workDir: string;
  env: NodeJS.ProcessEnv;
  account: RunnerAccount | null;
  /** The lease's name and build cache key for the helper's sandbox (with a runner account). */
  sandbox?: { lease: string; cacheKey: string };
}): StartedRunner {
  mkdirSync(opts.runDir, { recursive: true, mode: 0o700 });
  const fds = [
    openSync(join(opts.runDir, 'output.log'), 'a', 0o600),
    openSync(join(opts.runDir, 'pid'), 'w', 0o600),
    openSync(join(opts.runDir, 'exit'), 'w', 0o600),
  ] as const;
  try {
    const wrapped = ['/bin/sh', '-c', WRAPPER, 'spark-runner', opts.workDir, ...opts.command];
    const { account } = opts;
    if (account && !opts.sandbox) throw new TypeError('a runner of the runner user starts in its sandbox');
    const argv = account
      ? sandboxRunArgv(account, opts.sandbox!.lease, opts.sandbox!.cacheKey, wrapped)
      : wrapped;
    // cwd '/': the agent may not be able to enter the runner's work dir; the wrapper does, as the
    // runner. With an account the job's environment goes to the helper on stdin, never in argv.
    const child = spawn(argv[0]!, argv.slice(1), {
      cwd: '/',
      env: account ? helperSpawnEnv() : opts.env,
      detached: true,
      stdio: [account ? 'pipe' : 'ignore', fds[0], fds[0], fds[1], fds[2]],
    });
    if (account && child.stdin) {
      child.stdin.on('error', () => {});
      child.stdin.end(encodeEnv(opts.env));
    }
    const exited = new Promise<void>((resolve) => {
      child.once('exit', () => resolve());
      child.once('error', () => resolve());
    });
    child.unref();
    if (child.pid == null) throw new Error(`could not start the runner ${opts.command[0]}`);
    return { pid: child.pid, startTicks: processStartTicks(child.pid), exited };
  } finally {
    for (const fd of fds) closeSync(fd);
  }
}

function statFields(pid: string): string[] | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // fields after the command name; [0] is the state, [2] the process group
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
}

/**
 * Whether the runner's process group still has a live (non-zombie) member that is really ours.
 * Zombies count as gone: after an agent restart the runner is reparented to PID 1, which may
 * never reap it.
 */
export function isRunnerAlive(pid: number, startTicks: string | null): boolean {
  const leader = statFields(String(pid));
  // the pid now leads an unrelated process group: ours is gone
  if (leader && startTicks != null && leader[19] !== startTicks && leader[2] === String(pid)) return false;
  let procs: string[];
  try {
    procs = readdirSync('/proc').filter((d) => /^\d+$/.test(d));
  } catch {
    try {
      process.kill(-pid, 0);
      return true;
    } catch {
      return false;
    }
  }
  for (const p of procs) {
    const f = statFields(p);
    if (f && f[2] === String(pid) && f[0] !== 'Z' && f[0] !== 'X') return true;
  }
  return false;
}

/** Exit status written by the wrapper, or null when it did not get to write one (killed). */
export function readExitCode(runDir: string): number | null {
  const f = join(runDir, 'exit');
  if (!existsSync(f)) return null;
  const text = readFileSync(f, 'utf8').trim();
  // the file exists (empty) from the start: empty means the wrapper never got to write it
  if (!text) return null;
  const n = Number(text);
  return Number.isInteger(n) ? n : null;
}

/** The last `n` lines of the runner's output (read from the end, bounded). */
export function tailLines(runDir: string, n = 30): string[] {
  const f = join(runDir, 'output.log');
  if (!existsSync(f)) return [];
  const size = statSync(f).size;
  const len = Math.min(size, 64 * 1024);
  const buf = Buffer.alloc(len);
  const fd = openSync(f, 'r');
  try {
    readSync(fd, buf, 0, len, size - len);
  } finally {
    closeSync(fd);
  }
  return buf
    .toString('utf8')
    .split('\n')
    .map((l) => l.trimEnd())
    .filter((l) => l.length > 0)
    .slice(-n);
}

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Sends `signal` to the process group `pgid`: directly when the runner runs as the agent's own
 * user, else as the runner user (so the agent needs no right to signal other users' processes).
 */
export async function signalGroup(pgid: number, signal: 'TERM' | 'KILL', account: RunnerAccount | null) {
  if (!account) {
    try {
      process.kill(-pgid, `SIG${signal}`);
    } catch {
      // the group is gone
    }
    return;
  }
  await runAsRunner(account, ['/bin/sh', '-c', `kill -s ${signal} -- -${pgid}`], { timeoutMs: 10_000 });
}

/**
 * Live (non-zombie) processes whose real, effective or saved uid is `uid`, from /proc. Zombies
 * are gone for this purpose (PID 1 in a container may never reap them).
 */
export function processesOfUid(uid: number): number[] {
  const out: number[] = [];
  let procs: string[];
  try {
    procs = readdirSync('/proc').filter((d) => /^\d+$/.test(d));
  } catch {
    return out;
  }
  for (const p of procs) {
    let status: string;
    try {
      status = readFileSync(`/proc/${p}/status`, 'utf8');
    } catch {
      continue;
    }
    const state = /^State:\s+(\S)/m.exec(status)?.[1];
    if (state === 'Z' || state === 'X') continue;
    const ids = /^Uid:\s+(\d+)\s+(\d+)\s+(\d+)/m.exec(status);
    if (ids?.slice(1, 4).some((v) => Number(v) === uid)) out.push(Number(p));
  }
  return out;
}

/**
 * Ends every process of the runner user: `kill -KILL -1` run as that user reaches exactly the
 * processes it may signal, i.e. its own (a job that left its process group with `setsid` too).
 * Only called when the host's one lease is ending, and the runner user is dedicated to it.
 */
export async function killAccountProcesses(account: RunnerAccount, waitMs = 5000): Promise<number[]> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    const left = processesOfUid(account.uid);
    if (!left.length || Date.now() >= deadline) return left;
    await runAsRunner(account, ['/bin/sh', '-c', 'kill -s KILL -- -1'], { timeoutMs: 10_000 });
    await delay(50);
  }
}

/**
 * Stops the runner's process group: SIGTERM, then SIGKILL after `graceMs`. Returns once no member
 * is left (or after the SIGKILL grace). Only ever called for a group this agent started.
 */
export async function stopRunner(
  pid: number,
  startTicks: string | null,
  graceMs: number,
  account: RunnerAccount | null = null,
): Promise<void> {
  if (!isRunnerAlive(pid, startTicks)) return;
  await signalGroup(pid, 'TERM', account);
  const deadline = Date.now() + graceMs;
  while (Date.now() < deadline) {
    if (!isRunnerAlive(pid, startTicks)) return;
    await delay(50);
  }
  await signalGroup(pid, 'KILL', account);
  const hard = Date.now() + 5000;
  while (Date.now() < hard && isRunnerAlive(pid, startTicks)) await delay(50);
}

/**
 * Removes secrets a runner may have echoed (the JIT config, the job token) and long base64 blobs
 * from log lines before they leave the host as evidence.
 */
export function redactLines(lines: readonly string[], secrets: readonly string[]): string[] {
  return lines.map((l) => {
    let out = l;
    for (const s of secrets) if (s && s.length >= 8) out = out.split(s).join('[redacted]');
    return out.replace(/[A-Za-z0-9+/=_-]{120,}/g, '[redacted]').slice(0, 500);
  });
}
