import { join } from 'node:path';
import { type AgentConfig, hostEnv } from '../config.ts';
import { type CommandResult, runCommand } from '../exec.ts';
import { runAsRunner } from '../host/sandbox.ts';
import type { AgentLogger } from '../log.ts';
import { type RunnerAccount, redactLines } from '../runner.ts';
import type { LeaseState } from '../state-file.ts';
import { jobEnv, shellJoin } from './runner-env.ts';
import type { Executor, Observation, Termination, Workload } from './types.ts';
import { createWorkArea, recordRunStart } from './work-area.ts';

export interface SlurmDeps {
  cfg: AgentConfig;
  log: AgentLogger;
  account: RunnerAccount | null;
  save(): void;
}

/** Slurm job states after which nothing of the job runs any more (sacct/squeue `%T`). */
const TERMINAL = new Set([
  'COMPLETED',
  'FAILED',
  'CANCELLED',
  'TIMEOUT',
  'NODE_FAIL',
  'PREEMPTED',
  'OUT_OF_MEMORY',
  'BOOT_FAIL',
  'DEADLINE',
]);

const OUTPUT = '.spark-slurm.out';

/**
 * The `slurm` executor: the lease's workload (the runner command, with the same
 * environment as `jit-runner`) is one Slurm batch job — `sbatch` with the lease's GPU gres on one
 * exclusive node, named `spark-<reservation>-<host>`, submitted as the runner user so it runs as that
 * user — observed with `squeue`/`sacct`, stopped with `scancel`, and confirmed terminated only
 * when `squeue` no longer lists it and `sacct` reports a final state. A job whose id was lost in
 * a crash between submit and record is found again by its name.
 */
