import { readFileSync, writeFileSync } from 'node:fs';
import { describe, expect, it, type TestContext } from 'vitest';
import { collectLedgerMetrics } from '../../functions/metrics/collect.ts';
import { formatPrometheus } from '../../functions/metrics/prom-text.ts';
import { type Fleet, type FleetOptions, startFleet } from '../../scripts/sim/doubles/fleet.ts';
import { waitFor } from '../../scripts/sim/doubles/index.ts';

/**
 * Hosts that heal (ADR 0175), end to end: the controller (real HTTP, libSQL file) and the shipped
 * agent bundle as its own process, with the fake Deckard on the fake GPU. Deckard stops by itself
 * outside any lease — its process killed, or its model-ready check failing — and the agent reports
 * it with the first heartbeat that sees it; the host goes `restoring` (never granted), the agent
 * restarts it through the restore path, and it serves again only once its model-ready check passes.
 * One that cannot come back ends quarantined with the reason after the bounded retries, the alert
 * series say so, and work that needs the host is not admitted.
 */

async function fleetFor(ctx: TestContext, opts: FleetOptions): Promise<Fleet> {
  const f = await startFleet(opts);
  ctx.onTestFinished(() => f.close());
  return f;
}

/**
 * The ledger-wide `/metrics` samples (what `GET /metrics?scope=ledger` serves; the fleet mounts no
 * metrics route) whose line starts with `prefix`.
 */
async function metricLines(f: Fleet, prefix: string): Promise<string[]> {
  const text = formatPrometheus(
    await collectLedgerMetrics(f.controller.ledger, f.controller.ctx.services.views),
  );
  return text.split('\n').filter((l) => l.startsWith(prefix));
}

async function health(f: Fleet): Promise<number | null> {
  try {
    return (await fetch(f.deckard!.healthUrl, { signal: AbortSignal.timeout(2000) })).status;
  } catch {
    return null;
  }
}

