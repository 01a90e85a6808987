import { afterEach, describe, expect, it } from 'vitest';
import { createViewsMemo } from '../../functions/views.ts';
import { adoptAll, makeTestLedger, type TestLedger, testClock } from '../../scripts/sim/ledger.ts';

/**
 * the fleet and queue views are computed once per ledger version, not once per
 * request — and a change, or the clock moving past the cache bound, is seen at once.
 */
describe('views per ledger version', () => {
  let tl: TestLedger | null = null;
  afterEach(() => {
    tl?.close();
    tl = null;
  });

  it('reuses one computation until the ledger changes or the clock moves past the bound', async () => {
    const clock = testClock();
    tl = await makeTestLedger({ clock, config: { hosts: [{ id: 'spark-2' }] } });
    const { ledger } = tl;
    await adoptAll(ledger);
    const memo = createViewsMemo(ledger);
    const buildViews = () => memo.get();
    const a = await buildViews();
    expect(await buildViews()).toBe(a);
    const r = await ledger.createReservation(
      {
        kind: 'manual',
        topology: 'single',
        repo: 'acme/iron',
        pr: 3,
        headSha: 'c'.repeat(40),
        requester: 't',
      },
      'test',
    );
    const b = await buildViews();
    expect(b).not.toBe(a);
    expect(b.queue.queued.map((q) => q.id)).toEqual([r.id]);
    expect(await buildViews()).toBe(b);
    // outbox bookkeeping alone is not a change of the views
    ledger.notify('outbox');
    expect(await buildViews()).toBe(b);
    // ages and heartbeat staleness follow the clock
    clock.advance(ledger.config.server.publicViewCacheMs);
    const c = await buildViews();
    expect(c).not.toBe(b);
    clock.advance(ledger.config.timings.offlineAfterS * 1000 + 1);
    const d = await buildViews();
    expect(d.fleet.hosts[0]!.state).toBe('offline');
  });
});
