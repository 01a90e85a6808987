import { spawnSync } from 'node:child_process';
import {
  chmodSync,
  lchownSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { HELPER_THROUGH_SUDO } from '../../../agent/config.ts';
import { REPO_ROOT } from './index.ts';
import type { TestUser } from './runner-user.ts';

/**
 * A test host set up as an operator sets up a Spark host for the lease sandbox (docs/agent.md
 * "Install", ADR 0155), shared by the agent fleet (./fleet.ts) and the system harness
 * (scripts/sim/harness/system.ts): the runner user's runner install, the root-owned work root, and the
 * helper's root-owned configuration.
 */

/** The privileged helper the agents run (as root here; through sudo on a host, docs/agent.md). */
export const SANDBOX_HELPER = join(REPO_ROOT, 'agent', 'host', 'spark-lease-sandbox.sh');

/**
 * Where test hosts with runner users live: like a host's /var/lib, outside /tmp and /var/tmp
 * (each lease's namespace has a fresh /tmp and /var/tmp of its own, so the agent's files there
 * would be merely invisible to a job instead of unreadable, as they are on a host; and a runner
 * install or a shared dir there would not be the one the job sees).
 */
export const SANDBOXED_ROOT = '/var/lib/spark-test-fleets';

/**
 * The mount points at or under `dir` in this process's mount namespace, deepest first, from
 * /proc/self/mountinfo (field 5, the mount point, with space, tab, newline and backslash written
 * as octal escapes: proc_pid_mountinfo(5)).
 */
export function mountsUnder(dir: string): string[] {
  const decode = (s: string) =>
    s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(Number.parseInt(o, 8)));
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((line) => line.split(' ')[4])
    .filter((m): m is string => m != null)
    .map(decode)
    .filter((m) => m === dir || m.startsWith(`${dir}/`))
    .sort((a, b) => b.length - a.length);
}

/**
 * Removes a test host's dir. A lease the test left prepared keeps its namespace bound in its
 * sandbox dir (the helper's `prepare-run`, ADR 0200) until the agent removes the lease; a test
 * that ended the agent first leaves those bind mounts, which are unmounted here, as an operator
 * would (docs/agent.md).
 */
export function removeTestHostDir(dir: string): void {
  for (const m of mountsUnder(dir)) spawnSync('umount', ['-n', '--', m]);
  rmSync(dir, { recursive: true, force: true });
}

/**
 * A fresh dir under {@link SANDBOXED_ROOT}, mode 0711: a runner user passes through it (never
 * lists it) to its runner install and the dirs it may write.
 */
export function sandboxedTestDir(prefix: string): { dir: string; cleanup: () => void } {
  mkdirSync(SANDBOXED_ROOT, { recursive: true, mode: 0o711 });
  const dir = mkdtempSync(join(SANDBOXED_ROOT, prefix));
  chmodSync(dir, 0o711);
  return { dir, cleanup: () => removeTestHostDir(dir) };
}

export interface HostSandbox {
  /** The work root (`workRoot: "work"` in the host's agent.json): root's, mode 0711. */
  workRoot: string;
  /** The runner install, the runner user's; each lease sees it copy-on-write. */
  runnerDir: string;
  /** The helper's configuration: root's, mode 0644. */
  conf: string;
  /** What the host's agent.json `runner` section gets: the runner user, its install, the helper. */
  runner: { user: string; dir: string; helper: string[] };
}

/** `path` and everything under it (symlinks themselves, not their targets) given to `user`. */
function chownTree(path: string, user: TestUser): void {
  lchownSync(path, user.uid, user.gid);
  for (const e of readdirSync(path, { withFileTypes: true })) {
    if (e.isDirectory()) chownTree(join(path, e.name), user);
    else lchownSync(join(path, e.name), user.uid, user.gid);
  }
}

/**
 * What the operator does on a host (docs/agent.md "Install"), in `hostDir` (the dir of the host's
 * agent.json): the work root is root's, mode 0711; the runner install (`install` writes it into
 * the given dir) is the runner user's, as GitHub's runner is usually set up — each lease sees it
 * copy-on-write, so a job's changes stay in its lease; the helper's configuration is root's,
 * naming the runner user, the work root, the runner dir, and what a job may write besides its own
 * dirs (`writable`: the doubles' shared dirs; each must exist, and the runner user must be able
 * to write it).
 */
export function setUpHostSandbox(
  hostDir: string,
  user: TestUser,
  opts: { writable: string[]; install: (runnerDir: string) => void },
): HostSandbox {
  mkdirSync(hostDir, { recursive: true, mode: 0o711 });
  // the runner user passes through (never lists) the host dir to its install and writable dirs
  chmodSync(hostDir, 0o711);
  const workRoot = join(hostDir, 'work');
  mkdirSync(workRoot);
  chmodSync(workRoot, 0o711);
  const runnerDir = join(hostDir, 'runner');
  mkdirSync(runnerDir, { mode: 0o755 });
  opts.install(runnerDir);
  chownTree(runnerDir, user);
  const conf = join(hostDir, 'sandbox.conf');
  writeFileSync(
    conf,
    [
      `runner_user=${user.name}`,
      `work_root=${workRoot}`,
      `runner_dir=${runnerDir}`,
      ...(opts.writable.length ? [`writable=${opts.writable.join(':')}`] : []),
      '',
    ].join('\n'),
    { mode: 0o644 },
  );
  return {
    workRoot,
    runnerDir,
    conf,
    runner: { user: user.name, dir: runnerDir, helper: [SANDBOX_HELPER, conf] },
  };
}

let dropIns = 0;

/** The sudoers drop-in docs/agent.md shows, for `agentUser` and the helper's configuration `conf`. */
export function helperSudoersRule(agentUser: string, conf: string): string {
  return [
    `Defaults!${SANDBOX_HELPER} closefrom_override, !use_pty`,
    `${agentUser} ALL=(root) NOPASSWD: ${SANDBOX_HELPER} ${conf} *`,
    '',
  ].join('\n');
}

/**
 * The helper as a host runs it: through the real sudo with the agent's default prefix
 * (`HELPER_THROUGH_SUDO`, agent/config.ts) under the sudoers drop-in docs/agent.md shows
 * (`closefrom_override` for `-C 5`, `!use_pty`, the helper and its configuration pinned), written
 * here for root, the user the test agents run as. The drop-in is checked with `visudo -c` and
 * removed by `remove()` (and at this process's exit). Without it the helper runs directly and a
 * lease's start skips sudo's own start, which a host pays on every helper call.
 */
export function helperThroughSudo(conf: string): { helper: string[]; remove: () => void } {
  // sudo skips drop-ins whose names hold a dot or end in `~` (sudoers(5), "Including other files")
  const file = `/etc/sudoers.d/spark-fleet-${process.pid}-${++dropIns}`;
  writeFileSync(file, helperSudoersRule('root', conf), { mode: 0o440 });
  const drop = () => rmSync(file, { force: true });
  const remove = () => {
    process.off('exit', drop);
    drop();
  };
  const check = spawnSync('visudo', ['-c', '-f', file], { encoding: 'utf8' });
  if (check.status !== 0) {
    drop();
    throw new Error(`visudo refused the helper's sudoers drop-in: ${check.stdout}${check.stderr}`);
  }
  process.once('exit', drop);
  return { helper: [...HELPER_THROUGH_SUDO, SANDBOX_HELPER, conf], remove };
}
