import { type ChildProcess, spawn } from 'node:child_process';
import { createWriteStream, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '../../../functions/node-server.ts';

/**
 * Real controller processes for load tests and benches: each is `node --import tsx
 * functions/node.ts` (what `npm start` runs), or under vitest the same code bundled once per run
 * ({@link controllerEntry}), configured only through SPARK_* variables and a config file, listening
 * on its own ephemeral loopback port, all sharing one ledger.
 */

/**
 * The node arguments that start the controller: the bundle the vitest global setup built for this
 * test run (`SPARK_TEST_CONTROLLER_BUNDLE`, test/setup/controller-bundle.ts), else the source through
 * tsx as `npm start` runs it (the demo, the benches). docs/adr/0255-controller-bundle-for-tests.md
 */
export function controllerEntry(): string[] {
  const bundle = process.env.SPARK_TEST_CONTROLLER_BUNDLE;
  return bundle ? [bundle] : ['--import', 'tsx', join(repoRoot, 'functions', 'node.ts')];
}

export interface ControllerProcess {
  index: number;
  pid: number;
  url: string;
  proc: ChildProcess;
  /** Everything the process wrote to stderr (its JSON log lines). */
  stderr(): string;
  /** Parsed log lines at `level` or above (warn, error). */
  logLines(levels?: string[]): Array<Record<string, unknown>>;
  /** How the process ended, or null while it runs (a controller that dies under load is a finding). */
  exit(): { code: number | null; signal: NodeJS.Signals | null } | null;
  /** Where its stderr is kept whole (the in-memory copy is for assertions). */
  logFile: string;
}

export interface ControllerGroup {
  procs: ControllerProcess[];
  urls: string[];
  /** SIGTERM each process this group started (by pid) and wait for it to exit. */
  stop(): Promise<void>;
  /** Processes that exited while the group was meant to run, each with its exit and the end of its stderr. */
  deaths(): string[];
}

export interface StartProcessesOptions {
  count: number;
  /** The controller config (written to `dir/spark.config.json`); `listen` is forced to 127.0.0.1:0. */
  config: Record<string, unknown>;
  dir: string;
  ledgerUrl: string;
  env?: Record<string, string>;
  /** Extra node flags (e.g. `--cpu-prof`) before the entry. */
  nodeArgs?: string[];
  /** How long one process may take to print its listening line (tsx, when it runs, compiles on start). */
  startTimeoutMs?: number;
}

const LISTENING = /Spark controller listening on (http:\/\/127\.0\.0\.1:\d+)/;

function startOne(index: number, configPath: string, o: StartProcessesOptions): Promise<ControllerProcess> {
  const proc = spawn(process.execPath, [...(o.nodeArgs ?? []), ...controllerEntry()], {
    cwd: repoRoot,
    // only what the controller needs: no inherited SPARK_* from the test runner's environment
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '',
      NODE_ENV: 'production',
      SPARK_CONFIG: configPath,
      SPARK_LEDGER_URL: o.ledgerUrl,
      SPARK_HOST: '127.0.0.1',
      SPARK_PORT: '0',
      SPARK_LOG_LEVEL: 'warn',
      ...(o.env ?? {}),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  let exit: { code: number | null; signal: NodeJS.Signals | null } | null = null;
  const logFile = join(o.dir, `controller-${index}.log`);
  const file = createWriteStream(logFile, { flags: 'a' });
  proc.once('exit', (code, signal) => {
    exit = { code, signal };
    file.end();
  });
  proc.stderr!.setEncoding('utf8');
  proc.stderr!.on('data', (d: string) => {
    err += d;
    file.write(d);
  });
  const handle = (url: string): ControllerProcess => ({
    index,
    pid: proc.pid!,
    url,
    proc,
    logFile,
    exit: () => exit,
    stderr: () => err,
    logLines(levels = ['warn', 'error']) {
      return err
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => {
          try {
            return JSON.parse(l) as Record<string, unknown>;
          } catch {
            return { level: 'error', msg: `unparseable log line: ${l.slice(0, 200)}` };
          }
        })
        .filter((l) => levels.includes(String(l.level)));
    },
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`controller ${index} did not start within ${o.startTimeoutMs ?? 60_000} ms: ${err}`));
    }, o.startTimeoutMs ?? 60_000);
    proc.stdout!.setEncoding('utf8');
    proc.stdout!.on('data', (d: string) => {
      out += d;
      const m = LISTENING.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(handle(m[1]!));
      }
    });
    proc.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(
        new Error(`controller ${index} exited (${code ?? signal}) before listening: ${err.slice(-2000)}`),
      );
    });
  });
}

async function stopProcess(p: ChildProcess): Promise<void> {
  if (p.exitCode !== null || p.signalCode !== null) return;
  const exited = new Promise<void>((r) => p.once('exit', () => r()));
  p.kill('SIGTERM');
  const timer = setTimeout(() => p.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}

/** Starts `count` controller processes on one ledger; rejects (and stops the others) if one fails. */
export async function startControllerProcesses(o: StartProcessesOptions): Promise<ControllerGroup> {
  const configPath = join(o.dir, 'spark.config.json');
  writeFileSync(configPath, JSON.stringify({ ...o.config, listen: { host: '127.0.0.1', port: 0 } }));
  const started = await Promise.allSettled(
    Array.from({ length: o.count }, (_, i) => startOne(i, configPath, o)),
  );
  const procs = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  let stopping = false;
  const stop = async () => {
    stopping = true;
    await Promise.all(procs.map((p) => stopProcess(p.proc)));
  };
  const deaths = () =>
    stopping
      ? []
      : procs.flatMap((p) => {
          const e = p.exit();
          if (!e) return [];
          return [
            `controller ${p.index} (pid ${p.pid}, ${p.url}) exited (${e.code ?? e.signal}); stderr (whole: ${p.logFile}) ends: ${p.stderr().slice(-1500)}`,
          ];
        });
  if (failed) {
    await stop();
    throw failed.reason;
  }
  return { procs, urls: procs.map((p) => p.url), stop, deaths };
}
