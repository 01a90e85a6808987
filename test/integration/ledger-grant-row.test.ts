import { and, asc, eq, gt } from 'drizzle-orm';
import { afterEach, describe, expect, it } from 'vitest';
import { leaseGrantsOf } from '../../core/events.ts';
import type { Ledger } from '../../functions/ledger/ledger.ts';
import * as t from '../../functions/ledger/schema.ts';
import { adoptAll, makeTestLedger, type TestLedger, testClock } from '../../scripts/sim/ledger.ts';
import { replayGrants } from '../helpers/load/verify.ts';

/**
 * ADR 0100: a grant is one history row — `reservation.allocated` listing every
 * lease it issued — where a pair wrote three. A lease's own history still starts with its grant,
 * the counters and the GitHub hook read the same row, and a ledger written before (with one
 * `lease.granted` row per host) still reads the same.
 */
describe('one history row per grant', () => {
  let tl: TestLedger | null = null;
  afterEach(() => {
    tl?.close();
    tl = null;
  });

  const eventsAfter = (ledger: Ledger, id: number) =>
    ledger.db.select().from(t.events).where(gt(t.events.id, id)).orderBy(asc(t.events.id));
  const lastEventId = async (ledger: Ledger) =>
    (await ledger.db.select({ id: t.events.id }).from(t.events).orderBy(asc(t.events.id))).at(-1)?.id ?? 0;

  it('a pair grant appends one row that lists both leases as the lease rows hold them', async () => {
    const clock = testClock();
    tl = await makeTestLedger({ clock });
    const { ledger } = tl;
    await adoptAll(ledger);
    const r = await ledger.createReservation(
      { kind: 'development', topology: 'pair', requester: 'api:alice' },
      'api:alice',
    );
    clock.advance(30_000);
    const before = await lastEventId(ledger);
    const pass = await ledger.admissionPass('test');
    expect(pass.granted.map((g) => g.reservationId)).toEqual([r.id]);

    const rows = await eventsAfter(ledger, before);
    expect(rows.map((e) => [e.type, e.subjectId])).toEqual([['reservation.allocated', r.id]]);
    const leases = await ledger.leasesOf(undefined, r.id);
    expect(leases).toHaveLength(2);
    const grants = leaseGrantsOf(rows[0]!);
    expect(grants.map((g) => g.leaseId).sort()).toEqual(leases.map((l) => l.id).sort());
    for (const l of leases) {
      const g = grants.find((x) => x.leaseId === l.id)!;
      expect(g).toEqual({
        leaseId: l.id,
        reservationId: r.id,
        hostId: l.hostId,
        fencingToken: l.fencingToken,
        lend: l.lend,
        hostFrom: l.hostId === 'spark-1' ? 'service' : 'idle',
      });
    }
    // each host's move to `allocated` is in the same row's words
    expect(rows[0]!.cause).toBe(
      'granted spark-2 (idle → allocated) + spark-1 (service → allocated, lending its home service)',
    );

    // the wait histogram is fed from the row (30 s waited), as before from the reservation row
    const wait = await ledger.db
      .select()
      .from(t.metricCounters)
      .where(eq(t.metricCounters.name, 'spark_reservation_wait_seconds_sum'));
    expect(wait).toEqual([expect.objectContaining({ series: 'kind="development"', value: 30 })]);
  });

  it("a lease's history starts with the grant that issued it", async () => {
    const clock = testClock();
    tl = await makeTestLedger({ clock });
    const { ledger } = tl;
    await adoptAll(ledger);
    const r = await ledger.createReservation(
      {
        kind: 'manual',
        topology: 'single',
        repo: 'acme/iron',
        pr: 1,
        headSha: 'a'.repeat(40),
        requester: 't',
      },
      'test',
    );
    const grantedAt = clock();
    const lease = (await ledger.admissionPass('test')).granted[0]!.leases[0]!;
    clock.advance(5_000);
    await ledger.beginRelease(r.id, 'passed', 'job finished', 'test');
    await ledger.confirmReleased(lease.hostId, lease.fencingToken, 'test');

    const hist = await ledger.history('lease', lease.leaseId);
    expect(hist[0]).toMatchObject({ type: 'reservation.allocated', subjectId: r.id, at: grantedAt });
    expect(hist.map((e) => e.type)).toEqual(['reservation.allocated', 'lease.releasing', 'lease.released']);
    // another lease of the same host is granted by another row, not this one
    const r2 = await ledger.createReservation(
      {
        kind: 'manual',
        topology: 'single',
        repo: 'acme/iron',
        pr: 2,
        headSha: 'b'.repeat(40),
        requester: 't',
      },
      'test',
    );
    const lease2 = (await ledger.admissionPass('test')).granted[0]!.leases[0]!;
    expect(lease2.hostId).toBe(lease.hostId);
    expect((await ledger.history('lease', lease2.leaseId)).map((e) => [e.type, e.subjectId])).toEqual([
      ['reservation.allocated', r2.id],
    ]);
    expect(await ledger.history('lease', 'l-nowhere-1')).toEqual([]);
  });

  it('the GitHub hook queues each lease’s runner registration from the one row', async () => {
    const hooked: string[] = [];
    tl = await makeTestLedger({
      hooks: [
        async (_tx, ev) => {
          hooked.push(ev.type);
        },
      ],
    });
    const { ledger } = tl;
    ledger.recordGitHubEffectsFromNowOn();
    await adoptAll(ledger);
    const r = await ledger.createReservation(
      { kind: 'manual', topology: 'pair', repo: 'acme/iron', pr: 3, headSha: 'c'.repeat(40), requester: 't' },
      'test',
    );
    // what the GitHub part stores on work it created (readMeta): only such work gets runners
    await ledger.db
      .update(t.reservations)
      .set({ metaJson: JSON.stringify({ trigger: 'comment', installationId: 1 }) })
      .where(eq(t.reservations.id, r.id));
    const granted = (await ledger.admissionPass('test')).granted[0]!;
    expect(hooked.filter((x) => x === 'reservation.allocated')).toHaveLength(1);
    const jit = await ledger.db
      .select()
      .from(t.outbox)
      .where(and(eq(t.outbox.reservationId, r.id), eq(t.outbox.kind, 'generate-jitconfig')));
    expect(jit.map((o) => o.idempotencyKey).sort()).toEqual(
      granted.leases.map((l) => `jit:${l.leaseId}:a0`).sort(),
    );
    const dispatch = await ledger.db
      .select()
      .from(t.outbox)
      .where(and(eq(t.outbox.reservationId, r.id), eq(t.outbox.kind, 'dispatch')));
    expect(dispatch).toHaveLength(1);
  });

  it('a ledger written before (one `lease.granted` row per host) still reads the same', async () => {
    tl = await makeTestLedger();
    const { ledger } = tl;
    await adoptAll(ledger);
    const r = await ledger.createReservation(
      {
        kind: 'manual',
        topology: 'single',
        repo: 'acme/iron',
        pr: 1,
        headSha: 'a'.repeat(40),
        requester: 't',
      },
      'test',
    );
    const lease = (await ledger.admissionPass('test')).granted[0]!.leases[0]!;
    // rewrite this grant's history into the form the previous version wrote: the reservation's
    // row without leases, and the lease's own `lease.granted` row
    const [row] = await ledger.db
      .select()
      .from(t.events)
      .where(and(eq(t.events.subjectId, r.id), eq(t.events.type, 'reservation.allocated')));
    await ledger.db
      .update(t.events)
      .set({ dataJson: JSON.stringify({ hosts: [lease.hostId], lend: [] }) })
      .where(eq(t.events.id, row!.id));
    await ledger.db.insert(t.events).values({
      at: row!.at,
      subjectType: 'lease',
      subjectId: lease.leaseId,
      type: 'lease.granted',
      toState: 'active',
      cause: `admission granted ${r.id}; ${lease.hostId} idle → allocated`,
      actor: 'test',
      dataJson: JSON.stringify({
        reservationId: r.id,
        hostId: lease.hostId,
        fencingToken: lease.fencingToken,
        lend: false,
        hostFrom: 'idle',
      }),
    });
    await ledger.beginRelease(r.id, 'passed', 'job finished', 'test');
    await ledger.confirmReleased(lease.hostId, lease.fencingToken, 'test');

    expect((await ledger.history('lease', lease.leaseId)).map((e) => e.type)).toEqual([
      'lease.granted',
      'lease.releasing',
      'lease.released',
    ]);
    // the replay counts the grant once, then a new-form grant of the same host after it
    await ledger.createReservation(
      {
        kind: 'manual',
        topology: 'single',
        repo: 'acme/iron',
        pr: 2,
        headSha: 'b'.repeat(40),
        requester: 't',
      },
      'test',
    );
    expect((await ledger.admissionPass('test')).granted).toHaveLength(1);
    expect(await replayGrants(ledger)).toEqual({ grants: 2, violations: [] });
  });

  it('the replay catches a double grant written in the new form', async () => {
    tl = await makeTestLedger();
    const { ledger } = tl;
    await adoptAll(ledger);
    await ledger.createReservation(
      {
        kind: 'manual',
        topology: 'single',
        repo: 'acme/iron',
        pr: 1,
        headSha: 'a'.repeat(40),
        requester: 't',
      },
      'test',
    );
    const [g] = (await ledger.admissionPass('test')).granted;
    const lease = g!.leases[0]!;
    // a forged second grant of the same host with the same token while the first still holds it
    await ledger.db.insert(t.events).values({
      at: 0,
      subjectType: 'reservation',
      subjectId: 'r-forged',
      type: 'reservation.allocated',
      cause: 'forged',
      actor: 'test',
      dataJson: JSON.stringify({
        leases: [{ id: 'l-forged', hostId: lease.hostId, fencingToken: lease.fencingToken, lend: false }],
      }),
    });
    const { violations } = await replayGrants(ledger);
    expect(violations).toEqual([
      expect.stringMatching(
        new RegExp(`^double grant of ${lease.hostId} to l-forged while ${lease.leaseId} holds it`),
      ),
      expect.stringMatching(
        new RegExp(`^fencing token ${lease.fencingToken} on ${lease.hostId} did not increase`),
      ),
    ]);
  });
});
