import { type ChildProcess, fork } from 'node:child_process';
import { join } from 'node:path';
import { type CheckRun, FakeGitHubViolations, type PullState } from '../fake-github/server.ts';

/**
 * The fake GitHub (scripts/sim/fake-github/server.ts, every request and response checked against
 * GitHub's OpenAPI description) in a separate process on a loopback port, for load tests and
 * benches where the test process is busy sending. State is read back over IPC. Like the fake in
 * one process, `close()` throws the violations of GitHub's description it recorded.
 */

export interface RepoSpec {
  fullName: string;
  installationId: number;
  defaultBranch?: string;
  collaborators?: Record<string, 'admin' | 'maintain' | 'write' | 'triage' | 'read'>;
  pulls?: Record<number, PullState>;
}

export type FakeGitHubCommand =
  | { type: 'start'; repos: RepoSpec[] }
  | { type: 'snapshot' }
  | { type: 'close' };

export interface FakeGitHubSnapshot {
  checkRuns: CheckRun[];
  violations: string[];
  requests: number;
  dispatches: number;
  runners: number;
}

export type FakeGitHubReply =
  | { type: 'started'; url: string; appId: number; privateKey: string }
  | ({ type: 'snapshot' } & FakeGitHubSnapshot)
  | { type: 'closed'; violations: string[] }
  | { type: 'error'; message: string };

export interface FakeGitHubProcess {
  url: string;
  appId: number;
  privateKey: string;
  pid: number;
  snapshot(): Promise<FakeGitHubSnapshot>;
  /** Stops the process; throws {@link FakeGitHubViolations} if the fake recorded any. */
  close(): Promise<void>;
}

function ask(
  child: ChildProcess,
  cmd: FakeGitHubCommand,
  want: FakeGitHubReply['type'],
): Promise<FakeGitHubReply> {
  return new Promise((resolve, reject) => {
    const onMessage = (m: FakeGitHubReply) => {
      if (m.type === 'error') {
        cleanup();
        reject(new Error(`fake GitHub process: ${m.message}`));
      } else if (m.type === want) {
        cleanup();
        resolve(m);
      }
    };
    const onExit = (code: number | null) => {
      cleanup();
      reject(new Error(`fake GitHub process exited (${code}) while answering ${cmd.type}`));
    };
    const cleanup = () => {
      child.off('message', onMessage);
      child.off('exit', onExit);
    };
    child.on('message', onMessage);
    child.once('exit', onExit);
    child.send(cmd);
  });
}

/** Starts the fake GitHub in a child process with `repos` configured. */
export async function startFakeGitHubProcess(repos: RepoSpec[]): Promise<FakeGitHubProcess> {
  const child = fork(join(import.meta.dirname, 'fake-github-child.ts'), [], {
    execArgv: ['--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  let started: Extract<FakeGitHubReply, { type: 'started' }>;
  try {
    started = (await ask(child, { type: 'start', repos }, 'started')) as typeof started;
  } catch (e) {
    child.kill('SIGKILL');
    throw e;
  }
  return {
    url: started.url,
    appId: started.appId,
    privateKey: started.privateKey,
    pid: child.pid!,
    async snapshot() {
      const { type: _type, ...s } = (await ask(child, { type: 'snapshot' }, 'snapshot')) as Extract<
        FakeGitHubReply,
        { type: 'snapshot' }
      >;
      return s;
    },
    async close() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      if (!child.connected) {
        child.kill('SIGKILL');
        return;
      }
      const exited = new Promise<void>((r) => child.once('exit', () => r()));
      let violations: string[] = [];
      try {
        violations = ((await ask(child, { type: 'close' }, 'closed')) as { violations: string[] }).violations;
      } catch {
        // already gone
      }
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
      if (violations.length) throw new FakeGitHubViolations(violations);
    },
  };
}
