import { spawn } from 'node:child_process';
import { accessSync, constants, statSync } from 'node:fs';
import { delimiter, join } from 'node:path';

/** Outcome of one child process; `spawnError` is set when it never started (e.g. ENOENT). */
export interface ProcessResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  spawnError: string | null;
  timedOut: boolean;
}

export interface RunOptions {
  env: Record<string, string | undefined>;
  cwd?: string;
  timeoutMs: number;
  /** Keep at most this many bytes of each stream (a chatty tool must not fill memory). */
  maxBytes?: number;
}

/** Port for running host tools, so tests can hand in fakes on a prepared PATH or a precise in-process fake. */
export interface ProcessRunner {
  run(command: string, args: readonly string[], opts: RunOptions): Promise<ProcessResult>;
}

/** The real runner: no shell, argv only, killed (with its process group) after `timeoutMs`. */
export function createProcessRunner(): ProcessRunner {
  return {
    run(command, args, opts) {
      const max = opts.maxBytes ?? 1024 * 1024;
      return new Promise((resolve) => {
        let stdout = '';
        let stderr = '';
        let timedOut = false;
        let settled = false;
        const child = spawn(command, [...args], {
          env: opts.env as NodeJS.ProcessEnv,
          cwd: opts.cwd,
          stdio: ['ignore', 'pipe', 'pipe'],
          detached: true,
        });
        const finish = (r: Omit<ProcessResult, 'stdout' | 'stderr' | 'timedOut'>) => {
          if (settled) return;
          settled = true;
          clearTimeout(timer);
          resolve({ ...r, stdout, stderr, timedOut });
        };
        const timer = setTimeout(() => {
          timedOut = true;
          try {
            if (child.pid) process.kill(-child.pid, 'SIGKILL');
          } catch {
            child.kill('SIGKILL');
          }
        }, opts.timeoutMs);
        child.stdout.setEncoding('utf8').on('data', (d: string) => {
          if (stdout.length < max) stdout += d.slice(0, max - stdout.length);
        });
        child.stderr.setEncoding('utf8').on('data', (d: string) => {
          if (stderr.length < max) stderr += d.slice(0, max - stderr.length);
        });
        child.on('error', (e: NodeJS.ErrnoException) =>
          finish({ code: null, signal: null, spawnError: e.code ?? e.message }),
        );
        child.on('close', (code, signal) => finish({ code, signal, spawnError: null }));
      });
    },
  };
}

/**
 * Resolves `name` on a PATH the way a child process's exec would: the first executable regular
 * file. Returns null when it does not resolve (docs/architecture.md: tools must resolve on the PATH that
 * child processes will see, not the one of an interactive shell).
 */
export function findOnPath(name: string, pathValue: string | undefined): string | null {
  if (name.includes('/')) return isExecutableFile(name) ? name : null;
  for (const dir of (pathValue ?? '').split(delimiter)) {
    if (!dir) continue;
    const candidate = join(dir, name);
    if (isExecutableFile(candidate)) return candidate;
  }
  return null;
}

function isExecutableFile(p: string): boolean {
  try {
    if (!statSync(p).isFile()) return false;
    accessSync(p, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** First non-empty line of a tool's output, trimmed to something printable on one line. */
export function firstLine(text: string, max = 200): string {
  const line = text.split(/\r?\n/).find((l) => l.trim().length > 0) ?? '';
  return line.trim().slice(0, max);
}

/** The last non-blank line of `text`, trimmed to 200 characters. */
export function lastLine(text: string): string {
  const lines = text.split(/\r?\n/).filter((l) => l.trim());
  return (lines[lines.length - 1] ?? '').trim().slice(0, 200);
}
