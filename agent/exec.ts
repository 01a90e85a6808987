import { spawn } from 'node:child_process';

/** Result of a finished command. `error` names why it did not run or finish (missing, timeout). */
export interface CommandResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  error: string | null;
}

const MAX_OUTPUT = 256 * 1024;

/**
 * Runs `argv` without a shell (no quoting surprises) and waits for it, killing it after
 * `timeoutMs`. Never throws: a missing binary or a timeout comes back as `error`. `input` is
 * written to its standard input (otherwise /dev/null).
 */
export function runCommand(
  argv: readonly string[],
  opts: { timeoutMs: number; env?: NodeJS.ProcessEnv; cwd?: string; input?: string },
): Promise<CommandResult> {
  return new Promise((resolve) => {
    const [cmd, ...args] = argv;
    if (!cmd) {
      resolve({ code: null, signal: null, stdout: '', stderr: '', error: 'empty command' });
      return;
    }
    let stdout = '';
    let stderr = '';
    let error: string | null = null;
    const child = spawn(cmd, args, {
      stdio: [opts.input != null ? 'pipe' : 'ignore', 'pipe', 'pipe'],
      // without one the child gets the agent's own environment (Node's default for spawn)
      ...(opts.env ? { env: opts.env } : {}),
      ...(opts.cwd ? { cwd: opts.cwd } : {}),
    });
    if (opts.input != null && child.stdin) {
      // a command that exits without reading its input must not fail the agent with EPIPE
      child.stdin.on('error', () => {});
      child.stdin.end(opts.input);
    }
    child.stdout!.on('data', (b: Buffer) => {
      if (stdout.length < MAX_OUTPUT) stdout += b.toString('utf8');
    });
    child.stderr!.on('data', (b: Buffer) => {
      if (stderr.length < MAX_OUTPUT) stderr += b.toString('utf8');
    });
    const timer = setTimeout(() => {
      error = `timed out after ${Math.round(opts.timeoutMs / 1000)} s`;
      child.kill('SIGKILL');
    }, opts.timeoutMs);
    child.on('error', (e: NodeJS.ErrnoException) => {
      error = e.code === 'ENOENT' ? `${cmd}: command not found` : `${cmd}: ${e.message}`;
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, error });
    });
  });
}

/** One line describing a failed command, for reports and logs (no environment values). */
export function describeFailure(argv: readonly string[], r: CommandResult): string {
  const what = argv[0]?.split('/').pop() ?? 'command';
  if (r.error) return `${what}: ${r.error}`;
  const out = (r.stderr.trim() || r.stdout.trim()).split('\n').slice(-3).join(' | ').slice(0, 300);
  return `${what} exited ${r.code ?? r.signal}${out ? `: ${out}` : ''}`;
}
