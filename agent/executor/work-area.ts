import { mkdirSync, rmSync } from 'node:fs';
import type { AgentConfig } from '../config.ts';
import { runCommand } from '../exec.ts';
import { asAccount, processesOfUid, type RunnerAccount } from '../runner.ts';
import type { LeaseState } from '../state-file.ts';
import type { Termination } from './types.ts';
import { assertUnder } from './work-dir.ts';

/**
 * The lease's work dir, shared by every executor: made and removed as the runner user (ADR 0010),
 * only ever under the work root.
 */
export function createWorkArea(cfg: AgentConfig, account: RunnerAccount | null) {
  /** Runs a command as the runner user; its failure is an error naming the command. */
  const asRunner = async (argv: string[]): Promise<string> => {
    const r = await runCommand([...asAccount(account!), ...argv], { timeoutMs: 60_000 });
    if (r.code !== 0) throw new Error(`${argv[0]} as ${account!.name} failed: ${r.stderr.trim() || r.error}`);
    return r.stdout;
  };
  return {
    asRunner,
    /** Processes of the runner user (there must be none before a lease starts). */
    foreign: (): number[] => (account ? processesOfUid(account.uid) : []),
    /** A fresh, empty work dir (whatever a crash left of an earlier attempt goes). */
    async fresh(l: LeaseState): Promise<Termination> {
      const left = account ? processesOfUid(account.uid) : [];
      if (left.length) {
        return {
          ok: false,
          detail: `runner user ${account!.name} still has ${left.length} process(es) this lease did not start (pid ${left.slice(0, 5).join(', ')})`,
        };
      }
      assertUnder(cfg.workRoot, l.workDir);
      if (account) {
        await asRunner([
          '/bin/sh',
          '-c',
          'rm -rf --one-file-system -- "$1" && mkdir -m 0700 -- "$1"',
          'sh',
          l.workDir,
        ]);
      } else {
        rmSync(l.workDir, { recursive: true, force: true });
        mkdirSync(l.workDir, { recursive: true, mode: 0o700 });
      }
      return { ok: true };
    },
    async make(l: LeaseState): Promise<void> {
      assertUnder(cfg.workRoot, l.workDir);
      if (account) await asRunner(['mkdir', '-p', '-m', '0700', '--', l.workDir]);
      else mkdirSync(l.workDir, { recursive: true, mode: 0o700 });
    },
    async remove(l: LeaseState): Promise<void> {
      // never remove anything outside the work volume, whatever the state file says
      assertUnder(cfg.workRoot, l.workDir);
      if (account) await asRunner(['rm', '-rf', '--one-file-system', '--', l.workDir]);
      else rmSync(l.workDir, { recursive: true, force: true });
    },
  };
}

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
