import { describe, expect, it, type TestContext } from 'vitest';
import { type Fleet, type FleetOptions, startFleet } from '../../scripts/sim/doubles/fleet.ts';
import { isLive, readRunnerMarkers, waitFor } from '../../scripts/sim/doubles/index.ts';

/**
 * Pairs with two agents as separate processes. The fleet's JIT stand-in takes GitHub's
 * place (scripts/sim/doubles/fleet-jit-stand-in.ts): it inserts one jit_handoffs row per granted lease.
 */

/**
 * A pair fleet of this test's own, closed when the test finishes: fleets share nothing (dirs,
 * ports, runner users, ledgers), so the tests run concurrently.
 */
async function startPairFleet(ctx: TestContext, runner: FleetOptions['runner']): Promise<Fleet> {
  const f = await startFleet({
    runner,
    // both hosts check the interconnect before reporting prepared
    agentConfig: () => ({ interconnectCheck: ['/bin/true'] }),
  });
  ctx.onTestFinished(() => f.close());
  await f.deckard!.start();
  f.startAgent('spark-1');
  f.startAgent('spark-2');
  await f.waitHostPhase('spark-1', ['service']);
  await waitFor('spark-2 heartbeat', async () => (await f.host('spark-2')).lastHeartbeatAt != null);
  return f;
}

describe.concurrent('relay agent: pairs', () => {
  it('fails the pair as a unit when one node exits non-zero; both keep their evidence', async (ctx) => {
    const fleet = await startPairFleet(ctx, (_rid, hostId) =>
      hostId === 'spark-1'
        ? {
            exitCode: 3,
            sleepMs: 500,
            lastLines: ['NCCL WARN connection to rank 1 lost', 'assert allreduce ok'],
          }
        : { exitCode: 0, sleepMs: 60_000 },
    );
    const id = await fleet.reserve({ topology: 'pair' });
    const r = await fleet.waitReservation(id, ['done', 'failed'], 40_000);
    expect(r.status).toBe('failed');
    expect(r.outcome).toBe('failed');

    // preparing only once both nodes were prepared
    const events = await fleet.controller.ledger.recentEvents(500);
    const ordered = events.reverse();
    const preparing = ordered.findIndex((e) => e.type === 'reservation.preparing' && e.subjectId === id);
    const prepared = ordered
      .map((e, i) => ({ e, i }))
      .filter(({ e }) => e.type === 'lease.prepared' && JSON.parse(e.dataJson!).reservationId === id);
    expect(prepared).toHaveLength(2);
    for (const p of prepared) expect(p.i).toBeLessThan(preparing);

    const [l1, l2] = await fleet.leases(id);
    expect(l1).toMatchObject({ hostId: 'spark-1', status: 'released', exitCode: 3, lend: true });
    expect(l2).toMatchObject({ hostId: 'spark-2', status: 'released' });
    const e1 = JSON.parse(l1!.evidenceJson!);
    const e2 = JSON.parse(l2!.evidenceJson!);
    expect(e1.runner.exitCode).toBe(3);
    expect(e1.runner.lastLines).toContain('NCCL WARN connection to rank 1 lost');
    // spark-2's runner was stopped by its agent, and its last lines were kept too
    expect(e2.runner.lastLines).toContain('Received SIGTERM; job cancelled');
    expect(e2.prepare.interconnectOk).toBe(true);
    const m2 = readRunnerMarkers(fleet.markerDir).find((m) => m.hostId === 'spark-2')!;
    expect(isLive(m2.pid)).toBe(false);

    await fleet.waitHostPhase('spark-1', ['service']);
    expect((await fleet.host('spark-2')).phase).toBe('idle');
    expect(await fleet.bindingLeases()).toEqual([]);
  });

  it('fails the pair as a unit when one node cannot be prepared; the other runs nothing', async (ctx) => {
    const fleet = await startPairFleet(ctx, () => ({ exitCode: 0, sleepMs: 300 }));
    fleet.deckard!.setStopMode('pause');
    const id = await fleet.reserve({ topology: 'pair' });
    const r = await fleet.waitReservation(id, ['done', 'failed'], 40_000);
    expect(r.status).toBe('failed');
    const releasing = (await fleet.controller.ledger.history('reservation', id)).find(
      (e) => e.type === 'reservation.releasing',
    )!;
    expect(releasing.cause).toContain('preparation failed on spark-1: GPU still busy');
    expect(readRunnerMarkers(fleet.markerDir)).toEqual([]);
    const [l1] = await fleet.leases(id);
    expect(JSON.parse(l1!.evidenceJson!).prepare.failed).toContain('GPU still busy after stopping deckard');
    await fleet.waitHostPhase('spark-1', ['service']);
    expect(await fleet.bindingLeases()).toEqual([]);
  });
});
