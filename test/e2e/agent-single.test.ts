import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, expect, it, type TestContext } from 'vitest';
import { HELPER_THROUGH_SUDO } from '../../agent/config.ts';
import * as t from '../../functions/ledger/schema.ts';
import { type Fleet, type FleetOptions, startFleet } from '../../scripts/sim/doubles/fleet.ts';
import { fakeJitConfig, readRunnerMarkers, waitFor } from '../../scripts/sim/doubles/index.ts';

/**
 * Controller (this process, real HTTP + libSQL file) and agents (separate processes) on loopback.
 * GitHub is replaced by the fleet's JIT stand-in (scripts/sim/doubles/fleet-jit-stand-in.ts), which inserts
 * each granted lease's jit_handoffs row (the GitHub part's outbox does that in production; the
 * real path is test/e2e/handover-wakeups.test.ts).
 */

/**
 * A fleet of this test's own, closed when the test finishes. Fleets share nothing (temp dirs,
 * ports, runner users, ledgers), so the tests run concurrently: they mostly wait on agents.
 */
async function fleetFor(ctx: TestContext, opts: FleetOptions): Promise<Fleet> {
  const f = await startFleet(opts);
  ctx.onTestFinished(() => f.close());
  return f;
}

async function waitOnline(f: Fleet, ...ids: string[]) {
  for (const id of ids) {
    await waitFor(`${id} heartbeat`, async () => (await f.host(id)).lastHeartbeatAt != null);
  }
}

