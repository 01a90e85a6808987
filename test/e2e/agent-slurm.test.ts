import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { AgentState } from '../../agent/state-file.ts';
import { type Fleet, type FleetOptions, startFleet } from '../../scripts/sim/doubles/fleet.ts';
import { isLive, readRunnerMarkers, waitFor } from '../../scripts/sim/doubles/index.ts';
import { startSlurm, type TestSlurm } from '../../scripts/sim/doubles/slurm.ts';

/**
 * The `slurm` executor against a real single-node Slurm (scripts/sim/doubles/slurm.ts):
 * the agent submits the lease's runner as a batch job (as the runner user), watches it with
 * squeue/sacct, cancels it with scancel, and reports cleaned only after sacct confirms the end.
 */

let slurm: TestSlurm;
beforeAll(async () => {
  slurm = await startSlurm();
}, 60_000);
afterAll(async () => {
  await slurm?.stop();
});

let fleet: Fleet | null = null;
afterEach(async () => {
  await fleet?.close();
  fleet = null;
});

async function slurmFleet(opts: FleetOptions) {
  const f = await startFleet({
    hosts: [{ id: 'spark-2' }],
    githubOutcome: () => 'passed',
    ...opts,
    agentConfig: () => ({ executor: 'slurm', slurm: { gres: slurm.gres, conf: slurm.conf } }),
  });
  f.startAgent('spark-2');
  await waitFor('spark-2 heartbeat', async () => (await f.host('spark-2')).lastHeartbeatAt != null);
  return f;
}

