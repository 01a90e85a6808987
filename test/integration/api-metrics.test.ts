import { eq } from 'drizzle-orm';
import { afterEach, describe, expect, it } from 'vitest';
import * as t from '../../functions/ledger/schema.ts';
import {
  formatPrometheus,
  formatValue,
  histogramOf,
  LiveHistogram,
  PROM_CONTENT_TYPE,
} from '../../functions/metrics/prom-text.ts';
import { agentCleaned, agentPrepared, bringOnline, startApiController, until } from './cli-harness.ts';

/** Parses exposition text into `name{labels}` → value, checking every line is well-formed. */
function parseExposition(text: string): Map<string, number> {
  const out = new Map<string, number>();
  const types = new Map<string, string>();
  for (const line of text.trimEnd().split('\n')) {
    const meta = /^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*)$/.exec(line);
    if (meta) {
      if (meta[1] === 'TYPE') types.set(meta[2]!, meta[3]!);
      continue;
    }
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? (\S+)$/.exec(
      line,
    );
    if (!m) throw new Error(`malformed exposition line: ${line}`);
    const family = m[1]!.replace(/_(bucket|sum|count)$/, '');
    if (!types.has(m[1]!) && !types.has(family)) throw new Error(`sample before its TYPE: ${line}`);
    out.set(`${m[1]}${m[2] ?? ''}`, m[3] === '+Inf' ? Number.POSITIVE_INFINITY : Number(m[3]));
  }
  return out;
}

describe('Prometheus text formatter', () => {
  it('escapes label values and help text and spells special values', () => {
    const text = formatPrometheus([
      {
        name: 'x_total',
        help: 'line one\nback\\slash',
        type: 'counter',
        samples: [{ labels: { path: 'a"b\\c\nd' }, value: 3 }],
      },
    ]);
    expect(text).toBe(
      '# HELP x_total line one\\nback\\\\slash\n# TYPE x_total counter\nx_total{path="a\\"b\\\\c\\nd"} 3\n',
    );
    expect([formatValue(Number.NaN), formatValue(-Infinity), formatValue(0.25)]).toEqual([
      'NaN',
      '-Inf',
      '0.25',
    ]);
  });

  it('renders cumulative histogram buckets, sum and count', () => {
    const text = formatPrometheus([
      {
        name: 'w_seconds',
        help: 'w',
        type: 'histogram',
        buckets: [1, 5],
        series: [{ labels: { k: 'a' }, values: [0.5, 2, 9] }],
      },
    ]);
    const m = parseExposition(text);
    expect(m.get('w_seconds_bucket{k="a",le="1"}')).toBe(1);
    expect(m.get('w_seconds_bucket{k="a",le="5"}')).toBe(2);
    expect(m.get('w_seconds_bucket{k="a",le="+Inf"}')).toBe(3);
    expect(m.get('w_seconds_sum{k="a"}')).toBe(11.5);
    expect(m.get('w_seconds_count{k="a"}')).toBe(3);
    const live = new LiveHistogram([1, 5]);
    for (const v of [0.5, 2, 9]) live.observe(v);
    expect(
      formatPrometheus([
        {
          name: 'w_seconds',
          help: 'w',
          type: 'histogram',
          buckets: [1, 5],
          series: [{ labels: { k: 'a' }, live }],
        },
      ]),
    ).toBe(text);
    expect(histogramOf([], [1]).counts).toEqual([0]);
  });

  it('refuses invalid names, duplicate families and unsorted buckets', () => {
    expect(() => formatPrometheus([{ name: '1bad', help: '', type: 'gauge', samples: [] }])).toThrow(
      /metric name/,
    );
    expect(() =>
      formatPrometheus([
        { name: 'g', help: '', type: 'gauge', samples: [{ labels: { 'bad-label': 'x' }, value: 1 }] },
      ]),
    ).toThrow(/label name/);
    expect(() =>
      formatPrometheus([
        { name: 'g', help: '', type: 'gauge', samples: [] },
        { name: 'g', help: '', type: 'gauge', samples: [] },
      ]),
    ).toThrow(/twice/);
    expect(() =>
      formatPrometheus([{ name: 'h', help: '', type: 'histogram', buckets: [5, 1], series: [] }]),
    ).toThrow(/ascend/);
  });
});