describe.concurrent('relay agent: single-host work', () => {
  it('runs a single reservation on spark-2: prepared, JIT runner by env, exit, clean, host idle', async (ctx) => {
    const fleet = await fleetFor(ctx, {
      hosts: [{ id: 'spark-2' }],
      runner: () => ({ exitCode: 0, sleepMs: 400, lastLines: ['smoke suite: 12 passed'] }),
      // r-1 gets a GitHub result; r-2 does not (its workflow_job webhook has not arrived)
      githubOutcome: (rid) => (rid === 'r-1' ? 'passed' : null),
      // this one runs the agent from source (`npm run agent`); the others run the shipped bundle
      agentFrom: 'source',
    });
    const agent = fleet.startAgent('spark-2');
    await waitOnline(fleet, 'spark-2');
    const id = await fleet.reserve();
    const done = await fleet.waitReservation(id, ['done', 'failed']);
    expect(done.status, agent.output()).toBe('done');
    expect(done.outcome).toBe('passed');
    const [lease] = await fleet.leases(id);
    expect(lease!.status).toBe('released');
    expect(lease!.preparedAt).not.toBeNull();
    expect(lease!.runnerStartedAt).not.toBeNull();
    expect(lease!.exitCode).toBe(0);
    expect(lease!.jobTokenHash).toMatch(/^[0-9a-f]{64}$/);
    const ev = JSON.parse(lease!.evidenceJson!);
    expect(ev.runner.lastLines).toContain('smoke suite: 12 passed');
    expect(ev.runner.lastLines.at(-1)).toContain('completed with result: Succeeded');

    const markers = readRunnerMarkers(fleet.markerDir);
    expect(markers).toHaveLength(1);
    expect(markers[0]).toMatchObject({
      hostId: 'spark-2',
      reservationId: id,
      fencingToken: lease!.fencingToken,
    });
    expect(markers[0]!.jobTokenPrefix).toBe('spk_job_');
    expect(markers[0]!.cwd).toBe(markers[0]!.workDir);
    // the work dir the job wrote into is gone after cleanup
    expect(existsSync(markers[0]!.workDir)).toBe(false);

    expect((await fleet.host('spark-2')).phase).toBe('idle');
    expect(await fleet.bindingLeases()).toEqual([]);
    expect(await fleet.eventTypes(id)).toEqual([
      'reservation.queued',
      'reservation.allocated',
      'reservation.preparing',
      'reservation.running',
      'reservation.releasing',
      'reservation.done',
    ]);

    // without a GitHub result a runner exit 0 ends with outcome "runner exited 0" (cross-part
    // contract step 6: outcome ?? 'runner exited <code>'; only passed/released count as done)
    // the JIT config and the job token never reach a log line, the agent's state file or a ledger row
    const jit = fakeJitConfig(markers[0]!.runnerName, fleet.markerDir, {
      exitCode: 0,
      sleepMs: 400,
      lastLines: ['smoke suite: 12 passed'],
    });
    expect(createHash('sha256').update(jit).digest('hex')).toBe(markers[0]!.jitSha256);
    const stateText = readFileSync(
      join(dirname(fleet.agentConfigPath('spark-2')), 'state', 'agent-state.json'),
      'utf8',
    );
    const ledgerText = JSON.stringify([
      await fleet.controller.ledger.db.select().from(t.events),
      await fleet.controller.ledger.db.select().from(t.leases),
      await fleet.controller.ledger.db.select().from(t.jitHandoffs),
    ]);
    for (const text of [agent.output(), stateText, ledgerText]) {
      expect(text).not.toContain(jit);
      expect(text).not.toContain('spk_job_');
    }

    const second = await fleet.reserve({ pr: 8 });
    const r2 = await fleet.waitReservation(second, ['done', 'failed']);
    // no job result from GitHub in this test: a clean runner exit ends the work done (neutral), not failed
    expect(r2.outcome).toBe('runner exited 0');
    expect(r2.status).toBe('done');
    expect(readRunnerMarkers(fleet.markerDir)).toHaveLength(2);
  });

  it('lends spark-1 when it is the only free host: Deckard drained, stopped, GPU verified, restored health-gated', async (ctx) => {
    const fleet = await fleetFor(ctx, {
      runner: (rid) => (rid === 'r-1' ? { exitCode: 0, sleepMs: 60_000 } : { exitCode: 0, sleepMs: 500 }),
      githubOutcome: () => 'passed',
      deckardReadyDelayMs: 800,
    });
    await fleet.deckard!.start();
    fleet.startAgent('spark-1');
    fleet.startAgent('spark-2');
    await fleet.waitHostPhase('spark-1', ['service']);
    await waitOnline(fleet, 'spark-2');

    const busy = await fleet.reserve();
    await fleet.waitReservation(busy, ['running']);
    expect((await fleet.leases(busy))[0]!.hostId).toBe('spark-2');

    const id = await fleet.reserve({ pr: 8 });
    const done = await fleet.waitReservation(id, ['done', 'failed']);
    expect(done.status, fleet.agents['spark-1']!.output()).toBe('done');
    const [lease] = await fleet.leases(id);
    expect(lease).toMatchObject({ hostId: 'spark-1', lend: true, status: 'released' });
    expect(JSON.parse(lease!.evidenceJson!).prepare.serviceLent).toBe(true);

    // no job ran while Deckard held the GPU
    const marker = readRunnerMarkers(fleet.markerDir).find((m) => m.reservationId === id)!;
    expect(marker.hostId).toBe('spark-1');
    expect(marker.gpuAtStart).toEqual([]);

    // restore is gated on the model-ready check, then spark-1 serves again
    await fleet.waitHostPhase('spark-1', ['service']);
    expect(fleet.deckard!.ctlLog()).toEqual(['start', 'drain', 'stop', 'start']);
    const hist = await fleet.controller.ledger.history('host', 'spark-1');
    const restoring = hist.find((e) => e.type === 'host.phase' && e.toState === 'restoring')!;
    const served = hist.filter((e) => e.type === 'host.phase' && e.toState === 'service').at(-1)!;
    expect(served.at - restoring.at).toBeGreaterThanOrEqual(800);
    expect(served.cause).toContain('model-ready health passed');
    expect(fleet.deckard!.isRunning()).toBe(true);

    // the long job on spark-2 was never touched
    expect((await fleet.reservation(busy)).status).toBe('running');
  });

  it('does not lend spark-1 when the GPU is still busy after stop (paused, not stopped)', async (ctx) => {
    const fleet = await fleetFor(ctx, { hosts: [{ id: 'spark-1', homeService: 'deckard' }] });
    await fleet.deckard!.start();
    fleet.deckard!.setStopMode('pause');
    fleet.startAgent('spark-1');
    await fleet.waitHostPhase('spark-1', ['service']);

    const id = await fleet.reserve();
    const r = await fleet.waitReservation(id, ['done', 'failed']);
    expect(r.status).toBe('failed');
    // the host refused before anything of the PR ran (ADR 0177)
    expect(r.outcome).toBe('preflight_failed');
    const [lease] = await fleet.leases(id);
    expect(lease!.preparedAt).toBeNull();
    expect(JSON.parse(lease!.evidenceJson!).prepare.failed).toMatch(
      /GPU still busy after stopping deckard: 1 process\(es\) \(pid \d+ deckard-server\); not lent/,
    );
    expect(await fleet.eventTypes(id)).not.toContain('reservation.preparing');
    expect(readRunnerMarkers(fleet.markerDir)).toEqual([]);
    // Deckard is resumed and spark-1 serves again
    await fleet.waitHostPhase('spark-1', ['service']);
    expect(fleet.deckard!.ctlLog().slice(-3)).toEqual(['drain', 'stop', 'start']);
    expect(await fleet.bindingLeases()).toEqual([]);
  });

  it('quarantines spark-1 with an alert when Deckard cannot be restored within the retry budget', async (ctx) => {
    const fleet = await fleetFor(ctx, {
      hosts: [{ id: 'spark-1', homeService: 'deckard' }],
      runner: () => ({ exitCode: 0, sleepMs: 300 }),
      githubOutcome: () => 'passed',
      timings: { restoreRetries: 1, restoreBackoffS: 1, restoreHealthTimeoutS: 4 },
    });
    await fleet.deckard!.start();
    fleet.startAgent('spark-1');
    await fleet.waitHostPhase('spark-1', ['service']);
    const id = await fleet.reserve();
    await fleet.waitReservation(id, ['running', 'releasing', 'done']);
    fleet.deckard!.breakReady('model load failed: CUDA error: out of memory');
    expect((await fleet.waitReservation(id, ['done', 'failed'])).status).toBe('done');

    await fleet.waitHostPhase('spark-1', ['quarantined'], 30_000);
    const host = await fleet.host('spark-1');
    expect(host.restoreAttempts).toBe(2);
    expect(host.note).toContain('model load failed: CUDA error: out of memory');
    const types = (await fleet.controller.ledger.history('host', 'spark-1')).map((e) => e.type);
    expect(types).toContain('host.restore_retry');
    expect(types).toContain('alert.restore_failed');

    // spark-1 stays out of CI: new work waits
    const next = await fleet.reserve({ pr: 9 });
    await fleet.controller.loop.runNow();
    expect((await fleet.reservation(next)).status).toBe('queued');
    expect(await fleet.bindingLeases()).toEqual([]);
  });

  it('runs a reservation with the sandbox helper called through sudo, as on a host (docs/agent.md)', async (ctx) => {
    const fleet = await fleetFor(ctx, {
      hosts: [{ id: 'spark-2' }],
      runner: () => ({ exitCode: 0, sleepMs: 300 }),
      githubOutcome: () => 'passed',
      helperThroughSudo: true,
    });
    const user = fleet.runnerUsers['spark-2'];
    if (!user) throw new Error('the fleet made no runner user: run the agent tests as root (CI does)');
    const cfg = JSON.parse(readFileSync(fleet.agentConfigPath('spark-2'), 'utf8'));
    expect(cfg.runner.helper.slice(0, HELPER_THROUGH_SUDO.length)).toEqual([...HELPER_THROUGH_SUDO]);
    const agent = fleet.startAgent('spark-2');
    await waitOnline(fleet, 'spark-2');
    const id = await fleet.reserve();
    const done = await fleet.waitReservation(id, ['done', 'failed']);
    // every step (prepare, run, remove) went through sudo: a refusal fails the lease
    expect(done.status, agent.output()).toBe('done');
    const [marker] = readRunnerMarkers(fleet.markerDir);
    expect(marker!.uid).toBe(user.uid);
    expect(existsSync(marker!.workDir)).toBe(false);
  });
});
