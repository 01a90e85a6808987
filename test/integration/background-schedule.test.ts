import { afterEach, describe, expect, it } from 'vitest';
import * as t from '../../functions/ledger/schema.ts';
import { type Harness, startHarness } from '../../scripts/sim/fake-github/harness.ts';

/**
 * background CI (class 20) is queued only while the fleet would otherwise idle.
 * A due background slot is not queued while other work is queued; it stays due and fires once
 * when the queue is empty (a missed slot fires once, never once per missed slot).
 */

describe('background CI schedule (opportunistic)', () => {
  let h: Harness;
  afterEach(async () => {
    expect(h.gh.violations).toEqual([]);
    await h.close();
  });

  it('defers a due background slot while other work is queued, then queues it once', async () => {
    h = await startHarness({
      config: {
        schedules: [{ repo: 'acme/butter', cron: '*/5 * * * *', kind: 'background', suite: 'smoke' }],
      },
    });
    h.gh.addRepo('acme/butter', { headSha: '9'.repeat(40) });
    // no host is adopted (so other work stays queued): the harness overrides the fleet checks
    // (FLEET_OVERRIDE, docs/adr/0165-enable-is-a-gate.md)
    expect((await h.enable('acme/butter')).status).toBe(200);
    await h.until('schedule first seen', async () =>
      (await h.c.ledger.db.select().from(t.meta)).some((m) => m.key.startsWith('schedule:')),
    );
    // other work waits (no host is adopted here, so it stays queued)
    const other = await h.c.ledger.createReservation(
      { kind: 'merge', topology: 'single', repo: 'acme/butter', headSha: '8'.repeat(40), requester: 'push' },
      'test',
    );
    const markBefore = (await h.c.ledger.db.select().from(t.meta)).find((m) =>
      m.key.startsWith('schedule:'),
    )!.value;
    h.clock.advance(2 * 5 * 60_000 + 1000);
    // a sweep ran with the slot due and deferred it (its log line says so)
    await h.until('background deferred', () => h.logs.some((l) => l.includes('background CI deferred')));
    const markAfter = (await h.c.ledger.db.select().from(t.meta)).find((m) =>
      m.key.startsWith('schedule:'),
    )!.value;
    expect(markAfter).toBe(markBefore);
    expect((await h.c.ledger.db.select().from(t.reservations)).map((r) => r.kind)).toEqual(['merge']);

    await h.c.ledger.cancelReservation(other.id, 'test', 'no longer wanted');
    const bg = await h.until(
      'background queued',
      async () =>
        (await h.c.ledger.db.select().from(t.reservations)).find((r) => r.kind === 'background') ?? null,
    );
    expect(bg).toMatchObject({ kind: 'background', priority: 20, headSha: '9'.repeat(40), pr: null });
    // two missed slots fire once
    expect(
      (await h.c.ledger.db.select().from(t.reservations)).filter((r) => r.kind === 'background'),
    ).toHaveLength(1);
  });
});