describe('GET /metrics', () => {
  let ctl: Awaited<ReturnType<typeof startApiController>> | null = null;
  afterEach(async () => {
    await ctl?.c.close();
    ctl = null;
  });

  it('reports queue depth by class, waits, leases, host states, outbox backlog and runner startup', async () => {
    ctl = await startApiController();
    const { c, call, tokens } = ctl;
    await bringOnline(c.ledger);
    const a = (await call(tokens.dev, 'POST', '/api/v1/reservations', { host: 'spark-2' })).body.reservation
      .id;
    await call(tokens.dev, 'POST', '/api/v1/reservations', { host: 'spark-2' });
    await c.ledger.createReservation(
      {
        kind: 'benchmark',
        topology: 'pair',
        repo: 'acme/butter',
        headSha: 'a'.repeat(40),
        requester: 'cron',
      },
      'test',
    );
    await until('grant', async () => (await c.ledger.getReservation(undefined, a))?.status === 'allocated');
    await agentPrepared(c.ledger, a);
    await c.ledger.write(async (tx, now) => {
      await tx
        .update(t.leases)
        .set({ runnerStartedAt: now + 4000 })
        .where(eq(t.leases.reservationId, a));
      await tx.insert(t.outbox).values({
        kind: 'check-run',
        idempotencyKey: 'k1',
        payloadJson: '{}',
        nextAttemptAt: now,
        createdAt: now - 5000,
      });
    });
    await c.loop.runNow();
    const res = await fetch(`${c.url}/metrics`);
    expect(res.headers.get('content-type')).toBe(PROM_CONTENT_TYPE);
    const m = parseExposition(await res.text());
    expect(m.get('spark_queue_depth{kind="development"}')).toBe(1);
    expect(m.get('spark_queue_depth{kind="benchmark"}')).toBe(1);
    expect(m.get('spark_queue_depth{kind="merge"}')).toBe(0);
    expect(m.get('spark_reservations_active{kind="development"}')).toBe(1);
    expect(m.get('spark_leases{status="active"}')).toBe(1);
    // the second request waits for spark-2, so the host is promised onward: draining
    expect(m.get('spark_host_state{host="spark-2",state="draining"}')).toBe(1);
    expect(m.get('spark_host_state{host="spark-2",state="idle"}')).toBe(0);
    const spark1 = [...m].filter(([k]) => k.startsWith('spark_host_state{host="spark-1"'));
    expect(spark1.reduce((a, [, v]) => a + v, 0)).toBe(1);
    expect(m.get('spark_reservation_wait_seconds_count{kind="development"}')).toBe(1);
    // other modules (the GitHub part) may enqueue their own side effects: compare with the table
    const pending = (await c.ledger.db.select().from(t.outbox)).filter((o) => o.status === 'pending');
    expect(pending.length).toBeGreaterThanOrEqual(1);
    expect(m.get('spark_outbox_backlog')).toBe(pending.length);
    expect(m.get('spark_outbox_oldest_pending_seconds')).toBeGreaterThanOrEqual(5);
    expect(m.get('spark_admission_pass_seconds_count')).toBeGreaterThan(0);
    expect(m.get('spark_fleet_managed')).toBe(1);
    // every outbox status is a series, even before the first failure
    expect(m.get('spark_outbox_items{status="failed"}')).toBe(0);
    expect(m.get('spark_outbox_items{status="sent"}')).toBeGreaterThanOrEqual(0);
    expect(m.get('spark_webhook_deliveries_total{result="processed"}')).toBe(0);
    expect(
      m.get('spark_build_info{version="0.1.0",runtime="node",node="' + process.versions.node + '"}'),
    ).toBe(1);
    // the development lease on spark-2: when it runs out, and who holds it (by class only)
    const expiry = m.get(
      'spark_lease_expiry_timestamp_seconds{host="spark-2",kind="development",holder_class="api"}',
    );
    expect(expiry).toBeGreaterThan(Date.now() / 1000);
    expect(m.get('spark_home_service_up{host="spark-1",service="deckard"}')).toBe(1);
    expect(m.get('spark_home_service_health{host="spark-1",service="deckard",health="serving"}')).toBe(1);
    expect(m.get('spark_runner_startup_seconds_count{host="spark-2"}')).toBe(0);

    // runner startup is observed once, when the lease is released, with its host
    expect((await call(tokens.dev, 'POST', `/api/v1/reservations/${a}/release`, {})).status).toBe(200);
    await agentCleaned(c.ledger, a);
    const after = parseExposition(await (await fetch(`${c.url}/metrics`)).text());
    expect(after.get('spark_runner_startup_seconds_bucket{host="spark-2",le="2"}')).toBe(0);
    expect(after.get('spark_runner_startup_seconds_bucket{host="spark-2",le="5"}')).toBe(1);
    expect(
      after.get('spark_reservations_ended_total{kind="development",status="done",outcome="released"}'),
    ).toBe(1);

    // several processes on one ledger: ledger-wide and per-process series can be scraped apart
    const ledgerOnly = parseExposition(await (await fetch(`${c.url}/metrics?scope=ledger`)).text());
    expect(ledgerOnly.has('spark_queue_depth{kind="benchmark"}')).toBe(true);
    expect([...ledgerOnly.keys()].some((k) => k.startsWith('spark_admission_pass_seconds'))).toBe(false);
    const processOnly = parseExposition(await (await fetch(`${c.url}/metrics?scope=process`)).text());
    expect([...processOnly.keys()].some((k) => k.startsWith('spark_queue_depth'))).toBe(false);
    expect(processOnly.get('spark_github_api_requests_total')).toBeGreaterThanOrEqual(0);
    const bad = await fetch(`${c.url}/metrics?scope=everything`);
    expect(bad.status).toBe(400);
    expect(await bad.text()).toMatch(/scope must be one of all, ledger, process/);
  });
});