describe.concurrent('relay agent: Deckard heals outside leases', () => {
  it('a Deckard killed outside a lease is reported with the next heartbeat, restarted, and advertised only after model-ready', async (ctx) => {
    const fleet = await fleetFor(ctx, {
      hosts: [{ id: 'spark-1', homeService: 'deckard' }],
      deckardReadyDelayMs: 1500,
      runner: () => ({ exitCode: 0, sleepMs: 1500 }),
      githubOutcome: () => 'passed',
    });
    await fleet.deckard!.start();
    const agent = fleet.startAgent('spark-1');
    await fleet.waitHostPhase('spark-1', ['service']);
    const before = (await fleet.controller.ledger.history('host', 'spark-1')).length;
    const oldPid = fleet.deckard!.pid();

    const killedAt = Date.now();
    fleet.deckard!.kill();

    // sample the host while it heals: it is never advertised while the model is not ready
    const samples: { phase: string; health: number | null }[] = [];
    await waitFor(
      'restored and serving again',
      async () => {
        const phase = (await fleet.host('spark-1')).phase;
        samples.push({ phase, health: await health(fleet) });
        return phase === 'service' && samples.some((s) => s.phase === 'restoring');
      },
      30_000,
      50,
    );
    const healing = samples.slice(samples.findIndex((s) => s.phase === 'restoring'));
    expect(
      healing.filter((s) => s.phase === 'service' && s.health !== 200),
      agent.output(),
    ).toEqual([]);
    expect(healing.some((s) => s.phase === 'restoring' && s.health === 503)).toBe(true);

    const after = (await fleet.controller.ledger.history('host', 'spark-1')).slice(before);
    // the report came with the first heartbeat that saw Deckard gone: its facts never made the
    // host idle (a heartbeat first would have), and the stop is recorded once
    expect(after.map((e) => [e.type, e.fromState, e.toState])).toEqual([
      ['host.phase', 'service', 'restoring'],
      ['alert.service_down', null, null],
      ['host.phase', 'restoring', 'service'],
    ]);
    expect(after[1]!.cause).toBe(
      'deckard on spark-1 stopped outside any lease (deckard is not running: nothing answers its model-ready health check (connection refused)); restarting it under the restore policy',
    );
    expect(after[2]!.cause).toContain('model-ready health passed');
    ctx.annotate(
      `Deckard killed → spark-1 restoring: ${after[0]!.at - killedAt} ms; → serving again: ${after[2]!.at - killedAt} ms (heartbeat 1000 ms, model load 1500 ms)`,
    );
    // restarted by the agent's restore (a crashed service is only started, never stopped first)
    expect(fleet.deckard!.pid()).not.toBe(oldPid);
    expect(fleet.deckard!.isRunning()).toBe(true);
    expect(fleet.deckard!.ctlLog()).toEqual(['start', 'start']);
    expect(await metricLines(fleet, 'spark_ledger_events_total{type="alert.service_down"}')).toEqual([
      'spark_ledger_events_total{type="alert.service_down"} 1',
    ]);
    // the next heartbeat's facts say it serves
    await waitFor('spark_home_service_up 1', async () =>
      (await metricLines(fleet, 'spark_home_service_up{')).includes(
        'spark_home_service_up{host="spark-1",service="deckard"} 1',
      ),
    );

    // a lease lends it afterwards: stopped by the lease, never reported or restarted under it
    const id = await fleet.reserve();
    expect((await fleet.waitReservation(id, ['done', 'failed'])).status).toBe('done');
    await fleet.waitHostPhase('spark-1', ['service']);
    expect(fleet.deckard!.ctlLog()).toEqual(['start', 'start', 'drain', 'stop', 'start']);
    const types = (await fleet.controller.ledger.history('host', 'spark-1')).map((e) => e.type);
    expect(types.filter((t) => t === 'alert.service_down')).toHaveLength(1);
  });

  it('a Deckard that cannot come back is quarantined with the reason after the bounded retries; the alert series show it and work that needs spark-1 waits', async (ctx) => {
    const fleet = await fleetFor(ctx, {
      hosts: [{ id: 'spark-1', homeService: 'deckard' }, { id: 'spark-2' }],
      timings: { restoreRetries: 1, restoreBackoffS: 1, restoreHealthTimeoutS: 3 },
    });
    await fleet.deckard!.start();
    fleet.startAgent('spark-1');
    fleet.startAgent('spark-2');
    await fleet.waitHostPhase('spark-1', ['service']);
    await waitFor('spark-2 heartbeat', async () => (await fleet.host('spark-2')).lastHeartbeatAt != null);

    // it falls, and every start loads a model that fails
    fleet.deckard!.breakReady('model load failed: CUDA error: out of memory');
    fleet.deckard!.kill();
    await fleet.waitHostPhase('spark-1', ['quarantined'], 60_000);

    const host = await fleet.host('spark-1');
    expect(host.restoreAttempts).toBe(2);
    expect(host.note).toMatch(
      /^deckard restore failed 2 times: deckard model-ready check did not pass within 3 s: HTTP 503 model load failed: CUDA error: out of memory$/,
    );
    const types = (await fleet.controller.ledger.history('host', 'spark-1')).map((e) => e.type);
    expect(types.filter((t) => t === 'alert.service_down')).toHaveLength(1);
    expect(types.filter((t) => t === 'host.restore_retry')).toHaveLength(1);
    expect(types.filter((t) => t === 'alert.restore_failed')).toHaveLength(1);
    // each retry really restarted it: the second start found it answering, not ready, and stopped it
    expect(fleet.deckard!.ctlLog()).toEqual(['start', 'start', 'stop', 'start']);

    // the series SparkDeckardRestoreFailed reads (functions/metrics/alert-rules.yml)
    expect(await metricLines(fleet, 'spark_home_service_restore_failures{')).toEqual([
      'spark_home_service_restore_failures{host="spark-1",service="deckard"} 2',
    ]);
    expect(await metricLines(fleet, 'spark_host_state{host="spark-1",state="quarantined"}')).toEqual([
      'spark_host_state{host="spark-1",state="quarantined"} 1',
    ]);
    for (const type of ['alert.service_down', 'alert.restore_failed'])
      expect(await metricLines(fleet, `spark_ledger_events_total{type="${type}"}`)).toEqual([
        `spark_ledger_events_total{type="${type}"} 1`,
      ]);

    // work that needs spark-1 is not admitted; work that fits spark-2 still is
    const targeted = await fleet.reserve({ targetHost: 'spark-1', pr: 11 });
    const pair = await fleet.reserve({ topology: 'pair', pr: 12 });
    const single = await fleet.reserve({ pr: 13 });
    expect((await fleet.waitReservation(single, ['done', 'failed'])).status).toBe('done');
    expect((await fleet.leases(single))[0]!.hostId).toBe('spark-2');
    await fleet.controller.loop.runNow();
    expect(await fleet.reservation(targeted)).toMatchObject({
      status: 'queued',
      waitCode: 'target-unavailable',
      reason: 'waiting for spark-1 quarantined until an operator clears it',
    });
    expect(await fleet.reservation(pair)).toMatchObject({ status: 'queued', waitCode: 'pool-too-small' });
    // the agent touches nothing while the host is held
    const starts = fleet.deckard!.ctlLog().length;
    await new Promise((r) => setTimeout(r, 2500));
    expect(fleet.deckard!.ctlLog()).toHaveLength(starts);
  });

  it('a Deckard whose model-ready check keeps failing is reported after unhealthyAfterS, stopped and started again', async (ctx) => {
    const fleet = await fleetFor(ctx, { hosts: [{ id: 'spark-1', homeService: 'deckard' }] });
    // the agent's own bound for a failing check (default 60 s)
    const path = fleet.agentConfigPath('spark-1');
    const cfg = JSON.parse(readFileSync(path, 'utf8'));
    cfg.service.unhealthyAfterS = 2;
    writeFileSync(path, JSON.stringify(cfg), { mode: 0o600 });
    await fleet.deckard!.start();
    fleet.startAgent('spark-1');
    await fleet.waitHostPhase('spark-1', ['service']);
    const pid = fleet.deckard!.pid();

    fleet.deckard!.breakReady('model weights corrupted');
    // its heartbeat says so at once (the host is not lent as serving meanwhile: idle, GPU busy)
    await fleet.waitHostPhase('spark-1', ['idle']);
    await fleet.waitHostPhase('spark-1', ['restoring'], 30_000);
    const down = (await fleet.controller.ledger.history('host', 'spark-1')).find(
      (e) => e.type === 'alert.service_down',
    )!;
    expect(down.cause).toMatch(
      /^deckard on spark-1 stopped outside any lease \(deckard model-ready health check failing for \d+ s: HTTP 503 model weights corrupted\); restarting it under the restore policy$/,
    );
    // the restore finds it answering but not ready, and stops it before the start; the next load works
    await waitFor('the hung Deckard stopped', () => fleet.deckard!.ctlLog().includes('stop'), 30_000);
    fleet.deckard!.fixReady();
    await fleet.waitHostPhase('spark-1', ['service'], 30_000);
    // the hung process was stopped before the start: a new one serves
    expect(fleet.deckard!.ctlLog()).toEqual(['start', 'stop', 'start']);
    expect(fleet.deckard!.pid()).not.toBe(pid);
  });
});
