import { and, asc, eq, inArray, isNull, lte, or, sql } from 'drizzle-orm';
import { afterEach, describe, expect, it } from 'vitest';
import { parseHostEvidence } from '../../core/protocol/host-evidence.ts';
import type { RawSql, Tx } from '../../functions/ledger/db.ts';
import { hostEvidenceOf } from '../../functions/ledger/host-evidence.ts';
import {
  anyClaimable,
  anyOutboxDue,
  claimableRows,
  claimRows,
  insertCheckSync,
  insertOutboxRow,
  insertOutboxRows,
  markRowFailed,
  markRowSent,
  nextPendingAt,
  type OutboxInsert,
  outboxKeyRowExists,
} from '../../functions/ledger/outbox-rows.ts';
import {
  insertReservationRow,
  nextReservationSeq,
  updateReservationIfStatus,
} from '../../functions/ledger/reservation-status.ts';
import * as t from '../../functions/ledger/schema.ts';
import { adoptAll, makeTestLedger, type TestLedger } from '../../scripts/sim/ledger.ts';
import { hostEvidence } from '../helpers/host-evidence.ts';

/**
 * The outbox's hand-written statements (`functions/ledger/outbox-rows.ts`,
 * docs/adr/0290-outbox-kept-statements.md) against the drizzle statements they replaced, copied
 * here as they were in `functions/ledger/outbox.ts` before: the same steps run on two ledgers, one
 * through each, must leave the same outbox rows, and every read must answer what drizzle's
 * answers on the same rows.
 */

type Db = TestLedger['ledger']['db'];

/** The drizzle statements as `functions/ledger/outbox.ts` built them before ADR 0290. */
const viaDrizzle = {
  async insert(tx: Tx, r: OutboxInsert): Promise<boolean> {
    const rows = await tx
      .insert(t.outbox)
      .values({
        kind: r.kind,
        idempotencyKey: r.key,
        reservationId: r.reservationId,
        payloadJson: r.payloadJson,
        status: 'pending',
        nextAttemptAt: r.nextAttemptAt,
        createdAt: r.createdAt,
      })
      .onConflictDoNothing({ target: t.outbox.idempotencyKey })
      .returning({ id: t.outbox.id });
    return rows.length > 0;
  },
  async insertMany(tx: Tx, rows: readonly OutboxInsert[]): Promise<void> {
    await tx
      .insert(t.outbox)
      .values(
        rows.map((r) => ({
          kind: r.kind,
          idempotencyKey: r.key,
          reservationId: r.reservationId,
          payloadJson: r.payloadJson,
          status: 'pending',
          nextAttemptAt: r.nextAttemptAt,
          createdAt: r.createdAt,
        })),
      )
      .onConflictDoNothing({ target: t.outbox.idempotencyKey });
  },
  async checkSync(tx: Tx, now: number, reservationId: string): Promise<void> {
    await tx.run(sql`INSERT INTO outbox (kind, idempotency_key, reservation_id, payload_json, status, next_attempt_at, created_at)
    SELECT 'check-run', 'check:' || ${reservationId} || ':' || (count(*) + 1), ${reservationId}, ${JSON.stringify({ reservationId })}, 'pending', ${now}, ${now}
    FROM outbox WHERE reservation_id = ${reservationId} AND kind = 'check-run'
    HAVING coalesce(sum(status = 'pending' AND claimed_until IS NULL), 0) = 0
    ON CONFLICT (idempotency_key) DO NOTHING`);
  },
  async keyExists(db: Db | Tx, key: string): Promise<boolean> {
    const rows = await db.select({ id: t.outbox.id }).from(t.outbox).where(eq(t.outbox.idempotencyKey, key));
    return rows.length > 0;
  },
  async due(db: Db, now: number): Promise<boolean> {
    const due = await db
      .select({ id: t.outbox.id })
      .from(t.outbox)
      .where(and(eq(t.outbox.status, 'pending'), lte(t.outbox.nextAttemptAt, now)))
      .limit(1);
    return due.length > 0;
  },
  async nextAt(db: Db): Promise<number | null> {
    const rows = await db
      .select({
        at: sql<number | null>`MIN(MAX(${t.outbox.nextAttemptAt}, COALESCE(${t.outbox.claimedUntil}, 0)))`,
      })
      .from(t.outbox)
      .where(eq(t.outbox.status, 'pending'));
    const at = rows[0]?.at ?? null;
    return at == null ? null : Number(at);
  },
  claimable(db: Db | Tx, now: number, limit: number, kinds?: readonly string[]) {
    return db
      .select()
      .from(t.outbox)
      .where(
        and(
          eq(t.outbox.status, 'pending'),
          lte(t.outbox.nextAttemptAt, now),
          kinds ? inArray(t.outbox.kind, [...kinds]) : undefined,
          or(isNull(t.outbox.claimedUntil), lte(t.outbox.claimedUntil, now)),
          sql`NOT (${t.outbox.kind} = 'check-run' AND EXISTS (SELECT 1 FROM outbox AS busy WHERE busy.kind = 'check-run' AND busy.reservation_id = ${t.outbox.reservationId} AND busy.status = 'pending' AND busy.claimed_until > ${now}))`,
        ),
      )
      .orderBy(asc(t.outbox.id))
      .limit(limit);
  },
  async claim(tx: Tx, ids: number[], workerId: string, until: number): Promise<void> {
    await tx
      .update(t.outbox)
      .set({ claimedBy: workerId, claimedUntil: until })
      .where(inArray(t.outbox.id, ids));
  },
  async sent(tx: Tx, id: number, workerId: string, f: { attempts: number; resultJson: string; now: number }) {
    await tx
      .update(t.outbox)
      .set({
        status: 'sent',
        sentAt: f.now,
        attempts: f.attempts,
        resultJson: f.resultJson,
        claimedBy: null,
        claimedUntil: null,
        lastError: null,
      })
      .where(and(eq(t.outbox.id, id), eq(t.outbox.claimedBy, workerId)));
  },
  async failed(
    tx: Tx,
    id: number,
    workerId: string,
    f: { status: 'pending' | 'failed'; attempts: number; nextAttemptAt: number; lastError: string },
  ) {
    await tx
      .update(t.outbox)
      .set({
        status: f.status,
        attempts: f.attempts,
        nextAttemptAt: f.nextAttemptAt,
        lastError: f.lastError,
        claimedBy: null,
        claimedUntil: null,
      })
      .where(and(eq(t.outbox.id, id), eq(t.outbox.claimedBy, workerId)));
  },
};