export function createSlurmExecutor(deps: SlurmDeps): Executor {
  const { cfg, log, save, account } = deps;
  // a Slurm job runs outside the lease's namespace: it gets a build cache of its own (ADR 0157)
  const area = createWorkArea(cfg, account);
  const s = cfg.slurm;
  const bin = (name: string) => (s.bin ? join(s.bin, name) : name);
  const slurmEnv = (): NodeJS.ProcessEnv => ({
    PATH: hostEnv.PATH ?? '/usr/bin:/bin',
    ...(s.conf ? { SLURM_CONF: s.conf } : {}),
  });
  /**
   * Runs a Slurm client command. sbatch and scancel run as the runner user (the job is theirs, and
   * scancel reaches only their jobs); squeue and sacct only read, as the agent.
   */
  const slurm = (argv: string[], env: NodeJS.ProcessEnv = slurmEnv()): Promise<CommandResult> => {
    const cmd = [bin(argv[0]!), ...argv.slice(1)];
    if (account && (argv[0] === 'sbatch' || argv[0] === 'scancel'))
      return runAsRunner(account, cmd, { timeoutMs: 30_000, env });
    return runCommand(cmd, { timeoutMs: 30_000, env });
  };
  let secrets: string[] = [];
  // per host too: the two nodes of a pair may share one Slurm cluster, and a lost id is found by name
  const jobName = (l: LeaseState) => `spark-${l.reservationId}-${cfg.hostId}`;

  /**
   * The job's id: recorded, or found by name (submitted, then the agent crashed before recording);
   * `undefined` when squeue could not be asked (the job may exist).
   */
  const jobId = async (l: LeaseState): Promise<string | null | undefined> => {
    const r = l.runner;
    if (!r) return null;
    if (r.jobId) return r.jobId;
    const q = await slurm(['squeue', '-h', '--name', jobName(l), '-o', '%i']);
    if (q.code !== 0) return undefined;
    const id = q.stdout.trim().split('\n')[0]?.trim() ?? '';
    if (/^\d+$/.test(id)) {
      r.jobId = id;
      save();
      return id;
    }
    return null;
  };
  /**
   * squeue's state of the job; null when it no longer lists it; `undefined` when squeue could not
   * say (slurmctld unreachable, a timeout): the job may still run.
   */
  const queued = async (id: string): Promise<string | null | undefined> => {
    const q = await slurm(['squeue', '-h', '-j', id, '-o', '%T']);
    const state = q.stdout.trim();
    if (q.code === 0) return state || null;
    // squeue -j <id> of a job slurmctld has already purged exits 1 with "Invalid job id specified"
    if (/invalid job id/i.test(q.stderr)) return null;
    log.warn('squeue did not answer; the job may still run', {
      jobId: id,
      error: (q.stderr.trim() || q.error || `exit ${q.code}`).slice(0, 300),
    });
    return undefined;
  };
  /** sacct's final record of the job: state and exit code, or null when it has none (yet). */
  const accounted = async (id: string): Promise<{ state: string; exitCode: number | null } | null> => {
    // without slurmdbd, sacct reads the job completion log (`-c`, JobCompType=jobcomp/filetxt)
    let q = await slurm(['sacct', '-n', '-P', '-X', '-j', id, '-o', 'state,exitcode']);
    if (q.code !== 0 || !q.stdout.trim())
      q = await slurm(['sacct', '-c', '-n', '-P', '-j', id, '-o', 'state,exitcode']);
    const line = q.stdout.trim().split('\n')[0];
    if (q.code !== 0 || !line) return null;
    const [state = '', exit = ''] = line.split('|');
    const st = state.split(' ')[0]!.toUpperCase();
    const code = Number(exit.split(':')[0]);
    return { state: st, exitCode: st === 'CANCELLED' || !Number.isInteger(code) ? null : code };
  };

  return {
    name: 'slurm',

    prepare: (l) => area.fresh(l),

    async start(l: LeaseState, w: Workload): Promise<void> {
      if (l.phase !== 'prepared') await area.make(l);
      // persisted before the job exists: a crash after sbatch finds it again by its name
      const run = recordRunStart(l, { runnerName: w.name, runDir: l.workDir, jobId: null }, save);
      const argv = [
        'sbatch',
        '--parsable',
        `--job-name=${jobName(l)}`,
        `--gres=${s.gres}`,
        '--exclusive',
        '--nodes=1',
        ...(s.partition ? [`--partition=${s.partition}`] : []),
        `--chdir=${l.workDir}`,
        `--output=${join(l.workDir, OUTPUT)}`,
        // the job gets exactly the environment built here (the JIT config travels in it, not argv)
        '--export=ALL',
        '--wrap',
        shellJoin(cfg.runner.command),
      ];
      const r = await slurm(argv, {
        ...jobEnv(cfg, account, l, w, area.paths(l), false),
        ...(s.conf ? { SLURM_CONF: s.conf } : {}),
      });
      const id = r.stdout.trim().split(';')[0] ?? '';
      if (r.code !== 0 || !/^\d+$/.test(id)) {
        throw new Error(`sbatch failed: ${(r.stderr.trim() || r.error || r.stdout.trim()).slice(0, 300)}`);
      }
      run.jobId = id;
      save();
      secrets = [w.jitConfig, w.jobToken ?? ''];
      log.info('slurm job submitted', { leaseId: l.leaseId, runnerName: w.name, jobId: id });
    },

    async observe(l: LeaseState): Promise<Observation> {
      const r = l.runner;
      if (!r) return { state: 'none' };
      const id = await jobId(l);
      if (id === undefined) return { state: 'running' };
      if (!id) return { state: 'exited', exitCode: null };
      const st = await queued(id);
      if (st === undefined || (st && !TERMINAL.has(st))) return { state: 'running' };
      if (r.exitCode === undefined) {
        const acc = await accounted(id);
        // not accounted yet: still "running" for the agent, so nothing is reported early
        if (!acc) return { state: 'running' };
        r.exitCode = acc.exitCode;
        save();
      }
      return { state: 'exited', exitCode: r.exitCode ?? null };
    },

    async stop(l: LeaseState): Promise<void> {
      const id = await jobId(l);
      if (!id || !l.runner) return;
      // gone for sure: nothing to cancel; unknown (squeue did not answer): try anyway
      if ((await queued(id)) === null) return;
      l.runner.stoppedByAgent = true;
      save();
      log.info('cancelling the slurm job this lease submitted', { leaseId: l.leaseId, jobId: id });
      const c = await slurm(['scancel', id]);
      if (c.code !== 0) {
        // confirmTerminated keeps the lease until squeue and sacct say the job ended
        log.warn('scancel not confirmed; will look again', {
          jobId: id,
          error: (c.stderr.trim() || c.error || `exit ${c.code}`).slice(0, 300),
        });
        return;
      }
      const deadline = Date.now() + (cfg.runner.stopGraceS + 30) * 1000;
      while (Date.now() < deadline && (await queued(id))) await new Promise((res) => setTimeout(res, 200));
    },

    async confirmTerminated(l: LeaseState): Promise<Termination> {
      if (!l.runner) return { ok: true };
      const id = await jobId(l);
      if (id === undefined) return { ok: false, detail: 'squeue did not answer; the job may exist' };
      if (!id) {
        // submitted or not, no job of this name is queued; with no id there is nothing to account
        return { ok: true };
      }
      const st = await queued(id);
      if (st === undefined) return { ok: false, detail: `slurm job ${id}: squeue did not answer` };
      if (st && !TERMINAL.has(st)) return { ok: false, detail: `slurm job ${id} is ${st}` };
      const acc = await accounted(id);
      if (!acc || !TERMINAL.has(acc.state)) {
        return {
          ok: false,
          detail: `slurm job ${id}: termination not confirmed by sacct (${acc?.state ?? 'no record'})`,
        };
      }
      return { ok: true };
    },

    async lastLines(l: LeaseState, n: number): Promise<string[]> {
      if (!l.runner) return [];
      const file = join(l.workDir, OUTPUT);
      const r = account
        ? await runAsRunner(account, ['tail', '-n', String(n), '--', file], { timeoutMs: 10_000 })
        : await runCommand(['tail', '-n', String(n), '--', file], { timeoutMs: 10_000 });
      const lines =
        r.code === 0
          ? r.stdout
              .split('\n')
              .map((x) => x.trimEnd())
              .filter(Boolean)
          : [];
      return redactLines(lines.slice(-n), secrets);
    },

    async forget(l: LeaseState): Promise<void> {
      l.runner = null;
      secrets = [];
      save();
    },

    async discard(l: LeaseState): Promise<void> {
      const removed = await area.remove(l);
      if (!removed.ok) throw new Error(removed.detail);
      secrets = [];
    },

    leasePaths: (l) => area.paths(l),
  };
}
