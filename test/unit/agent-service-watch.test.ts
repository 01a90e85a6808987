import { describe, expect, it } from 'vitest';
import { ControllerRejected, ControllerUnreachable } from '../../agent/client.ts';
import type { AgentLogger } from '../../agent/log.ts';
import { reportServiceDown, ServiceWatch } from '../../agent/loops/service-watch.ts';
import type { HealthResult } from '../../agent/service.ts';
import type { Report } from '../../core/protocol/agent.ts';

/**
 * The home service's watch outside leases (ADR 0175): which probes make a `service_down` report
 * due, when, and that each stop is reported once.
 */

const serving: HealthResult = { ok: true, status: 200, detail: 'HTTP 200 {"status":"ready"}' };
const refused: HealthResult = {
  ok: false,
  status: null,
  refused: true,
  detail: 'health check unreachable: ECONNREFUSED',
};
const broken: HealthResult = { ok: false, status: 503, detail: 'HTTP 503 model load failed' };
const silent: HealthResult = {
  ok: false,
  status: null,
  refused: false,
  detail: 'health check unreachable: no answer within 2000 ms',
};

const quiet: AgentLogger = { debug() {}, info() {}, warn() {}, error() {} } as unknown as AgentLogger;

describe('ServiceWatch', () => {
  it('reports a service whose process is gone at the first probe that finds nothing listening', () => {
    const w = new ServiceWatch('deckard', 60_000);
    w.observe({ at: 0, probe: serving });
    expect(w.due(0)).toBeNull();
    w.observe({ at: 1000, probe: refused });
    expect(w.due(1000)).toBe(
      'deckard is not running: nothing answers its model-ready health check (connection refused)',
    );
  });

  it('reports a failing model-ready check only once it has failed for unhealthyAfterMs', () => {
    const w = new ServiceWatch('deckard', 30_000);
    w.observe({ at: 0, probe: serving });
    w.observe({ at: 10_000, probe: broken });
    expect(w.due(10_000)).toBeNull();
    w.observe({ at: 39_000, probe: silent });
    expect(w.due(39_000)).toBeNull();
    w.observe({ at: 40_000, probe: broken });
    expect(w.due(40_000)).toBe(
      'deckard model-ready health check failing for 30 s: HTTP 503 model load failed',
    );
    // a timeout is a failing check, not a gone process
    const t = new ServiceWatch('deckard', 30_000);
    t.observe({ at: 0, probe: serving });
    t.observe({ at: 1, probe: silent });
    expect(t.due(1)).toBeNull();
  });

  it('a check that recovers within the bound is not reported, and the bound starts again', () => {
    const w = new ServiceWatch('deckard', 30_000);
    w.observe({ at: 0, probe: serving });
    w.observe({ at: 10_000, probe: broken });
    w.observe({ at: 20_000, probe: serving });
    w.observe({ at: 35_000, probe: broken });
    expect(w.due(50_000)).toBeNull();
    expect(w.due(65_000)).not.toBeNull();
  });

  it('stays unarmed until it saw the service serve, unless the controller says it serves', () => {
    const w = new ServiceWatch('deckard', 30_000);
    w.observe({ at: 0, probe: refused });
    expect(w.due(0)).toBeNull();
    expect(w.state).toBe('unarmed');
    w.expectServing = true;
    w.observe({ at: 1, probe: refused });
    expect(w.due(1)).not.toBeNull();
  });

  it('never watches while a lease or a restore owns the service, and forgets what it saw before', () => {
    const w = new ServiceWatch('deckard', 30_000);
    w.observe({ at: 0, probe: serving });
    w.observe({ at: 1, probe: null });
    expect(w.state).toBe('unarmed');
    // after the lease: what the restore left is its own business until the service serves again
    w.observe({ at: 2, probe: refused });
    expect(w.due(2)).toBeNull();
    w.observe({ at: 3, probe: serving });
    w.observe({ at: 4, probe: broken });
    w.observe({ at: 5, probe: null });
    expect(w.due(100_000)).toBeNull();
  });

  it('once reported, stays quiet through every retry until the service serves again', () => {
    const w = new ServiceWatch('deckard', 30_000);
    w.observe({ at: 0, probe: serving });
    w.observe({ at: 1, probe: refused });
    expect(w.due(1)).not.toBeNull();
    w.reported();
    for (const [at, probe] of [
      [2, null],
      [3, broken],
      [4, refused],
      [100_000, broken],
    ] as const) {
      w.observe({ at, probe });
      expect(w.due(at)).toBeNull();
    }
    w.expectServing = true;
    w.observe({ at: 100_001, probe: refused });
    expect(w.due(100_001)).toBeNull();
    w.observe({ at: 100_002, probe: serving });
    w.observe({ at: 100_003, probe: refused });
    expect(w.due(100_003)).not.toBeNull();
  });
});

describe('reportServiceDown', () => {
  function down() {
    const w = new ServiceWatch('deckard', 30_000);
    w.observe({ at: 0, probe: serving });
    w.observe({ at: 1, probe: refused });
    return w;
  }

  it('sends one report with the host fencing token and goes quiet', async () => {
    const w = down();
    const sent: Report[] = [];
    const send = async (r: Report) => {
      sent.push(r);
    };
    await reportServiceDown({ watch: w, now: 1, fencingToken: 7, send, log: quiet });
    await reportServiceDown({ watch: w, now: 2, fencingToken: 7, send, log: quiet });
    expect(sent).toEqual([
      {
        type: 'service_down',
        fencingToken: 7,
        reason: 'deckard is not running: nothing answers its model-ready health check (connection refused)',
      },
    ]);
  });

  it('repeats a report the controller did not get; a refusal is final for this stop', async () => {
    const w = down();
    let calls = 0;
    await reportServiceDown({
      watch: w,
      now: 1,
      fencingToken: 7,
      send: async () => {
        calls++;
        throw new ControllerUnreachable('connect ECONNREFUSED');
      },
      log: quiet,
    });
    expect(w.due(2)).not.toBeNull();
    await reportServiceDown({
      watch: w,
      now: 2,
      fencingToken: 7,
      send: async () => {
        calls++;
        throw new ControllerRejected(409, 'lease_bound', 'spark-1 is bound to lease l-spark-1-8');
      },
      log: quiet,
    });
    expect(calls).toBe(2);
    expect(w.state).toBe('reported');
    expect(w.due(3)).toBeNull();
  });
});
