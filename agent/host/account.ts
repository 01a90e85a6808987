import { execFileSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { AgentConfigError } from '../config.ts';
import type { RunnerAccount } from '../runner.ts';

const CREATE_HINT = (name: string) =>
  `create it: useradd --system --create-home --home-dir /var/lib/${name} --shell /usr/sbin/nologin ${name}`;

/**
 * Looks up the runner user (`getent passwd`, so NSS users count) and checks it can be a boundary:
 * not root, not the agent's own user. A failure is a config error naming the fix.
 */
export function resolveRunnerAccount(
  name: string,
  agentUid = process.getuid?.() ?? -1,
): Omit<RunnerAccount, 'helper'> {
  let line: string;
  try {
    line = execFileSync('getent', ['passwd', name], { encoding: 'utf8' }).trim();
  } catch {
    throw new AgentConfigError(`runner user "${name}" does not exist; ${CREATE_HINT(name)}`);
  }
  const f = line.split(':');
  const uid = Number(f[2]);
  const gid = Number(f[3]);
  if (!Number.isInteger(uid) || !Number.isInteger(gid)) {
    throw new AgentConfigError(`runner user "${name}" has an unreadable passwd entry`);
  }
  if (uid === 0) throw new AgentConfigError(`runner.user "${name}" is root; the job must run unprivileged`);
  if (uid === agentUid) {
    throw new AgentConfigError(
      `runner.user "${name}" is the agent's own user; the job must not be able to read the agent's token (${CREATE_HINT('spark-runner')})`,
    );
  }
  return { name, uid, gid, home: f[5] || '/' };
}

/**
 * Refuses to start when a file or directory the agent keeps private is reachable by others:
 * not owned by the agent's user, or with any group/other permission bit.
 */
export function assertPrivate(path: string, what: string, dir = false): void {
  let st: ReturnType<typeof statSync>;
  try {
    st = statSync(path);
  } catch (e) {
    throw new AgentConfigError(`cannot check the ${what} ${path}: ${(e as Error).message}`);
  }
  const uid = process.getuid?.();
  if (uid != null && st.uid !== uid) {
    throw new AgentConfigError(
      `the ${what} ${path} is owned by uid ${st.uid}, not the agent's user (uid ${uid}); chown it to the agent's user`,
    );
  }
  if (st.mode & 0o077) {
    const mode = (st.mode & 0o777).toString(8).padStart(4, '0');
    throw new AgentConfigError(
      `the ${what} ${path} is accessible to other users (mode ${mode}); chmod ${dir ? '700' : '600'} ${path}`,
    );
  }
}

/**
 * The work root belongs to root, mode 0711 (ADR 0155): the helper makes each lease's dirs in it
 * (the work dir the runner user's, 0700; the sandbox dirs root's), so no job can plant or swap an
 * entry there, and no other user can list it.
 */
export function assertWorkRoot(path: string): void {
  const hint = `install -d -o root -g root -m 0711 ${path}`;
  let st: ReturnType<typeof statSync>;
  try {
    st = statSync(path);
  } catch {
    throw new AgentConfigError(`workRoot ${path} does not exist; ${hint}`);
  }
  if (!st.isDirectory() || st.uid !== 0 || (st.mode & 0o777) !== 0o711) {
    throw new AgentConfigError(
      `workRoot ${path} must be a directory owned by root with mode 0711 (lease dirs are made in it by the helper, and no job may add or swap one); ${hint}`,
    );
  }
}