/** One step, written once for each side: drizzle's transaction or the raw statements in it. */
type Step = {
  drizzle: (tx: Tx) => Promise<unknown>;
  raw: (q: RawSql) => Promise<unknown>;
};

const row = (over: Partial<OutboxInsert> & { key: string }): OutboxInsert => ({
  kind: 'dispatch',
  reservationId: 'r-1',
  payloadJson: JSON.stringify({ note: 'quote " backslash \\ newline \n ü 🚀 \u2028' }),
  nextAttemptAt: 1_000,
  createdAt: 1_000,
  ...over,
});

const HANDOVER = ['dispatch', 'find-run', 'generate-jitconfig', 'mint-clone-token'];
const OTHER = ['check-run', 'refusal-check', 'delete-runner', 'cancel-run'];

describe('raw outbox statements', () => {
  const open: TestLedger[] = [];
  afterEach(() => {
    for (const l of open.splice(0)) l.close();
  });

  it('write the rows drizzle wrote and read what drizzle reads, step by step', async () => {
    const a = await makeTestLedger();
    const b = await makeTestLedger();
    open.push(a, b);
    const dA = a.ledger.db;
    const dB = b.ledger.db;
    const rows = (d: Db) => d.select().from(t.outbox).orderBy(asc(t.outbox.id));
    /** Runs a step on both ledgers, each in a write transaction; the answers and rows must match. */
    const both = async (step: Step) => {
      const x = await a.ledger.store.write((tx) => step.drizzle(tx));
      const y = await b.ledger.store.write((tx) => step.raw(b.ledger.store.raw(tx)));
      expect(y).toEqual(x);
      expect(await rows(dB)).toEqual(await rows(dA));
      return y;
    };
    /** The reads, outside and inside a transaction, at `now`. */
    const reads = async (now: number) => {
      const outside = b.ledger.store.raw(undefined);
      expect(await anyOutboxDue(outside, now)).toBe(await viaDrizzle.due(dB, now));
      expect(await nextPendingAt(outside)).toEqual(await viaDrizzle.nextAt(dB));
      for (const kinds of [undefined, HANDOVER, OTHER, ['check-run'], []])
        for (const limit of [1, 25]) {
          const want = await viaDrizzle.claimable(dB, now, limit, kinds);
          expect(await claimableRows(outside, now, limit, kinds)).toEqual(want);
          expect(
            await b.ledger.store.write((tx) => claimableRows(b.ledger.store.raw(tx), now, limit, kinds)),
          ).toEqual(want);
          // the sender's read before a claim says whether the claim would take anything
          if (limit === 1) expect(await anyClaimable(outside, now, kinds)).toBe(want.length > 0);
        }
      for (const key of ['k-1', 'k-404', 'check:r-2:1'])
        expect(await outboxKeyRowExists(outside, key)).toBe(await viaDrizzle.keyExists(dB, key));
    };

    await reads(1_000); // an empty outbox
    expect(await nextPendingAt(b.ledger.store.raw(undefined))).toBeNull();
    for (const r of [
      row({ key: 'k-1' }),
      row({ key: 'k-2', reservationId: null, kind: 'find-run', nextAttemptAt: 5_000 }),
      row({ key: 'k-1', payloadJson: '{"second":true}' }), // an existing key: nothing
      row({ key: 'k-3', kind: 'check-run', reservationId: 'r-3' }),
    ])
      expect(
        await both({ drizzle: (tx) => viaDrizzle.insert(tx, r), raw: (q) => insertOutboxRow(q, r) }),
      ).toBeTypeOf('boolean');
    const many = [
      row({ key: 'm-1', kind: 'delete-runner', createdAt: 1_100, nextAttemptAt: 1_100 }),
      row({ key: 'k-2' }), // exists
      row({ key: 'm-2', kind: 'generate-jitconfig', reservationId: null, payloadJson: '{}' }),
      row({ key: 'm-1', kind: 'cancel-run' }), // twice in one statement: the first stays
      row({ key: 'm-3', kind: 'mint-clone-token', nextAttemptAt: 2 ** 53 - 1 }),
    ];
    await both({ drizzle: (tx) => viaDrizzle.insertMany(tx, many), raw: (q) => insertOutboxRows(q, many) });
    for (const rid of ['r-2', 'r-2', 'r-3', 'r-quote\'"'])
      await both({
        drizzle: (tx) => viaDrizzle.checkSync(tx, 1_200, rid),
        raw: (q) => insertCheckSync(q, 1_200, rid),
      });
    await reads(999);
    await reads(1_000);
    await reads(1_200);
    await reads(6_000);

    // claim the other lane's rows: a later check sync for a claimed reservation queues behind it,
    // and its row is not claimable while the first is held
    const claimed = await b.ledger.store.write((tx) =>
      claimableRows(b.ledger.store.raw(tx), 1_300, 25, OTHER),
    );
    expect(claimed.map((r) => r.kind)).toContain('check-run');
    const ids = claimed.map((r) => r.id);
    await both({
      drizzle: (tx) => viaDrizzle.claim(tx, ids, 'w-1', 121_300),
      raw: (q) => claimRows(q, ids, 'w-1', 121_300),
    });
    for (const rid of ['r-2', 'r-3'])
      await both({
        drizzle: (tx) => viaDrizzle.checkSync(tx, 1_400, rid),
        raw: (q) => insertCheckSync(q, 1_400, rid),
      });
    await reads(1_400);
    await reads(121_300); // the claims expired
    const [first, second, third] = ids;
    const sent = { attempts: 1, resultJson: JSON.stringify({ id: 7, text: 'ü "x"' }), now: 1_500 };
    for (const [id, worker] of [
      [first!, 'w-2'], // not its claim: nothing
      [first!, 'w-1'],
    ] as const)
      await both({
        drizzle: (tx) => viaDrizzle.sent(tx, id, worker, sent),
        raw: (q) => markRowSent(q, id, worker, sent),
      });
    for (const [id, f] of [
      [second!, { status: 'pending', attempts: 1, nextAttemptAt: 3_500, lastError: 'HTTP 502 "bad"' }],
      [third!, { status: 'failed', attempts: 12, nextAttemptAt: 1_600, lastError: '' }],
    ] as const)
      await both({
        drizzle: (tx) => viaDrizzle.failed(tx, id, 'w-1', f),
        raw: (q) => markRowFailed(q, id, 'w-1', f),
      });
    await reads(1_600);
    await reads(3_500);
    expect((await rows(dB)).map((r) => r.status)).toEqual(
      expect.arrayContaining(['sent', 'failed', 'pending']),
    );
  });

  it("read each reservation's host evidence as drizzle's rows gave it", async () => {
    const tl = await makeTestLedger({
      config: { hosts: [{ id: 'spark-1' }, { id: 'spark-2' }, { id: 'spark-3' }] },
    });
    open.push(tl);
    const { ledger } = tl;
    await adoptAll(ledger);
    for (const topology of ['pair', 'single'] as const)
      await ledger.createReservation(
        { kind: 'manual', topology, repo: 'acme/iron', pr: 1, headSha: 'a'.repeat(40), requester: 'test' },
        'test',
      );
    await ledger.admissionPass('test');
    const leases = await ledger.db.select().from(t.leases);
    expect(leases.length).toBeGreaterThan(1);
    // one valid, one that does not parse (left out), per lease in turn
    await ledger.db.insert(t.hostEvidence).values(
      leases.map((l, i) => ({
        leaseId: l.id,
        reservationId: l.reservationId,
        hostId: l.hostId,
        fencingToken: l.fencingToken,
        evidenceJson: i === 1 ? '{"not":"evidence"}' : JSON.stringify(hostEvidence('a'.repeat(40))),
        recordedAt: 5,
      })),
    );
    let found = 0;
    for (const id of [...new Set(leases.map((l) => l.reservationId)), 'r-404']) {
      // what hostEvidenceOf made of drizzle's rows before (docs/adr/0290-outbox-kept-statements.md)
      const want: Record<string, unknown> = {};
      for (const row of await ledger.db
        .select()
        .from(t.hostEvidence)
        .where(eq(t.hostEvidence.reservationId, id))) {
        const e = parseHostEvidence(row.evidenceJson);
        if (e) want[row.hostId] = e;
      }
      expect(await hostEvidenceOf(ledger.store.raw(undefined), id)).toEqual(want);
      found += Object.keys(want).length;
    }
    expect(found).toBe(leases.length - 1);
  });

  it("update a reservation's fields if its status holds, as drizzle's update did", async () => {
    const tl = await makeTestLedger({ clock: () => 1_000 });
    open.push(tl);
    const { ledger } = tl;
    const mk = () =>
      ledger.createReservation(
        {
          kind: 'manual',
          topology: 'single',
          repo: 'acme/iron',
          pr: 1,
          headSha: 'a'.repeat(40),
          requester: 't',
        },
        't',
      );
    const [x, y] = [await mk(), await mk()];
    const read = async (id: string) => {
      const {
        id: _id,
        seq: _seq,
        ...rest
      } = (await ledger.db.select().from(t.reservations).where(eq(t.reservations.id, id)))[0]!;
      return rest;
    };
    expect(await read(y.id)).toEqual(await read(x.id));
    const patches = [
      { status: 'cancelled', updatedAt: 7 }, // the status no longer holds below: nothing
      { status: 'allocated', updatedAt: 8, grantedAt: 8, position: null, waitCode: undefined },
      {
        status: 'done',
        updatedAt: 9,
        endedAt: 9,
        reason: 'quote " ü \n',
        position: null,
        waitCode: null,
        outcome: 'passed',
        metaJson: '{"a":1}',
        checkRunId: 2 ** 53 - 1,
      },
    ];
    const held = ['allocated', 'queued', 'allocated'];
    for (const [i, patch] of patches.entries()) {
      await ledger.store.write(async (tx) => {
        await tx
          .update(t.reservations)
          .set(patch)
          .where(and(eq(t.reservations.id, x.id), eq(t.reservations.status, held[i]!)));
        await updateReservationIfStatus(ledger.store.raw(tx), y.id, held[i]!, patch);
      });
      expect(await read(y.id)).toEqual(await read(x.id));
    }
    expect((await read(y.id)).status).toBe('done');
    await expect(
      ledger.store.write((tx) =>
        updateReservationIfStatus(ledger.store.raw(tx), y.id, 'done', { nope: 1 } as never),
      ),
    ).rejects.toThrow(/no field nope/);
  });

  it('insert a reservation as drizzle inserted it, defaults included', async () => {
    const a = await makeTestLedger();
    const b = await makeTestLedger();
    open.push(a, b);
    const rows = [
      {
        id: 'r-1',
        seq: 1,
        kind: 'manual',
        priority: 80,
        topology: 'single',
        pool: 'spark',
        requester: 't',
        status: 'queued',
        createdAt: 5,
        updatedAt: 5,
        queueDeadline: 9,
      },
      {
        id: 'r-2',
        seq: 2,
        kind: 'pr',
        priority: 50,
        topology: 'pair',
        pool: 'spark',
        targetHost: null,
        repo: 'acme/iron',
        pr: 7,
        headSha: 'a'.repeat(40),
        suite: 'full',
        requester: 'github',
        status: 'queued',
        reason: 'quote " ü \n',
        createdAt: 6,
        updatedAt: 6,
        queueDeadline: 2 ** 53 - 1,
        ttlS: null,
        metaJson: '{"trigger":"comment"}',
      },
    ];
    for (const row of rows) {
      await a.ledger.store.write((tx) => tx.insert(t.reservations).values(row));
      const seq = await b.ledger.store.write(async (tx) => {
        const next = await nextReservationSeq(b.ledger.store.raw(tx));
        await insertReservationRow(b.ledger.store.raw(tx), row);
        return next;
      });
      expect(seq).toBe(row.seq);
      const all = (l: TestLedger) =>
        l.ledger.db.select().from(t.reservations).orderBy(asc(t.reservations.seq));
      expect(await all(b)).toEqual(await all(a));
    }
    // the same id twice is refused as drizzle's insert was
    await expect(
      b.ledger.store.write((tx) => insertReservationRow(b.ledger.store.raw(tx), rows[0]!)),
    ).rejects.toThrow(/UNIQUE|constraint/i);
  });
});
