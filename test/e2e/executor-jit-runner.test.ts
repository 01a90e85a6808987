import { describe, expect, it, type TestContext } from 'vitest';
import { type Fleet, type FleetOptions, startFleet } from '../../scripts/sim/doubles/fleet.ts';
import { isLive, readRunnerMarkers, waitFor } from '../../scripts/sim/doubles/index.ts';

/**
 * The `jit-runner` executor's rows of the done-when matrix (docs/executors.md) that the
 * agent-* tests do not already cover: a pair that passes, a release while the runner runs, and a
 * release whose termination cannot be confirmed for a while (the runner slow to stop, then
 * nvidia-smi failing). Real agents as processes, real runner processes (as their own user when this
 * runs as root), the real controller and ledger; GitHub is the fleet's handoff stand-in.
 */

/**
 * A fleet of this test's own, closed when the test finishes: fleets share nothing (dirs, ports,
 * runner users, ledgers), so the tests run concurrently.
 */
async function jitFleet(ctx: TestContext, hosts: string[], opts: FleetOptions): Promise<Fleet> {
  const f = await startFleet({ hosts: hosts.map((id) => ({ id })), githubOutcome: () => 'passed', ...opts });
  ctx.onTestFinished(() => f.close());
  for (const h of hosts) f.startAgent(h);
  for (const h of hosts) {
    await waitFor(`${h} heartbeat`, async () => (await f.host(h)).lastHeartbeatAt != null);
  }
  return f;
}

/** The time the reservation's release was confirmed (its `reservation.done`/`failed` event). */
async function releasedAt(f: Fleet, id: string): Promise<number> {
  const events = await f.controller.ledger.history('reservation', id);
  const end = events.find((e) => e.type === 'reservation.done' || e.type === 'reservation.failed');
  expect(end, events.map((e) => e.type).join(',')).toBeDefined();
  return end!.at;
}

describe.concurrent('jit-runner executor: the done-when matrix', () => {
  it('runs a pair, one runner per host, and releases both as a unit after both exited', async (ctx) => {
    const fleet = await jitFleet(ctx, ['spark-2', 'spark-3'], {
      runner: () => ({ exitCode: 0, sleepMs: 300 }),
    });
    const f = fleet;
    const id = await f.reserve({ topology: 'pair' });
    const r = await f.waitReservation(id, ['done', 'failed'], 60_000);
    expect(r.status, f.agents['spark-3']!.output().slice(-2000)).toBe('done');
    const leases = await f.leases(id);
    expect(leases.map((l) => [l.hostId, l.status, l.exitCode])).toEqual([
      ['spark-2', 'released', 0],
      ['spark-3', 'released', 0],
    ]);
    for (const l of leases) expect(JSON.parse(l.evidenceJson!).executor).toBe('jit-runner');
    const markers = readRunnerMarkers(f.markerDir).filter((m) => m.reservationId === id);
    expect(markers.map((m) => m.hostId).sort()).toEqual(['spark-2', 'spark-3']);
    for (const m of markers) expect(isLive(m.pid)).toBe(false);
    expect(await f.bindingLeases()).toEqual([]);
  });

  it('a release while the runner runs stops its process group and releases only once it is gone', async (ctx) => {
    const fleet = await jitFleet(ctx, ['spark-2'], {
      // the job takes a moment to honour SIGTERM: the release waits for it
      runner: () => ({ exitCode: 0, sleepMs: 120_000, ignoreTermMs: 1000 }),
    });
    const f = fleet;
    const id = await f.reserve();
    await f.waitReservation(id, ['running'], 60_000);
    const m = await waitFor(
      'the runner to start',
      () => readRunnerMarkers(f.markerDir).find((x) => x.reservationId === id),
      30_000,
    );
    await f.controller.ledger.beginRelease(id, 'released', 'operator release', 'test');
    await expect(f.waitReservation(id, ['done', 'failed'], 60_000)).resolves.toMatchObject({
      status: 'done',
    });
    // released, and the runner (slow to honour SIGTERM) is gone: the agent waited for it
    expect(isLive(m.pid)).toBe(false);
    expect(f.agents['spark-2']!.output()).toContain('stopping the runner this agent started');
    // the runner's own output, reported once it exited: it got SIGTERM from the agent
    const [lease] = await f.leases(id);
    expect(JSON.parse(lease!.evidenceJson!).runner.lastLines).toContain('Received SIGTERM; job cancelled');
    expect(await f.bindingLeases()).toEqual([]);
  });

  it('nvidia-smi failing during a release (GPU state unknown): the lease is kept until the GPU answers', async (ctx) => {
    const fleet = await jitFleet(ctx, ['spark-2'], {
      runner: () => ({ exitCode: 0, sleepMs: 120_000, onGpu: true }),
    });
    const f = fleet;
    const id = await f.reserve();
    await f.waitReservation(id, ['running'], 60_000);
    const m = await waitFor(
      'the runner to start',
      () => readRunnerMarkers(f.markerDir).find((x) => x.reservationId === id),
      30_000,
    );
    f.gpu['spark-2']!.fail();
    await f.controller.ledger.beginRelease(id, 'released', 'operator release', 'test');
    const unknown = () =>
      f.agents['spark-2']!.output().split('cannot confirm cleanup: GPU state unknown').length - 1;
    await waitFor('two releases the GPU could not confirm', () => unknown() >= 2, 60_000);
    // the runner is gone, but nothing says the GPU is free: the host stays bound to the lease
    expect(isLive(m.pid)).toBe(false);
    expect((await f.reservation(id)).status).toBe('releasing');
    expect(await f.bindingLeases()).toHaveLength(1);
    const healedAt = Date.now();
    f.gpu['spark-2']!.heal();
    await expect(f.waitReservation(id, ['done', 'failed'], 60_000)).resolves.toMatchObject({
      status: 'done',
    });
    expect(await releasedAt(f, id)).toBeGreaterThanOrEqual(healedAt);
    expect(await f.bindingLeases()).toEqual([]);
  });
});
