import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { hostEvidenceOf } from '../../functions/ledger/host-evidence.ts';
import { type Fleet, startFleet } from '../../scripts/sim/doubles/fleet.ts';
import {
  FAKE_RUNNER,
  type FakeRunnerBehavior,
  readRunnerMarkers,
  waitFor,
} from '../../scripts/sim/doubles/index.ts';

/**
 * The agent's side of the host evidence (ADR 0160), with the real agent process, the real
 * controller and the fake runner (which prints the real runner's console lines and leaves the
 * checkout where actions/checkout does): the preflight it runs before the runner, the runner's
 * own job result and the commit in the work tree reach the ledger with the runner's exit.
 */

const SHA = '7fc2a91c0ffee00000000000000000000000000a';
let f: Fleet | null = null;
const roots: string[] = [];

afterEach(async () => {
  await f?.close();
  f = null;
  for (const r of roots.splice(0)) rmSync(r, { recursive: true, force: true });
});

/** A fleet whose hosts each have the runner installed in a dir of their own (its `_work` is the host's). */
async function fleetWith(runner: FakeRunnerBehavior, extra: Parameters<typeof startFleet>[0] = {}) {
  const dirs: Record<string, string> = {};
  for (const id of ['spark-2']) {
    const d = mkdtempSync(join(tmpdir(), `spark-runner-${id}-`));
    symlinkSync(FAKE_RUNNER, join(d, 'run.mjs'));
    roots.push(d);
    dirs[id] = d;
  }
  f = await startFleet({
    hosts: [{ id: 'spark-2' }],
    runnerUsers: false,
    runner: () => runner,
    agentConfig: (hostId) => ({
      runner: {
        dir: dirs[hostId],
        command: [process.execPath, join(dirs[hostId]!, 'run.mjs')],
        stopGraceS: 2,
        user: null,
        passEnv: ['PATH', 'FAKE_NVIDIA_SMI_STATE'],
      },
    }),
    ...extra,
  });
  f.startAgent('spark-2');
  await f.waitHostPhase('spark-2', ['idle']);
  return f;
}

describe('host evidence from the agent', { timeout: 120_000 }, () => {
  it('reports its preflight, the runner result and the checkout commit with the exit', async () => {
    const fl = await fleetWith({ exitCode: 0, sleepMs: 200, checkout: { repo: 'butter', sha: SHA } });
    const id = await fl.reserve();
    expect((await fl.waitReservation(id, ['done', 'failed'], 60_000)).status).toBe('done');
    const e = (await hostEvidenceOf(fl.controller.ledger.store.raw(undefined), id))['spark-2']!;
    expect(e.mode).toBe('runner');
    expect(e.preflight?.ok).toBe(true);
    expect(e.preflight?.checks.map((c) => c.name)).toEqual(
      expect.arrayContaining(['gpu', 'disk', 'ptrace-scope']),
    );
    expect(e.runner).toMatchObject({
      result: 'Succeeded',
      job: 'spark-test',
      exitCode: 0,
      stoppedByAgent: false,
    });
    expect(e.workTrees).toEqual([{ path: 'butter/butter', sha: SHA, detail: 'detached HEAD' }]);
    // the event says what the host saw, without log lines
    const exited = (await fl.controller.ledger.history('lease', (await fl.leases(id))[0]!.id)).find(
      (x) => x.type === 'lease.runner_exited',
    )!;
    expect(JSON.parse(exited.dataJson!)).toMatchObject({
      runnerResult: 'Succeeded',
      preflightOk: true,
      workTreeSha: SHA,
    });
  });

  it('a runner that exits 0 after a failed job (as a one-job runner does) fails the work on its own result', async () => {
    const fl = await fleetWith({
      exitCode: 0,
      jobResult: 'Failed',
      sleepMs: 200,
      checkout: { repo: 'butter', sha: SHA },
    });
    const id = await fl.reserve();
    const r = await fl.waitReservation(id, ['done', 'failed'], 60_000);
    expect(r).toMatchObject({ status: 'failed', outcome: 'failed' });
    expect((await fl.leases(id))[0]!.exitCode).toBe(0);
    const causes = (await fl.controller.ledger.history('reservation', id)).map((x) => x.cause).join('\n');
    expect(causes).toContain('the runner on spark-2 reported its job Failed');
  });

  it('a GPU taken between preparation and start: the preflight fails, the runner never starts, the work fails saying why', async () => {
    // the JIT config arrives late, so the GPU can be taken after the host was prepared
    const fl = await fleetWith({ exitCode: 0, sleepMs: 200 }, { handoffLatencyMs: 8000 });
    const id = await fl.reserve();
    await waitFor('the host prepared', async () => (await fl.leases(id))[0]?.preparedAt != null, 30_000);
    fl.gpu['spark-2']!.setProcesses([{ pid: 4242, name: '/usr/bin/python3', usedMemoryMiB: 512 }]);
    const r = await fl.waitReservation(id, ['releasing', 'done', 'failed'], 60_000);
    // nothing of the PR ran: the host preflight refused, not a test failure (ADR 0177)
    expect(r.outcome).toBe('preflight_failed');
    expect(readRunnerMarkers(fl.markerDir).filter((m) => m.reservationId === id)).toEqual([]);
    const e = (await hostEvidenceOf(fl.controller.ledger.store.raw(undefined), id))['spark-2']!;
    expect(e.preflight?.ok).toBe(false);
    expect(e.preflight?.checks[0]).toMatchObject({ name: 'gpu', ok: false });
    expect(e.preflight?.checks[0]?.detail).toContain('pid 4242 python3');
    expect(e.runner).toMatchObject({
      result: null,
      exitCode: null,
      detail: 'not started: the host preflight failed',
    });
    const causes = (await fl.controller.ledger.history('reservation', id)).map((x) => x.cause).join('\n');
    expect(causes).toContain(
      'the host preflight on spark-2 refused, nothing of the PR ran: gpu: 1 compute process(es) before the runner started',
    );
    const leaseEvents = (await fl.controller.ledger.history('lease', (await fl.leases(id))[0]!.id)).map(
      (x) => x.cause,
    );
    expect(leaseEvents).toContain('runner spark-spark-2-r-1-a0 not started: the host preflight failed');
    // nothing is killed: the process stays and the host waits for it (release-required)
    fl.gpu['spark-2']!.setProcesses([]);
  });
});
