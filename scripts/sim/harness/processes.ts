import type { ChildProcess } from 'node:child_process';
import { createWriteStream, readdirSync, readFileSync } from 'node:fs';

/**
 * Process handles of the system harness: every child (controller, agents) is tracked with its
 * output (kept in memory for diagnostics and appended to a log file), and everything a system
 * started can be found again by its temp dir and stopped.
 */

export interface ProcessHandle {
  proc: ChildProcess;
  output(): string;
  exited: Promise<number | null>;
  stop(signal?: NodeJS.Signals): Promise<void>;
}

/** Tracks a child: its output (the last ~200-400 kB in memory, all of it in `logFile`) and its exit. */
export function track(proc: ChildProcess, logFile: string): ProcessHandle {
  let out = '';
  const file = createWriteStream(logFile, { flags: 'a' });
  const take = (b: Buffer) => {
    out += b.toString('utf8');
    if (out.length > 400_000) out = out.slice(-200_000);
    file.write(b);
  };
  proc.stdout?.on('data', take);
  proc.stderr?.on('data', take);
  const exited = new Promise<number | null>((res) =>
    proc.once('exit', (code) => {
      file.end();
      res(code);
    }),
  );
  return {
    proc,
    output: () => out,
    exited,
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      if (proc.exitCode == null && proc.signalCode == null) proc.kill(signal);
      await exited;
    },
  };
}

/** Only the variables a child needs: never a SPARK_* setting of whoever runs the demo. */
export function baseEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v != null && !k.startsWith('SPARK_')) env[k] = v;
  return env;
}

/**
 * Kills every process whose command line names a path under `dir`. A service command cut short
 * can still be exec'ing its child, so it sweeps until two scans in a row find nothing (bounded).
 */
export async function sweepProcessesUnder(dir: string, windowMs = 5000): Promise<void> {
  const deadline = Date.now() + windowMs;
  let quiet = 0;
  while (quiet < 2 && Date.now() < deadline) {
    const pids = pidsUnder(dir);
    for (const pid of pids) killQuietly(pid);
    quiet = pids.length === 0 ? quiet + 1 : 0;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Live processes whose command line names a path under `dir` (a fresh mkdtemp dir: ours). */
function pidsUnder(dir: string): number[] {
  const pids: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d) || Number(d) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${d}/cmdline`, 'utf8').includes(dir)) pids.push(Number(d));
    } catch {
      // exited meanwhile
    }
  }
  return pids;
}

/** SIGKILL, ignoring a process that is already gone. */
export function killQuietly(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

/** Seconds since the epoch at boot (`btime` in /proc/stat), read once. */
let bootSeconds: number | null = null;
/** Clock ticks per second of /proc/<pid>/stat's `starttime` (USER_HZ, 100 on Linux). */
const USER_HZ = 100;

/**
 * When the live process `pid` started (ms since the epoch), or null when there is none (zombies
 * count as none). `btime` is whole seconds, so the value is at most 1 s *earlier* than the real
 * start, never later: a process that started before an instant is never reported after it.
 */
export function processStartMs(pid: number): number | null {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  // fields after the command name, which may itself contain spaces and parentheses
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  if (fields[0] === 'Z' || fields[0] === 'X') return null;
  // field 22 of the whole line (starttime) is the 20th after the command name
  const ticks = Number(fields[19]);
  bootSeconds ??= Number(/^btime (\d+)$/m.exec(readFileSync('/proc/stat', 'utf8'))?.[1]);
  return bootSeconds * 1000 + (ticks * 1000) / USER_HZ;
}

/**
 * Kills a runner's whole process group (runners are detached from their agents on purpose), or
 * the runner itself when it does not lead a group. `seenAt` is a time (ms since the epoch) at
 * which the process was known to be the runner — its own start stamp or when it registered.
 *
 * A pid is a number the kernel hands out again: pid_max is 32,768 here and six test suites on one
 * machine wrap it within minutes, so by teardown a runner that exited long ago may have left its
 * pid to another process of this machine — another test's controller, say. A process that started
 * after `seenAt` is therefore never signalled, and neither is a bare pid whose process is gone.
 * (A group cannot outlive the reuse of its id: the kernel keeps a pid reserved while a process
 * group of that id exists, so signalling the group of a dead leader reaches only its members.)
 */
export function killGroup(pid: number, seenAt: number): void {
  const started = processStartMs(pid);
  if (started !== null && started > seenAt) return;
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // not a group leader (or the group is gone): the runner itself, only while it still runs
    if (started !== null) killQuietly(pid);
  }
}
