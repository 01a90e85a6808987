import { chmodSync, existsSync, lstatSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { AgentConfig } from '../config.ts';
import { describeFailure } from '../exec.ts';
import { type LeasePaths, leaseName, leasePaths, runAsRunner, runHelper } from '../host/sandbox.ts';
import { processesOfUid, type RunnerAccount } from '../runner.ts';
import type { LeaseState } from '../state-file.ts';
import type { Termination } from './types.ts';
import { assertUnder } from './work-dir.ts';

/** Makes a tree its owner may remove: `u+rwX` on every directory and file, symlinks untouched. */
function makeWritable(path: string): void {
  let st: ReturnType<typeof lstatSync>;
  try {
    st = lstatSync(path);
  } catch {
    return;
  }
  if (st.isSymbolicLink()) return;
  try {
    chmodSync(path, (st.mode & 0o7777) | (st.isDirectory() ? 0o700 : 0o600));
  } catch {
    // not ours: the removal says why
  }
  if (st.isDirectory()) {
    let names: string[] = [];
    try {
      names = readdirSync(path);
    } catch {
      return;
    }
    for (const n of names) makeWritable(join(path, n));
  }
}

/**
 * The lease's work area, shared by the executors that run on this host (`jit-runner`, `slurm`):
 * its work dir and its sandbox dirs (a fresh home, /tmp and /var/tmp, the runner dir's writes),
 * made by the helper as root and the runner user and removed the same way (ADR 0010, ADR 0155);
 * only ever under the work root. `sharedCache`: whether the lease gets its repository's shared
 * build cache (only inside the sandbox's namespace, which hides the other repositories').
 * `sandboxRun`: whether the executor starts its workload with the helper's `run`; the lease's
 * namespace is then built when the area is made (`prepare-run`, ADR 0200), while the host waits
 * for its runner config, and the start only enters it.
 */
export function createWorkArea(
  cfg: AgentConfig,
  account: RunnerAccount | null,
  opts: { sharedCache?: boolean; sandboxRun?: boolean } = {},
) {
  const paths = (l: LeaseState): LeasePaths => leasePaths(cfg, l, !!opts.sharedCache && account != null);
  /** Processes of the runner user (there must be none before a lease starts). */
  const foreign = (): number[] => (account ? processesOfUid(account.uid) : []);
  const helper = async (args: string[]): Promise<Termination> => {
    const r = await runHelper(account!, args);
    return r.code === 0
      ? { ok: true }
      : { ok: false, detail: describeFailure(['spark-lease-sandbox', ...args], r) };
  };
  /** A fresh, empty work area (whatever a crash left of an earlier attempt goes). */
  const fresh = async (l: LeaseState): Promise<Termination> => {
    const left = foreign();
    if (left.length) {
      return {
        ok: false,
        detail: `runner user ${account!.name} still has ${left.length} process(es) this lease did not start (pid ${left.slice(0, 5).join(', ')})`,
      };
    }
    assertUnder(cfg.workRoot, l.workDir);
    const p = paths(l);
    if (account) return helper([opts.sandboxRun ? 'prepare-run' : 'prepare', leaseName(l), p.cacheKey]);
    for (const d of [l.workDir, p.sandboxDir]) {
      makeWritable(d);
      rmSync(d, { recursive: true, force: true });
    }
    for (const d of [l.workDir, p.home, p.tmp, p.buildCache]) mkdirSync(d, { recursive: true, mode: 0o700 });
    return { ok: true };
  };
  return {
    paths,
    foreign,
    fresh,
    /** The work area of a lease adopted after a restart, made only when it is missing. */
    async make(l: LeaseState): Promise<void> {
      assertUnder(cfg.workRoot, l.workDir);
      if (existsSync(l.workDir)) return;
      const made = await fresh(l);
      if (!made.ok) throw new Error(made.detail);
    },
    /**
     * Removes the work area: the lease's processes must be gone; a tree the job made unreadable
     * (`chmod 000`) is made writable first. What cannot be removed is named, never thrown.
     */
    async remove(l: LeaseState): Promise<Termination> {
      // never remove anything outside the work volume, whatever the state file says
      assertUnder(cfg.workRoot, l.workDir);
      if (account) return helper(['remove', leaseName(l)]);
      const p = paths(l);
      for (const d of [l.workDir, p.sandboxDir]) {
        makeWritable(d);
        try {
          rmSync(d, { recursive: true, force: true });
        } catch (e) {
          return { ok: false, detail: `cannot remove ${d}: ${(e as Error).message}` };
        }
      }
      return { ok: true };
    },
    /** Bytes in the repository's shared build cache (null when it has none or it cannot be read). */
    async cacheBytes(l: LeaseState): Promise<number | null> {
      const p = paths(l);
      if (!account || p.cacheKey === '-') return null;
      const r = await runAsRunner(account, ['du', '-sk', '--', p.buildCache], { timeoutMs: 120_000 });
      const kib = Number(r.stdout.trim().split(/\s/)[0]);
      return r.code === 0 && Number.isFinite(kib) ? kib * 1024 : null;
    },
    /** Empties the repository's shared build cache (its size cap, or an operator's wipe). */
    async wipeCache(l: LeaseState): Promise<Termination> {
      const p = paths(l);
      if (!account || p.cacheKey === '-') return { ok: true };
      return helper(['wipe-cache', p.cacheKey]);
    },
  };
}

export type WorkArea = ReturnType<typeof createWorkArea>;

/**
 * Records a run on the lease and persists it before the executor creates anything (rule 7: a
 * crash right after the spawn, `sbatch` or dstack `apply` still finds the run by what is written).
 */
export function recordRunStart(
  l: LeaseState,
  run: { runnerName: string; runDir: string; jobId?: string | null },
  save: () => void,
): NonNullable<LeaseState['runner']> {
  const runner: NonNullable<LeaseState['runner']> = {
    runnerName: run.runnerName,
    runDir: run.runDir,
    pid: null,
    startTicks: null,
    startedAt: Date.now(),
    startReported: false,
    stoppedByAgent: false,
    exitReported: false,
    ...(run.jobId !== undefined ? { jobId: run.jobId } : {}),
  };
  l.runner = runner;
  l.phase = 'running';
  save();
  return runner;
}
