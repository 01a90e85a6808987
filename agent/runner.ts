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

/**
 * Starting, watching and stopping the one-job runner. The runner runs in its own process group
 * under a tiny `sh` wrapper that writes its exit status to a file, detached from the agent: a
 * `kill -9` of the agent leaves the job running, and the restarted agent finds its pid and exit
 * status in the run dir. The agent only ever signals this process group — never anything else.
 */

const WRAPPER = [
  'd=$1; shift',
  'echo $$ > "$d/pid"',
  '"$@"',
  'c=$?',
  'printf "%s\\n" "$c" > "$d/exit.tmp" && mv "$d/exit.tmp" "$d/exit"',
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
 * Spawns the runner. The JIT config travels only in `env` (ACTIONS_RUNNER_INPUT_JITCONFIG),
 * never on argv, so it does not show in `ps` or in /proc/<pid>/cmdline.
 */
export function startRunner(opts: {
  runDir: string;
  command: readonly string[];
  cwd: string;
  env: NodeJS.ProcessEnv;
}): StartedRunner {
  mkdirSync(opts.runDir, { recursive: true });
  const log = openSync(join(opts.runDir, 'output.log'), 'a', 0o600);
  try {
    const child = spawn('/bin/sh', ['-c', WRAPPER, 'spark-runner', opts.runDir, ...opts.command], {
      cwd: opts.cwd,
      env: opts.env,
      detached: true,
      stdio: ['ignore', log, log],
    });
    const exited = new Promise<void>((resolve) => {
      child.once('exit', () => resolve());
      child.once('error', () => resolve());
    });
    child.unref();
    if (child.pid == null) throw new Error(`could not start the runner ${opts.command[0]}`);
    return { pid: child.pid, startTicks: processStartTicks(child.pid), exited };
  } finally {
    closeSync(log);
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
  const n = Number(readFileSync(f, 'utf8').trim());
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
 * Stops the runner's process group: SIGTERM, then SIGKILL after `graceMs`. Returns once no member
 * is left (or after the SIGKILL grace). Only ever called for a group this agent started.
 */
export async function stopRunner(pid: number, startTicks: string | null, graceMs: number): Promise<void> {
  if (!isRunnerAlive(pid, startTicks)) return;
  try {
    process.kill(-pid, 'SIGTERM');
  } catch {
    return;
  }
  const deadline = Date.now() + graceMs;
  while (Date.now() < deadline) {
    if (!isRunnerAlive(pid, startTicks)) return;
    await delay(50);
  }
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    return;
  }
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