describe('slurm executor on a real Slurm', () => {
  it('runs a reservation as a batch job of the runner user, accounted by sacct, then releases it', async () => {
    fleet = await slurmFleet({
      runner: () => ({
        exitCode: 0,
        sleepMs: 300,
        lastLines: ['smoke: 3 passed'],
        shell: 'echo "home=$HOME tmp=$TMPDIR cache=$SPARK_BUILD_CACHE_DIR"',
      }),
    });
    const f = fleet;
    const id = await f.reserve();
    const done = await f.waitReservation(id, ['done', 'failed'], 60_000);
    expect(done.status, f.agents['spark-2']!.output().slice(-3000)).toBe('done');
    const [lease] = await f.leases(id);
    expect(lease!.exitCode).toBe(0);
    expect(JSON.parse(lease!.evidenceJson!).runner.lastLines).toContain('smoke: 3 passed');
    const m = readRunnerMarkers(f.markerDir).find((x) => x.reservationId === id)!;
    if (f.runnerUsers['spark-2']) {
      expect(m.uid).toBe(f.runnerUsers['spark-2'].uid);
      // a Slurm job runs outside the lease's namespace: its home, temp and build dirs are the
      // lease's own, removed with it (ADR 0155, 0157)
      expect(m.shell!.output.trim()).toBe(
        `home=${m.workDir}.sandbox/home tmp=${m.workDir}.sandbox/tmp cache=${m.workDir}/.build-cache`,
      );
      expect(existsSync(`${m.workDir}.sandbox`)).toBe(false);
    }
    // the job was Slurm's: named after the reservation, finished and accounted
    const acct = await slurm.client([
      'sacct',
      '-c',
      '-n',
      '-P',
      '--name',
      `spark-${id}-spark-2`,
      '-o',
      'jobname,state,exitcode',
    ]);
    expect(acct.trim().split('\n')).toContain(`spark-${id}-spark-2|COMPLETED|0:0`);
    expect((await slurm.client(['squeue', '-h', '-o', '%i'])).trim()).toBe('');
    expect(await f.bindingLeases()).toEqual([]);
  });

  it('a release while the job runs cancels it with scancel and waits for sacct before cleaned', async () => {
    fleet = await slurmFleet({ runner: () => ({ exitCode: 0, sleepMs: 120_000 }) });
    const f = fleet;
    const id = await f.reserve();
    await f.waitReservation(id, ['running'], 60_000);
    const m = await waitFor(
      'the job to start',
      () => readRunnerMarkers(f.markerDir).find((x) => x.reservationId === id),
      30_000,
    );
    await f.controller.ledger.beginRelease(id, 'released', 'operator release', 'test');
    await expect(f.waitReservation(id, ['done', 'failed'], 60_000)).resolves.toMatchObject({
      status: 'done',
    });
    expect(isLive(m.pid)).toBe(false);
    const acct = await slurm.client([
      'sacct',
      '-c',
      '-n',
      '-P',
      '--name',
      `spark-${id}-spark-2`,
      '-o',
      'state',
    ]);
    expect(acct).toContain('CANCELLED');
    const released = (await f.controller.ledger.history('reservation', id)).find(
      (e) => e.type === 'reservation.done',
    )!;
    expect(released).toBeDefined();
    expect(f.agents['spark-2']!.output()).toContain('cancelling the slurm job this lease submitted');
  });

  it('kill -9 of the agent while the job runs: the restarted agent finds the job, reports its exit, releases', async () => {
    fleet = await slurmFleet({
      runner: () => ({ exitCode: 4, sleepMs: 3000, lastLines: ['assert failed'] }),
      // no GitHub result: the runner's exit status decides
      githubOutcome: () => null,
    });
    const f = fleet;
    const stateFile = join(dirname(f.agentConfigPath('spark-2')), 'state', 'agent-state.json');
    const id = await f.reserve();
    await waitFor(
      'the job id in the state file',
      () => (JSON.parse(readFileSync(stateFile, 'utf8')) as AgentState).lease?.runner?.jobId,
      30_000,
    );
    await f.agents['spark-2']!.kill('SIGKILL');
    // the job runs on without the agent (Slurm owns it)
    expect(
      (await slurm.client(['squeue', '-h', '--name', `spark-${id}-spark-2`, '-o', '%T'])).trim(),
    ).toMatch(/RUNNING|PENDING/);
    f.startAgent('spark-2');
    const r = await f.waitReservation(id, ['done', 'failed'], 60_000);
    expect(r.status).toBe('failed');
    const [lease] = await f.leases(id);
    expect(lease!.exitCode).toBe(4);
    expect(JSON.parse(lease!.evidenceJson!).runner.lastLines).toContain('assert failed');
    expect(await f.bindingLeases()).toEqual([]);
  });

  it('runs a pair as one job per host on the Slurm node (exclusive: one after the other), released as a unit', async () => {
    const f = await startFleet({
      hosts: [{ id: 'spark-2' }, { id: 'spark-3' }],
      githubOutcome: () => 'passed',
      runner: () => ({ exitCode: 0, sleepMs: 300 }),
      agentConfig: () => ({ executor: 'slurm', slurm: { gres: slurm.gres, conf: slurm.conf } }),
    });
    fleet = f;
    f.startAgent('spark-2');
    f.startAgent('spark-3');
    for (const h of ['spark-2', 'spark-3']) {
      await waitFor(`${h} heartbeat`, async () => (await f.host(h)).lastHeartbeatAt != null);
    }
    const id = await f.reserve({ topology: 'pair' });
    const r = await f.waitReservation(id, ['done', 'failed'], 60_000);
    expect(r.status, f.agents['spark-3']!.output().slice(-2000)).toBe('done');
    const leases = await f.leases(id);
    expect(leases.map((l) => [l.hostId, l.status, l.exitCode])).toEqual([
      ['spark-2', 'released', 0],
      ['spark-3', 'released', 0],
    ]);
    // this fleet's jobs (reservation ids restart with each fleet; job ids do not)
    const ids = ['spark-2', 'spark-3'].flatMap((h) =>
      [...f.agents[h]!.output().matchAll(/"msg":"slurm job submitted".*?"jobId":"(\d+)"/g)].map((m) => m[1]!),
    );
    expect(ids).toHaveLength(2);
    for (const jobId of ids) {
      const acct = await slurm.client(['sacct', '-c', '-n', '-P', '-j', jobId, '-o', 'jobid,state']);
      expect(acct.trim().split('\n')).toContain(`${jobId}|COMPLETED`);
    }
  });
  it('slurmctld down during a release (squeue and scancel cannot answer): the reservation stays releasing until Slurm confirms the cancel', {
    timeout: 240_000,
  }, async () => {
    fleet = await slurmFleet({ runner: () => ({ exitCode: 0, sleepMs: 120_000 }) });
    const f = fleet;
    const id = await f.reserve();
    await f.waitReservation(id, ['running'], 60_000);
    const m = await waitFor(
      'the job to start',
      () => readRunnerMarkers(f.markerDir).find((x) => x.reservationId === id),
      30_000,
    );
    await slurm.stopController();
    let restarted = false;
    let backAt = Number.POSITIVE_INFINITY;
    try {
      await f.controller.ledger.beginRelease(id, 'released', 'operator release', 'test');
      const refusals = () => f.agents['spark-2']!.output().split('scancel not confirmed').length - 1;
      await waitFor('two cancels Slurm could not confirm', () => refusals() >= 2, 120_000);
      // the job still runs under slurmd; nothing may free the host now
      expect(isLive(m.pid)).toBe(true);
      expect((await f.reservation(id)).status).toBe('releasing');
      expect(await f.bindingLeases()).toHaveLength(1);
      expect(f.agents['spark-2']!.output()).toContain('squeue did not answer');
      await slurm.startController();
      restarted = true;
      backAt = Date.now();
    } finally {
      if (!restarted) await slurm.startController();
    }
    await expect(f.waitReservation(id, ['done', 'failed'], 90_000)).resolves.toMatchObject({
      status: 'done',
    });
    expect(isLive(m.pid)).toBe(false);
    const jobId = [
      ...f.agents['spark-2']!.output().matchAll(/"msg":"slurm job submitted".*?"jobId":"(\d+)"/g),
    ].at(-1)![1]!;
    const acct = await slurm.client(['sacct', '-c', '-n', '-P', '-j', jobId, '-o', 'state']);
    expect(acct).toContain('CANCELLED');
    // released only after Slurm was back to cancel and account the job
    const done = (await f.controller.ledger.history('reservation', id)).find(
      (e) => e.type === 'reservation.done',
    );
    expect(done!.at).toBeGreaterThanOrEqual(backAt);
    expect(await f.bindingLeases()).toEqual([]);
  });
  it('a repository configured for slurm runs as a batch job on a jit-runner host; another repository there keeps the JIT runner', async () => {
    const f = await startFleet({
      hosts: [{ id: 'spark-2' }],
      githubOutcome: () => 'passed',
      runner: () => ({ exitCode: 0, sleepMs: 300 }),
      repositories: { 'acme/butter': { executor: 'slurm' } },
      agentConfig: () => ({ executor: 'jit-runner', slurm: { gres: slurm.gres, conf: slurm.conf } }),
    });
    fleet = f;
    f.startAgent('spark-2');
    await waitFor('spark-2 heartbeat', async () => (await f.host('spark-2')).lastHeartbeatAt != null);
    const butter = await f.reserve({ repo: 'acme/butter' });
    expect((await f.waitReservation(butter, ['done', 'failed'], 60_000)).status).toBe('done');
    const [bl] = await f.leases(butter);
    expect(JSON.parse(bl!.evidenceJson!).executor).toBe('slurm');
    const jobId = [
      ...f.agents['spark-2']!.output().matchAll(/"msg":"slurm job submitted".*?"jobId":"(\d+)"/g),
    ].at(-1)?.[1];
    expect(jobId).toMatch(/^\d+$/);
    const acct = await slurm.client(['sacct', '-c', '-n', '-P', '-j', jobId!, '-o', 'jobname,state']);
    expect(acct.trim().split('\n')).toContain(`spark-${butter}-spark-2|COMPLETED`);
    const iron = await f.reserve({ repo: 'acme/iron' });
    expect((await f.waitReservation(iron, ['done', 'failed'], 60_000)).status).toBe('done');
    const [il] = await f.leases(iron);
    expect(JSON.parse(il!.evidenceJson!).executor).toBe('jit-runner');
    // one batch job in all: the other repository's runner ran as a process group
    expect(f.agents['spark-2']!.output().match(/"msg":"slurm job submitted"/g)).toHaveLength(1);
    expect(await f.bindingLeases()).toEqual([]);
  });
});
