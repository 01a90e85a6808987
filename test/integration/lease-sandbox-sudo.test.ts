import { spawnSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  closeSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HELPER_THROUGH_SUDO } from '../../agent/config.ts';
import { encodeEnv } from '../../agent/host/sandbox.ts';
import { SANDBOX_HELPER } from '../../scripts/sim/doubles/fleet.ts';
import { helperSudoersRule, mountsUnder, removeTestHostDir } from '../../scripts/sim/doubles/host-sandbox.ts';
import { canCreateUsers, createTestUser, type TestUser } from '../../scripts/sim/doubles/runner-user.ts';

/**
 * The agent's one privilege on a host (ADR 0155, docs/agent.md "Install"): the sudoers rule that
 * lets the agent's user run the lease sandbox helper with its root-owned configuration — and
 * nothing else. Run through the real sudo (Debian's, installed by scripts/setup-test-deps.sh) from
 * a real unprivileged agent user, as on a host: the job environment on stdin, the pid and exit
 * status descriptors kept (`-C 5`, `closefrom_override`), the runner user's identity, and every
 * way around it refused.
 */

let runner: TestUser;
let agent: TestUser;
let base: string;
let conf: string;
let sudoers: string;

/** Runs argv as the agent user (what the agent process is on a host). */
function asAgent(argv: string[], input = '') {
  const r = spawnSync(
    'setpriv',
    [`--reuid=${agent.uid}`, `--regid=${agent.gid}`, '--init-groups', '--', ...argv],
    { input, encoding: 'utf8', env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' }, cwd: '/' },
  );
  return { code: r.status, out: r.stdout, err: r.stderr };
}

const helper = (...args: string[]) => [...HELPER_THROUGH_SUDO, SANDBOX_HELPER, conf, ...args];

beforeAll(async () => {
  if (!canCreateUsers())
    throw new Error('this test needs root (CI runs as root) to make users and a sudoers rule');
  runner = await createTestUser();
  agent = await createTestUser();
  mkdirSync('/var/lib/spark-test-fleets', { recursive: true, mode: 0o711 });
  base = mkdtempSync('/var/lib/spark-test-fleets/sudo-');
  chmodSync(base, 0o711);
  const work = join(base, 'work');
  mkdirSync(work);
  chmodSync(work, 0o711);
  const runnerDir = join(base, 'runner');
  mkdirSync(runnerDir);
  chownSync(runnerDir, runner.uid, runner.gid);
  conf = join(base, 'sandbox.conf');
  writeFileSync(conf, `runner_user=${runner.name}\nwork_root=${work}\nrunner_dir=${runnerDir}\n`, {
    mode: 0o644,
  });
  // a name without a dot: sudo's @includedir skips files whose names contain one
  sudoers = `/etc/sudoers.d/spark-test-${process.pid}`;
  writeFileSync(sudoers, helperSudoersRule(agent.name, conf), { mode: 0o440 });
  const check = spawnSync('visudo', ['-c', '-f', sudoers], { encoding: 'utf8' });
  expect(check.status, check.stdout + check.stderr).toBe(0);
}, 60_000);

afterAll(async () => {
  if (sudoers) rmSync(sudoers, { force: true });
  if (base) removeTestHostDir(base);
  await runner?.remove();
  await agent?.remove();
});

describe('the lease sandbox helper through sudo (ADR 0155)', () => {
  it("gives the agent user the helper's verbs as the runner user, with the environment on stdin only", () => {
    const check = asAgent(helper('check'));
    expect(check.err).toBe('');
    expect(check.out).toContain(`runner_user=${runner.name}\nuid=${runner.uid}\n`);
    // a value with a newline travels as base64, the others as they are: neither is ever evaluated
    const raw = ' a=b+c \\n $(id) `id` * "q" \'s\' ';
    const asRunner = asAgent(
      helper(
        'as-runner',
        '--',
        '/bin/sh',
        '-c',
        'printf "%s [%s] [%s] [%s]\\n" "$(id -u)" "$GREETING" "$RAW" "$EMPTY" && env | sort',
      ),
      encodeEnv({ GREETING: 'multi\nline value', RAW: raw, EMPTY: '', PATH: '/usr/bin:/bin' }),
    );
    expect(asRunner.code, asRunner.err).toBe(0);
    expect(asRunner.out).toContain(`${runner.uid} [multi\nline value] [${raw}] []`);
    // nothing of sudo's or the agent's environment reaches the runner user's command
    expect(asRunner.out).not.toMatch(/^SUDO_/m);
    // an input that ends before the environment's empty line runs nothing (an agent that died
    // while writing it must not start the job with part of its environment)
    const cut = asAgent(helper('as-runner', '--', '/bin/sh', '-c', 'echo ran'), 'GREETING+hi\n');
    expect(cut.code).toBe(125);
    expect(cut.out).not.toContain('ran');
    expect(cut.err).toContain('no environment: nothing started');
  });

  it('runs a job in its sandbox as the runner user, keeping the pid and exit descriptors, in sudo’s process group', () => {
    const prep = asAgent(helper('prepare', 'r-1-spark-2-t1', 'acme+butter'));
    expect(prep.code, prep.err).toBe(0);
    const pidFile = join(base, 'pid');
    const exitFile = join(base, 'exit');
    const fds = [openSync(pidFile, 'w'), openSync(exitFile, 'w')];
    try {
      const job =
        'cut -d" " -f5 /proc/$$/stat >&3; echo "uid=$(id -u) secret=[$SECRET] cache=[$(ls -d "$SPARK_CACHE")]"; touch /etc/x 2>&1; echo done >&4';
      const r = spawnSync(
        'setpriv',
        [
          `--reuid=${agent.uid}`,
          `--regid=${agent.gid}`,
          '--init-groups',
          '--',
          'setsid',
          ...helper('run', 'r-1-spark-2-t1', 'acme+butter', '--', '/bin/sh', '-c', job),
        ],
        {
          input: encodeEnv({
            SECRET: 'jit-config-value',
            SPARK_CACHE: join(base, 'work', '.build-cache', 'acme+butter'),
          }),
          encoding: 'utf8',
          env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' },
          stdio: ['pipe', 'pipe', 'pipe', fds[0]!, fds[1]!],
        },
      );
      expect(r.status, r.stderr).toBe(0);
      expect(r.stdout).toContain(`uid=${runner.uid} secret=[jit-config-value] cache=[`);
      expect(r.stdout).toContain('Read-only file system');
      // the job's process group is the one the agent started (setsid, then sudo): the one it signals
      expect(Number(readFileSync(pidFile, 'utf8'))).toBe(r.pid);
      expect(readFileSync(exitFile, 'utf8')).toBe('done\n');
    } finally {
      for (const fd of fds) closeSync(fd);
    }
    const removed = asAgent(helper('remove', 'r-1-spark-2-t1'));
    expect(removed.code, removed.err).toBe(0);
  });

  it('builds the namespace at prepare-run, enters it at the first run only, and drops it at remove (ADR 0200)', () => {
    const lease = 'r-2-spark-2-t1';
    const sandbox = join(base, 'work', `${lease}.sandbox`);
    const prep = asAgent(helper('prepare-run', lease, 'acme+butter'));
    expect(prep.code, prep.err).toBe(0);
    // the namespace is kept by bind mounts of its files in the lease's sandbox dir
    expect(mountsUnder(sandbox).sort()).toEqual([`${sandbox}/ns`, `${sandbox}/ns/ipc`, `${sandbox}/ns/mnt`]);
    const kept = statSync(join(sandbox, 'ns', 'mnt')).ino;
    // the repository's cache is held by the prepared lease: an operator's wipe waits for its removal
    const wipe = asAgent(helper('wipe-cache', 'acme+butter'));
    expect(wipe.code).not.toBe(0);
    expect(wipe.err).toContain(`lease ${lease} is prepared with this build cache`);
    const job =
      'echo "ns=$(readlink /proc/self/ns/mnt) uid=$(id -u) shm=[$(ls /dev/shm)] secret=[$SECRET]"; echo x >/dev/shm/left; touch /etc/x 2>&1; ls /var/lib/spark-test-fleets 2>&1 | head -1';
    const run = () =>
      asAgent(
        helper('run', lease, 'acme+butter', '--', '/bin/sh', '-c', job),
        encodeEnv({ SECRET: 'jit-config-value' }),
      );
    const first = run();
    expect(first.code, first.err).toBe(0);
    // the kept namespace, entered: the same sandbox as one built at the start
    expect(first.out).toContain(`ns=mnt:[${kept}] uid=${runner.uid} shm=[] secret=[jit-config-value]`);
    expect(first.out).toContain('Read-only file system');
    expect(first.out).toContain('Permission denied');
    // a later run of the lease (a replaced runner) gets a namespace of its own, as before
    const second = run();
    expect(second.code, second.err).toBe(0);
    expect(second.out).toMatch(new RegExp(`ns=mnt:\\[\\d+\\] uid=${runner.uid} shm=\\[\\] secret`));
    expect(second.out).not.toContain(`ns=mnt:[${kept}]`);
    const removed = asAgent(helper('remove', lease));
    expect(removed.code, removed.err).toBe(0);
    expect(mountsUnder(join(base, 'work'))).toEqual([]);
    expect(() => statSync(sandbox)).toThrow(/ENOENT/);
  });

  it('does not enter a namespace kept from another boot or for another cache: run builds its own', () => {
    const lease = 'r-3-spark-2-t1';
    const sandbox = join(base, 'work', `${lease}.sandbox`);
    const prep = asAgent(helper('prepare-run', lease, '-'));
    expect(prep.code, prep.err).toBe(0);
    const kept = statSync(join(sandbox, 'ns', 'mnt')).ino;
    const made = readFileSync(join(sandbox, 'ns', 'made'), 'utf8');
    expect(made).toBe(`${readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim()} -\n`);
    const run = (key: string) =>
      asAgent(helper('run', lease, key, '--', '/bin/sh', '-c', 'readlink /proc/self/ns/mnt'), encodeEnv({}));
    // a mark from an earlier boot (its bind mounts would be gone): the namespace is built anew
    writeFileSync(join(sandbox, 'ns', 'made'), 'an-earlier-boot -\n');
    const rebuilt = run('-');
    expect(rebuilt.code, rebuilt.err).toBe(0);
    expect(rebuilt.out.trim()).toMatch(/^mnt:\[\d+\]$/);
    expect(rebuilt.out).not.toContain(`[${kept}]`);
    // a run for another cache key than the one prepared never enters the kept namespace
    writeFileSync(join(sandbox, 'ns', 'made'), made);
    const other = run('acme+other');
    expect(other.err).toContain('is not the lease');
    const removed = asAgent(helper('remove', lease));
    expect(removed.code, removed.err).toBe(0);
    expect(mountsUnder(join(base, 'work'))).toEqual([]);
  });

  it('refuses everything else: another config, a root-only verb, setting its environment, a path, the runner user', () => {
    // another configuration file (one the agent could write) is not in the rule
    const other = asAgent(['sudo', '-n', SANDBOX_HELPER, join(base, 'mine.conf'), 'check']);
    expect(other.code).not.toBe(0);
    expect(other.err).toMatch(/password is required|not allowed/);
    // the namespace setup verb cannot be entered from outside `run`, nor its guard set through sudo
    const enter = asAgent(helper('enter', 'r-1-spark-2-t1', '-', '--', 'id'));
    expect(enter.err).toContain('enter is internal to run');
    const setenv = asAgent([
      'sudo',
      '-n',
      'SPARK_SANDBOX_ENTER=1',
      SANDBOX_HELPER,
      conf,
      'enter',
      'r-1-spark-2-t1',
      '-',
      '--',
      'id',
    ]);
    expect(setenv.code).not.toBe(0);
    expect(setenv.err).toMatch(/not allowed to set the following environment variables|password is required/);
    const outside = asAgent(helper('remove', '../../etc'));
    expect(outside.err).toContain("lease name '../../etc' is not a plain name");
    // the runner user (a job) has no rule at all
    const job = spawnSync(
      'setpriv',
      [`--reuid=${runner.uid}`, `--regid=${runner.gid}`, '--init-groups', '--', ...helper('check')],
      { encoding: 'utf8', env: { PATH: '/usr/bin:/bin' } },
    );
    expect(job.status).not.toBe(0);
    // nor one in a directory another user may write (that user could swap it)
    const agentDir = join(base, 'agent-dir');
    mkdirSync(agentDir);
    chownSync(agentDir, agent.uid, agent.gid);
    writeFileSync(join(agentDir, 'sandbox.conf'), readFileSync(conf), { mode: 0o644 });
    const swappable = spawnSync(SANDBOX_HELPER, [join(agentDir, 'sandbox.conf'), 'check'], {
      encoding: 'utf8',
    });
    expect(swappable.stderr).toContain('must be owned by root');
    // a configuration root does not own is not trusted
    chownSync(conf, agent.uid, agent.gid);
    try {
      const untrusted = asAgent(helper('check'));
      expect(untrusted.err).toContain('must be owned by root');
    } finally {
      chownSync(conf, 0, 0);
    }
  });
});
