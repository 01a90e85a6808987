import { eq } from 'drizzle-orm';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { REDELIVERY_INTERVAL_MS, sweepMissedDeliveries } from '../../functions/github/redeliver.ts';
import { githubService } from '../../functions/github/service.ts';
import * as t from '../../functions/ledger/schema.ts';
import { example, type Harness, startHarness } from '../../scripts/sim/fake-github/harness.ts';
import type { HookDelivery } from '../../scripts/sim/fake-github/server.ts';

/**
 * Deliveries GitHub failed to make while the controller was down (ADR 0091), against the fake
 * GitHub's App delivery log: which GUIDs the sweep asks GitHub to redeliver, and that it asks once.
 */
describe('redelivery of webhooks GitHub could not deliver', () => {
  let h: Harness;
  beforeEach(async () => {
    h = await startHarness();
    // the controller's own sweep at start read an empty log; later ticks wait 10 min
    await h.until('the start sweep', () => h.gh.calls('GET', /^\/app\/hook\/deliveries/).length > 0);
  });
  afterEach(async () => {
    expect(h.gh.violations).toEqual([]);
    await h.close();
  });

  const body = JSON.stringify(example('pull_request', 'labeled'));
  const log = (guid: string, statusCode: number, agoMin: number, redelivery = false): HookDelivery => {
    const d = h.gh.recordHookDelivery({
      guid,
      event: 'pull_request',
      action: 'labeled',
      redelivery,
      statusCode,
      body,
    });
    d.deliveredAt = new Date(h.clock() - agoMin * 60_000).toISOString();
    return d;
  };
  const attempts = () => h.gh.calls('POST', /^\/app\/hook\/deliveries\/\d+\/attempts$/);

  it('asks once for each failed GUID in the last hour that is not in the inbox; GitHub sends it again with its GUID', async () => {
    // older than the look-back (1 h): left to an operator
    log('g-lost-long-ago', 0, 120);
    const d = log('g-oldest-failed', 502, 50);
    // 150 good deliveries push the oldest failure onto the second page (per_page 100, cursor)
    for (let i = 0; i < 150; i++) log(`g-ok-${i}`, 202, 40);
    log('g-fixed', 0, 30);
    log('g-fixed', 202, 29, true); // someone redelivered it already
    log('g-in-inbox', 0, 20);
    expect((await h.deliver('pull_request', JSON.parse(body), { id: 'g-in-inbox' })).status).toBe(202);
    const never = log('g-never-arrives', 0, 15);
    const a = log('g-failed', 0, 10);
    // GitHub sends a requested redelivery to the controller (same GUID); one of them gets lost again
    h.gh.redeliver = async (x) => {
      if (x.guid === never.guid) return;
      const res = await h.deliver(x.event, JSON.parse(x.body), { id: x.guid });
      h.gh.recordHookDelivery({ ...x, redelivery: true, statusCode: res.status });
    };

    const svc = githubService(h.c.ctx);
    const first = await sweepMissedDeliveries(svc, { force: true });
    // oldest first, so the inbox sees them in GitHub's order
    expect(first).toEqual({ listed: 156, requested: [d.guid, never.guid, a.guid], failed: [] });
    expect(attempts().map((c) => c.path)).toEqual(
      [d, never, a].map((x) => `/app/hook/deliveries/${x.id}/attempts`),
    );
    expect(attempts().every((c) => c.auth === 'app')).toBe(true);
    expect(h.gh.calls('GET', /^\/app\/hook\/deliveries/).length).toBeGreaterThanOrEqual(3);
    const inbox = await h.until('redelivered deliveries processed', async () => {
      const rows = await h.c.ledger.db.select().from(t.webhookDeliveries);
      const ours = rows.filter((r) => r.deliveryId === d.guid || r.deliveryId === a.guid);
      return ours.length === 2 && ours.every((r) => r.state === 'done') ? rows : null;
    });
    expect(inbox.map((r) => r.deliveryId).sort()).toEqual([a.guid, d.guid, 'g-in-inbox'].sort());
    const events = await h.c.ledger.db
      .select()
      .from(t.events)
      .where(eq(t.events.type, 'webhook.redelivery_requested'));
    expect(events.map((e) => e.subjectId)).toEqual([d.guid, never.guid, a.guid]);
    expect(events[0]!.cause).toMatch(
      /^GitHub could not deliver pull_request\.labeled at .* \(HTTP 502\); redelivery requested$/,
    );
    const metrics = await (await fetch(`${h.c.url}/metrics`)).text();
    expect(metrics).toContain('spark_webhook_redeliveries_total{result="requested"} 3');
    expect(metrics).toContain('spark_webhook_redeliveries_total{result="failed"} 0');

    // the next sweep asks for nothing: each GUID is redelivered once, even the one lost again
    h.clock.advance(REDELIVERY_INTERVAL_MS);
    expect(await sweepMissedDeliveries(svc)).toMatchObject({ requested: [], failed: [] });
    expect(attempts()).toHaveLength(3);
  });

  it('a refused redelivery request is counted and asked again by the next sweep; the sweep waits 10 min between runs', async () => {
    const a = log('g-failed', 0, 5);
    h.gh.fail({ method: 'POST', path: /\/attempts$/, status: 500 });
    const svc = githubService(h.c.ctx);
    expect(await sweepMissedDeliveries(svc, { force: true })).toMatchObject({
      requested: [],
      failed: [a.guid],
    });
    // not due yet: the mark says a sweep just ran
    expect(await sweepMissedDeliveries(svc)).toBeNull();
    // 10 min later the controller's timer sweeps again and asks once more
    h.clock.advance(REDELIVERY_INTERVAL_MS);
    await h.until('the timer sweep', () => attempts().some((c) => c.status === 202));
    expect(attempts().map((c) => [c.path, c.status])).toEqual([
      [`/app/hook/deliveries/${a.id}/attempts`, 500],
      [`/app/hook/deliveries/${a.id}/attempts`, 202],
    ]);
    const metrics = await h.until('the counters', async () => {
      const text = await (await fetch(`${h.c.url}/metrics`)).text();
      return text.includes('spark_webhook_redeliveries_total{result="requested"} 1') ? text : null;
    });
    expect(metrics).toContain('spark_webhook_redeliveries_total{result="failed"} 1');
    expect(metrics).toContain('spark_webhook_redeliveries_total{result="requested"} 1');
  });
});
