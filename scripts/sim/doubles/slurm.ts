import { execFile, execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort, waitFor } from './index.ts';

const run = promisify(execFile);

/** The generic resource the test cluster declares (without devices: no GPU needed here). */
export const TEST_GRES = 'sparkgpu:1';

export interface TestSlurm {
  /** SLURM_CONF for clients. */
  conf: string;
  gres: string;
  dir: string;
  /** Runs a Slurm client (squeue, sacct, …) against this cluster. */
  client(argv: string[]): Promise<string>;
  /**
   * Stops slurmctld (SIGTERM, waits until it is gone): clients (squeue, scancel, sbatch) then fail
   * with "Unable to contact slurm controller" while slurmd keeps running the jobs it has. While it
   * is down, clients read `MessageTimeout=1` so that they fail at once instead of after seconds
   * (why: the note at OUTAGE_MESSAGE_TIMEOUT_S); {@link startController} restores the config first.
   */
  stopController(): Promise<void>;
  /** Starts slurmctld again, recovering its saved state (the jobs), and waits until it answers. */
  startController(): Promise<void>;
  stop(): Promise<void>;
}

const MESSAGE_TIMEOUT_S = 3;

/*
 * Why the client config changes while slurmctld is down: a Slurm 22.05 client retries its connection
 * to slurmctld once a second for MessageTimeout − 1 seconds before it reports "Unable to contact slurm
 * controller (connect failure)" (measured here: scancel 2.0 s and squeue 4.0 s — it connects twice —
 * at MessageTimeout=3; 1.0 s / 2.0 s at 2; under 10 ms at 1). The agent runs squeue three times and
 * scancel once per stop attempt, so an outage test spent ~15 s per attempt just in those retries.
 * Clients read slurm.conf at every start, so the outage gets `MessageTimeout=1` (the same failure,
 * at once) while slurmd keeps the config it started with and slurmctld restarts with the original.
 */
const OUTAGE_MESSAGE_TIMEOUT_S = 1;

const NEEDED = ['munged', 'slurmctld', 'slurmd', 'sbatch', 'squeue', 'sacct', 'scancel', 'sinfo'];

