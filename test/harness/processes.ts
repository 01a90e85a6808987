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

/** Kills a runner's whole process group (runners are detached from their agents on purpose). */
export function killGroup(pid: number): void {
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    killQuietly(pid);
  }
}
