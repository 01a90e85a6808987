import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { GpuProcess } from '../../../core/model.ts';
import { processStartMs } from '../harness/processes.ts';

/** One port allocator for every server started before its port is known to it (docs/adr/0285-test-ports-outside-the-ephemeral-range.md). */
export { freePort } from './ports.ts';

/**
 * Reusable test doubles for the relay agent: a fake `nvidia-smi` on PATH reading a state
 * directory, a fake actions runner, and a fake Deckard with its service-control commands. Other
 * parts' tests and the demo use them too.
 */

export const DOUBLES_DIR = dirname(fileURLToPath(import.meta.url));
export const REPO_ROOT = resolve(DOUBLES_DIR, '..', '..', '..');
/** Put this first on PATH: it holds only the fake `nvidia-smi`. */
export const FAKE_BIN_DIR = join(DOUBLES_DIR, 'bin');
export const FAKE_RUNNER = join(DOUBLES_DIR, 'fake-runner.mjs');
export const FAKE_DECKARD = join(DOUBLES_DIR, 'fake-deckard.mjs');
export const DECKARD_CTL = join(DOUBLES_DIR, 'deckard-ctl.mjs');

/** The real driver's message when it cannot talk to the GPU (nvidia-smi exits 9). */
export const DRIVER_ERROR =
  "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.";

/** The GPU of one fake host, as the fake `nvidia-smi` reports it. */
export class FakeGpu {
  constructor(readonly dir: string) {
    mkdirSync(dir, { recursive: true });
  }

  /** Replaces the static (test-owned) processes; service processes (`live-*`) are left alone. */
  setProcesses(ps: GpuProcess[]): void {
    for (const f of readdirSync(this.dir)) if (f.startsWith('proc-')) rmSync(join(this.dir, f));
    ps.forEach((p, i) => {
      writeFileSync(join(this.dir, `proc-${i}`), `${p.pid}, ${p.name}, ${p.usedMemoryMiB}\n`);
    });
  }

  /** Makes nvidia-smi fail like a driver error (exit 9) until {@link heal}. */
  fail(message = DRIVER_ERROR, code = 9): void {
    writeFileSync(join(this.dir, 'fail'), `${message}\n`);
    writeFileSync(join(this.dir, 'fail-code'), String(code));
  }

  heal(): void {
    rmSync(join(this.dir, 'fail'), { force: true });
    rmSync(join(this.dir, 'fail-code'), { force: true });
  }

  /** Environment that makes a child's `nvidia-smi` this fake GPU. */
  env(): Record<string, string> {
    return { PATH: `${FAKE_BIN_DIR}:${process.env.PATH ?? ''}`, FAKE_NVIDIA_SMI_STATE: this.dir };
  }
}

/** Fake Deckard: an HTTP server with a model-ready check, controlled like a system service. */
export class FakeDeckard {
  constructor(
    readonly dir: string,
    readonly gpu: FakeGpu,
    readonly port: number,
    readyDelayMs = 0,
  ) {
    mkdirSync(dir, { recursive: true });
    this.configure({ readyDelayMs });
  }

  configure(opts: { readyDelayMs: number }): void {
    writeFileSync(
      join(this.dir, 'deckard.json'),
      JSON.stringify({ port: this.port, gpuDir: this.gpu.dir, readyDelayMs: opts.readyDelayMs }),
    );
  }

  get healthUrl(): string {
    return `http://127.0.0.1:${this.port}/v1/health/ready`;
  }

  /** drain/stop/start argv for the agent config. */
  commands(): { drain: string[]; stop: string[]; start: string[] } {
    const c = (verb: string) => [process.execPath, DECKARD_CTL, verb, this.dir];
    return { drain: c('drain'), stop: c('stop'), start: c('start') };
  }

  /**
   * The agent config's `homeService` entry for this Deckard: its commands and health URL, with
   * the short timeouts a simulated host answers within.
   */
  service(name: string): {
    name: string;
    drain: string[];
    stop: string[];
    start: string[];
    healthUrl: string;
    commandTimeoutS: number;
    releaseVerifyTimeoutS: number;
    healthPollMs: number;
  } {
    return {
      name,
      ...this.commands(),
      healthUrl: this.healthUrl,
      commandTimeoutS: 20,
      releaseVerifyTimeoutS: 2,
      healthPollMs: 100,
    };
  }

  /** Starts Deckard the way the agent's restore does (the `start` command). */
  start(): Promise<void> {
    const [cmd, ...args] = this.commands().start;
    return new Promise((res, rej) =>
      execFile(cmd!, args, (err, _out, stderr) =>
        err ? rej(new Error(`deckard start failed: ${stderr}`)) : res(),
      ),
    );
  }

  pid(): number | null {
    const f = join(this.dir, 'pid');
    return existsSync(f) ? Number(readFileSync(f, 'utf8')) : null;
  }

  /** Running (possibly paused) and not a zombie. */
  isRunning(): boolean {
    const pid = this.pid();
    if (pid == null) return false;
    try {
      const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
      return s.slice(s.lastIndexOf(')') + 2)[0] !== 'Z';
    } catch {
      return false;
    }
  }

  breakReady(message = 'model load failed: CUDA error: out of memory'): void {
    writeFileSync(join(this.dir, 'break-ready'), message);
  }
  fixReady(): void {
    rmSync(join(this.dir, 'break-ready'), { force: true });
  }
  /** "pause" makes `stop` only SIGSTOP the server: it stays on the GPU like a paused container. */
  setStopMode(mode: 'kill' | 'pause'): void {
    writeFileSync(join(this.dir, 'stop-mode'), mode);
  }
  setDelay(step: 'drain' | 'stop', ms: number): void {
    writeFileSync(join(this.dir, `${step}-delay-ms`), String(ms));
  }
  /** Service-control calls so far, in order ("drain", "stop", "start"). */
  ctlLog(): string[] {
    const f = join(this.dir, 'ctl.log');
    if (!existsSync(f)) return [];
    return readFileSync(f, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => l.split(' ')[1]!);
  }