function which(cmd: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${cmd}`], {
      stdio: 'ignore',
      env: { PATH: `${process.env.PATH}:/usr/sbin:/sbin` },
    });
    return true;
  } catch {
    return false;
  }
}

/**
 * A real single-node Slurm for the `slurm` executor tests: munged, slurmctld and
 * slurmd on this machine with a config written to a temp dir (fresh ports, a gres declared without
 * devices, job completion logged to a file so `sacct -c` accounts jobs without slurmdbd). Fails —
 * never skips — naming the setup step when Slurm is not installed.
 */
export async function startSlurm(): Promise<TestSlurm> {
  const missing = NEEDED.filter((c) => !which(c));
  if (missing.length) {
    throw new Error(
      `Slurm is not installed (${missing.join(', ')} missing): run scripts/setup-test-deps.sh, which installs the Debian packages slurm-wlm and munge`,
    );
  }
  if (!existsSync('/etc/munge/munge.key')) {
    throw new Error('no /etc/munge/munge.key: run scripts/setup-test-deps.sh (the munge package creates it)');
  }
  const dir = mkdtempSync(join(tmpdir(), 'spark-slurm-'));
  // runner users submit jobs: they must read the config and reach the munge socket
  chmodSync(dir, 0o755);
  for (const d of ['state', 'spool']) mkdirSync(join(dir, d));
  const node = hostname().split('.')[0]!;
  const [ctldPort, slurmdPort] = [await freePort(), await freePort()];
  const [name, count] = TEST_GRES.split(':') as [string, string];
  const conf = join(dir, 'slurm.conf');
  const messageTimeout = `MessageTimeout=${MESSAGE_TIMEOUT_S}`;
  const confText = [
    'ClusterName=sparktest',
    `SlurmctldHost=${node}`,
    'SlurmUser=root',
    'SlurmdUser=root',
    'AuthType=auth/munge',
    `AuthInfo=socket=${join(dir, 'munge.sock')}`,
    'CredType=cred/munge',
    `StateSaveLocation=${join(dir, 'state')}`,
    `SlurmdSpoolDir=${join(dir, 'spool')}`,
    `SlurmctldPidFile=${join(dir, 'slurmctld.pid')}`,
    `SlurmdPidFile=${join(dir, 'slurmd.pid')}`,
    `SlurmctldPort=${ctldPort}`,
    `SlurmdPort=${slurmdPort}`,
    'ProctrackType=proctrack/linuxproc',
    'TaskPlugin=task/none',
    'SwitchType=switch/none',
    'MpiDefault=none',
    'ReturnToService=2',
    // clients give up on an unreachable slurmctld after ~2×MessageTimeout (default 10 s: ~18 s);
    // the round trips of normal operation get 3 s on a loaded machine
    messageTimeout,
    'SchedulerType=sched/builtin',
    'SelectType=select/cons_tres',
    'SelectTypeParameters=CR_Core',
    `GresTypes=${name}`,
    'AccountingStorageType=accounting_storage/none',
    'JobCompType=jobcomp/filetxt',
    `JobCompLoc=${join(dir, 'jobcomp.txt')}`,
    'JobAcctGatherType=jobacct_gather/none',
    `SlurmctldLogFile=${join(dir, 'slurmctld.log')}`,
    `SlurmdLogFile=${join(dir, 'slurmd.log')}`,
    `NodeName=${node} CPUs=2 RealMemory=1000 Gres=${TEST_GRES} State=UNKNOWN`,
    `PartitionName=spark Nodes=${node} Default=YES MaxTime=INFINITE State=UP`,
    '',
  ].join('\n');
  writeFileSync(conf, confText);
  writeFileSync(join(dir, 'gres.conf'), `Name=${name} Count=${count}\n`);
  const env = { ...process.env, SLURM_CONF: conf, PATH: `${process.env.PATH}:/usr/sbin:/sbin` };
  const pids: number[] = [];
  const pidOf = (f: string) =>
    existsSync(join(dir, f)) ? Number(readFileSync(join(dir, f), 'utf8').trim()) : null;
  const gone = (p: number) => {
    try {
      process.kill(p, 0);
      return /^State:\s+[ZX]/m.test(readFileSync(`/proc/${p}/status`, 'utf8'));
    } catch {
      return true;
    }
  };
  const stop = async () => {
    for (const f of ['slurmd.pid', 'slurmctld.pid', 'munged.pid']) {
      const pid = pidOf(f);
      if (pid) pids.push(pid);
    }
    for (const pid of pids) {
      try {
        process.kill(pid, 'SIGTERM');
      } catch {
        // gone
      }
    }
    await waitFor('the Slurm daemons to stop', () => pids.every(gone), 15_000).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await run(
      'munged',
      [
        '--force',
        `--socket=${join(dir, 'munge.sock')}`,
        `--pid-file=${join(dir, 'munged.pid')}`,
        `--log-file=${join(dir, 'munged.log')}`,
        `--seed-file=${join(dir, 'munge.seed')}`,
      ],
      { env },
    );
    await run('slurmctld', ['-c', '-f', conf], { env });
    await run('slurmd', ['-f', conf], { env });
    const client = async (argv: string[]) => (await run(argv[0]!, argv.slice(1), { env })).stdout;
    await waitFor(
      'the test Slurm node to be idle',
      async () => (await client(['sinfo', '-h', '-o', '%T'])).trim() === 'idle',
      30_000,
      200,
    );
    const stopController = async () => {
      const pid = pidOf('slurmctld.pid');
      if (!pid) throw new Error('slurmctld has no pid file');
      process.kill(pid, 'SIGTERM');
      await waitFor('slurmctld to stop', () => gone(pid), 30_000, 100);
      writeFileSync(conf, confText.replace(messageTimeout, `MessageTimeout=${OUTAGE_MESSAGE_TIMEOUT_S}`));
    };
    const startController = async () => {
      writeFileSync(conf, confText);
      // without -c: slurmctld recovers its jobs from StateSaveLocation
      await run('slurmctld', ['-f', conf], { env });
      await waitFor(
        'slurmctld to answer again',
        async () => (await client(['sinfo', '-h', '-o', '%T']).catch(() => '')).trim() !== '',
        30_000,
        200,
      );
    };
    return { conf, gres: TEST_GRES, dir, client, stopController, startController, stop };
  } catch (e) {
    const logs = ['slurmctld.log', 'slurmd.log']
      .map((f) =>
        existsSync(join(dir, f)) ? readFileSync(join(dir, f), 'utf8').split('\n').slice(-5).join('\n') : '',
      )
      .join('\n');
    await stop();
    throw new Error(`the test Slurm did not start: ${(e as Error).message}\n${logs}`);
  }
}
