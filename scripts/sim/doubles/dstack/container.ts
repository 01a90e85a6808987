import { type ChildProcess, spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * How the stand-in runs a job: as dstack's runner runs it inside the job's container on an SSH
 * fleet instance, as far as that can be played without a Docker engine (there is none here).
 * Source: dstackai/dstack 0.21.2, `runner/internal/runner/executor/executor.go` (`execJob`,
 * `startCommand`), `src/dstack/_internal/server/services/jobs/configurators/base.py`.
 *
 * Played:
 * - **the container's own process and mount space**: the job runs in fresh PID and mount
 *   namespaces (`unshare --pid --mount --fork --mount-proc`, root only): it sees only its own
 *   processes in `/proc`, and stopping the container ends every one of them at once.
 * - **the host's files are not the container's**: every path in `hostOnly` (the agent's work
 *   root, state, model cache…) is covered by an empty tmpfs inside the job, unless the run
 *   mounts it as an instance volume (`volumes: [{instance_path, path}]`, core/models/volumes.py),
 *   which is bind-mounted at `path` as the shim does.
 * - **the runner's command line**: `[shell, "-i", "-c", "<commands joined with ' && '>"]`
 *   (`_commands`, `_join_shell_commands`), shell `/bin/bash` without `image` (the default image)
 *   and `/bin/sh` with one (`_shell`).
 * - **a pty**: the runner starts the command on a pseudo-terminal (`startCommand`, creack/pty),
 *   so stdout and stderr are one stream, lines end `\r\n`, and the shell is interactive.
 * - **the working dir**: created if missing (`utils.MkdirAll`), and the job starts in it.
 * - **the environment**: the image's (here: a fixed Debian `PATH`), then `DSTACK_*` (`jobEnvs`),
 *   then the run's `env`, which overrides both (`EnvMap.Update`), then `HOME` of the job user.
 *
 * Not played: the image itself (its filesystem is this machine's, less `hostOnly`; a named image
 * decides only the architecture check in the server), the container's network (the host's, as
 * dstack's host network mode on a whole-instance job), users (root here), GPUs, the 50 MB/hour log
 * quota, ANSI stripping beyond CSI sequences.
 */

/** The `PATH` of the Debian/Ubuntu images dstack runs (Docker's default for `debian`/`ubuntu`). */
export const IMAGE_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export interface JobLaunch {
  /** The runner's argv, `[shell, "-i", "-c", joined]`. */
  argv: string[];
  env: Record<string, string>;
  /** Absolute working dir inside the container. */
  workingDir: string;
  /** Instance volumes: host path → container path. */
  volumes: { instancePath: string; path: string }[];
  /** Host paths the container does not see. */
  hostOnly: readonly string[];
}

/** A running job: its output (pty, raw bytes), how it ends, and the two ways dstack stops it. */
export interface JobProcess {
  onOutput(f: (chunk: Buffer) => void): void;
  /** The job command's exit status (null when it ended by a signal or the container was removed). */
  exited: Promise<number | null>;
  /** The runner's graceful stop: SIGINT to the job's command only (`cmd.Cancel`). */
  interrupt(): void;
  /** The container removed (`terminate_task`, timeout 0): every process of the job ends now. */
  remove(): void;
}

const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** The script that sets up the job's mount namespace, then execs the pty (`script`) and the shell. */
function setupScript(l: JobLaunch): string {
  const lines = ['set -e', 'mount -t tmpfs dstack-stage /mnt'];
  // volumes are bound to a stage first: a volume's host path may itself be under a hidden path
  l.volumes.forEach((v, i) => {
    lines.push(`mkdir -p /mnt/v${i}`, `mount --bind ${q(v.instancePath)} /mnt/v${i}`);
  });
  for (const h of l.hostOnly) lines.push(`if [ -d ${q(h)} ]; then mount -t tmpfs dstack-hidden ${q(h)}; fi`);
  l.volumes.forEach((v, i) => {
    lines.push(`mkdir -p ${q(v.path)}`, `mount --bind /mnt/v${i} ${q(v.path)}`);
  });
  lines.push('umount -l /mnt', `mkdir -p ${q(l.workingDir)}`, `cd ${q(l.workingDir)}`);
  // `script` runs its -c command with $SHELL; the job's environment reaches only the job's shell:
  // read from the launch file (then removed) and handed over by the exec, as the runner hands it
  // to the command alone (`cmd.Env`) — no other process of the container holds it
  lines.push(
    `SHELL=/bin/sh exec script -q -e -c '. "$__DSTACK_LAUNCH" && rm -f "$__DSTACK_LAUNCH" && unset __DSTACK_LAUNCH && exec "$__a0" -i -c "$__a2"' /dev/null`,
  );
  return lines.join('\n');
}

/** The children of `pid` (host view). */
const childrenOf = (pid: number): number[] => {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8')
      .trim()
      .split(/\s+/)
      .filter(Boolean)
      .map(Number);
  } catch {
    return [];
  }
};