  /** Kills the server outright (test cleanup). */
  kill(): void {
    const pid = this.pid();
    if (pid == null) return;
    // the server writes its pid file once it listens: a process with that pid that started
    // later is another process that got the number after ours exited (pid reuse), not ours
    const started = processStartMs(pid);
    if (started === null || started > statSync(join(this.dir, 'pid')).mtimeMs) return;
    try {
      process.kill(pid, 'SIGCONT');
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
}

/** How the fake runner behaves, carried inside its JIT config. */
export interface FakeRunnerBehavior {
  exitCode?: number;
  sleepMs?: number;
  /** Delay before honouring SIGTERM (a job slow to cancel). */
  ignoreTermMs?: number;
  lastLines?: string[];
  /** Act as hostile job code: try to read these paths and to reach the agent (results in the marker). */
  probe?: { read: string[] };
  /** Leave a process behind (setsid) that keeps trying to write into other work dirs. */
  leaveDaemon?: boolean;
  /** Show up in the fake nvidia-smi while running, as a CUDA job does. */
  onGpu?: boolean;
  /**
   * Job code to run with `/bin/sh -c` in the work dir (the PR's own steps, hostile or not); its exit
   * status and output go into the marker as `shell`. A process it leaves running must not hold
   * its stdout (`… >/dev/null 2>&1 &`).
   */
  shell?: string;
  /** The job result the runner prints (default: Succeeded when `exitCode` is 0, else Failed). */
  jobResult?: 'Succeeded' | 'SucceededWithIssues' | 'Failed' | 'Canceled' | 'Skipped' | 'Abandoned';
  /** Leave a checkout of `repo` at `sha` in `<runner root>/_work/<repo>/<repo>`, as actions/checkout does. */
  checkout?: { repo: string; sha: string };
}

/** A JIT config shaped like GitHub's (base64 JSON) that also tells the fake runner what to do. */
export function fakeJitConfig(runnerName: string, markerDir: string, fake: FakeRunnerBehavior): string {
  const body = {
    '.runner': Buffer.from(JSON.stringify({ agentName: runnerName, workFolder: '_work' })).toString('base64'),
    '.credentials': Buffer.from('{"scheme":"OAuth"}').toString('base64'),
    runnerName,
    fake: { ...fake, markerDir },
  };
  return Buffer.from(JSON.stringify(body)).toString('base64');
}

/** What a fake runner recorded when it started. */
export interface RunnerMarker {
  runnerName: string;
  pid: number;
  startedAt: number;
  hostId: string;
  reservationId: string;
  fencingToken: number;
  jobTokenPrefix: string;
  jitSha256: string;
  workDir: string;
  cwd: string;
  uid: number;
  /** Names of the variables in the runner's environment. */
  env: string[];
  gpuAtStart: string[];
  probe: {
    agentPid: number | null;
    read: Record<string, string>;
    agentEnviron: string;
    agentCmdline: string;
    signalAgent: string;
  } | null;
  daemonPid: number | null;
  /** What the `shell` behaviour printed and its exit status. */
  shell: { code: number | null; output: string } | null;
}

export function readRunnerMarkers(markerDir: string): RunnerMarker[] {
  if (!existsSync(markerDir)) return [];
  return readdirSync(markerDir)
    .filter((f) => f.endsWith('.json'))
    .map((f) => JSON.parse(readFileSync(join(markerDir, f), 'utf8')) as RunnerMarker)
    .sort((a, b) => a.startedAt - b.startedAt);
}

/** Whether `pid` is a live process (zombies, which PID 1 here may never reap, count as gone). */
export function isLive(pid: number): boolean {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return s.slice(s.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

/** Polls `check` until it returns a truthy value or the deadline passes (no fixed sleeps). */
export async function waitFor<T>(
  what: string,
  check: () => T | undefined | null | false | Promise<T | undefined | null | false>,
  timeoutMs = 20_000,
  everyMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown = null;
  for (;;) {
    try {
      const v = await check();
      if (v) return v;
    } catch (e) {
      lastError = e;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}${lastError ? ` (last error: ${lastError})` : ''}`,
      );
    }
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/**
 * The agent config of a simulated Spark (test fleet and demo): paths relative to the host's dir,
 * the given runner command, the fake GPU state passed through to runners, short timeouts.
 */
export function simulatedAgentConfig(opts: {
  controllerUrl: string;
  hostId: string;
  runnerCommand: string[];
  service: unknown;
  logLevel: 'debug' | 'info';
  /** The runner user; omitted: the runner runs as the agent (the demo, a non-root run). */
  runnerUser?: string | null;
}) {
  return {
    controllerUrl: opts.controllerUrl,
    hostId: opts.hostId,
    tokenFile: 'agent.token',
    stateFile: 'state/agent-state.json',
    workRoot: 'work',
    modelCacheDir: 'models',
    runner: {
      dir: REPO_ROOT,
      command: opts.runnerCommand,
      stopGraceS: 2,
      user: opts.runnerUser ?? null,
      // the fake nvidia-smi is found through the agent's PATH and reads FAKE_NVIDIA_SMI_STATE
      passEnv: ['PATH', 'FAKE_NVIDIA_SMI_STATE'],
    },
    service: opts.service,
    timeouts: { requestS: 5, gpuQueryS: 5, backoffMaxS: 1, longPollS: 5 },
    logLevel: opts.logLevel,
  };
}
