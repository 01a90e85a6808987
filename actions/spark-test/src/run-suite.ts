import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createWriteStream, type WriteStream } from 'node:fs';

/**
 * The full log of a run: written to a file in the work dir and echoed to the job log, hashed as it
 * goes, with only the last lines kept in memory (large logs stay out of the ledger).
 */
export class RunLog {
  private readonly hash = createHash('sha256');
  private readonly file: WriteStream;
  private tail: string[] = [];
  private partial = '';
  bytes = 0;
  lines = 0;

  constructor(
    readonly path: string,
    private readonly keep: number,
    private readonly echo: (chunk: string) => void,
  ) {
    this.file = createWriteStream(path);
  }

  write(chunk: string): void {
    this.file.write(chunk);
    this.hash.update(chunk);
    this.bytes += Buffer.byteLength(chunk);
    this.echo(chunk);
    const parts = (this.partial + chunk).split('\n');
    this.partial = parts.pop() ?? '';
    this.lines += parts.length;
    this.tail.push(...parts);
    if (this.tail.length > this.keep) this.tail = this.tail.slice(-this.keep);
  }

  /** Finishes the file; returns the SHA-256 of everything written. */
  async close(): Promise<string> {
    if (this.partial) {
      this.lines += 1;
      this.tail.push(this.partial);
      this.partial = '';
      if (this.tail.length > this.keep) this.tail = this.tail.slice(-this.keep);
    }
    await new Promise<void>((resolve, reject) =>
      this.file.end((err?: Error | null) => (err ? reject(err) : resolve())),
    );
    return this.hash.digest('hex');
  }

  lastLines(): string[] {
    return [...this.tail];
  }
}

export interface PhaseResult {
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  durationMs: number;
}

/** Cancels the running phase (job cancelled): signals only the process group this action started. */
export interface Cancellation {
  cancelled: boolean;
  current: number | null;
}

/**
 * Runs `bash <script> <topology>` in its own process group with stdout+stderr into the log.
 * It never signals anything outside that group (docs/architecture.md: never stop what it does not own).
 */
export function runPhase(
  script: string,
  topology: string,
  opts: { cwd: string; env: Record<string, string | undefined>; log: RunLog; cancel: Cancellation },
): Promise<PhaseResult> {
  const started = Date.now();
  return new Promise((resolve) => {
    const child = spawn('bash', [script, topology], {
      cwd: opts.cwd,
      env: opts.env,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    opts.cancel.current = child.pid ?? null;
    let settled = false;
    const finish = (exitCode: number | null, signal: NodeJS.Signals | null) => {
      if (settled) return;
      settled = true;
      opts.cancel.current = null;
      resolve({ exitCode, signal, durationMs: Date.now() - started });
    };
    child.stdout.setEncoding('utf8').on('data', (d: string) => opts.log.write(d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => opts.log.write(d));
    child.on('error', (e) => {
      opts.log.write(`spark-test: could not start bash: ${e.message}\n`);
      // a spawn failure may never emit 'close'; 127 is the shell's "command not found"
      finish(127, null);
    });
    child.on('close', (code, signal) => finish(code, signal));
  });
}

/** Sends `signal` to the process group of the running phase, if any. */
export function signalPhase(cancel: Cancellation, signal: NodeJS.Signals): void {
  if (cancel.current == null) return;
  try {
    process.kill(-cancel.current, signal);
  } catch {
    // the group already exited
  }
}