/** Starts a job; rejects nothing: a setup failure is the runner failing (exit status non-zero). */
export function launchJob(l: JobLaunch): JobProcess {
  if (l.argv.length !== 4 || l.argv[1] !== '-i' || l.argv[2] !== '-c')
    throw new TypeError(
      `the stand-in plays only the runner's [shell, -i, -c, cmd] form, got ${l.argv.join(' ')}`,
    );
  // the shim creates a missing instance volume dir, world-writable (runner/internal/shim/volumes.go
  // `prepareInstanceMountPoints`); an existing one is left as the host admin set it
  for (const v of l.volumes) {
    if (!existsSync(v.instancePath)) {
      mkdirSync(v.instancePath, { recursive: true, mode: 0o755 });
      chmodSync(v.instancePath, 0o777);
    }
  }
  // the launch file: the job's environment as `export` lines, the argv in plain shell variables
  const launchDir = mkdtempSync(join(tmpdir(), 'dstack-launch-'));
  const launch = join(launchDir, 'env.sh');
  const lines = ['unset SHELL PATH'];
  for (const [k, v] of Object.entries(l.env)) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k))
      throw new TypeError(`the stand-in hands over only shell-name variables, not ${JSON.stringify(k)}`);
    lines.push(`export ${k}=${q(v)}`);
  }
  lines.push(`__a0=${q(l.argv[0]!)}`, `__a2=${q(l.argv[3]!)}`);
  writeFileSync(launch, `${lines.join('\n')}\n`, { mode: 0o600 });
  const env = { PATH: IMAGE_PATH, __DSTACK_LAUNCH: launch };
  const proc: ChildProcess = spawn(
    'unshare',
    [
      '--pid',
      '--mount',
      '--fork',
      '--mount-proc',
      '--propagation',
      'private',
      '/bin/sh',
      '-c',
      setupScript(l),
    ],
    { env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const listeners: ((b: Buffer) => void)[] = [];
  const emit = (b: Buffer) => {
    for (const f of listeners) f(b);
  };
  proc.stdout?.on('data', emit);
  // the setup's own errors (a bad volume path) are the runner's log, as a failed container start
  proc.stderr?.on('data', emit);
  const exited = new Promise<number | null>((resolve) => {
    proc.once('error', () => {
      rmSync(launchDir, { recursive: true, force: true });
      resolve(null);
    });
    // 'close': every byte of output was read before the job counts as exited (the runner ships
    // the last logs before it reports the job's state)
    proc.once('close', (code) => {
      rmSync(launchDir, { recursive: true, force: true });
      resolve(code);
    });
  });
  /** The container's PID 1 (the `script` process), host view: `unshare --fork`'s only child. */
  const init = () => (proc.pid ? childrenOf(proc.pid)[0] : undefined);
  return {
    onOutput: (f) => listeners.push(f),
    exited,
    interrupt() {
      const i = init();
      const shell = i ? childrenOf(i)[0] : undefined;
      if (!shell) return;
      try {
        process.kill(shell, 'SIGINT');
      } catch {
        // ended meanwhile
      }
    },
    remove() {
      // killing a PID namespace's init makes the kernel kill every process in it
      const i = init();
      for (const pid of [i, proc.pid]) {
        if (!pid) continue;
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
    },
  };
}

/** Whether this machine can play containers (root, util-linux `unshare` and `script`). */
export const canLaunchJobs = (): boolean =>
  process.getuid?.() === 0 && ['/usr/bin/unshare', '/usr/bin/script'].every((p) => existsSync(p));
