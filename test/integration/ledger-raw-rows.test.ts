import { createClient } from '@libsql/client';
import { asc, desc, inArray, sql } from 'drizzle-orm';
import { afterEach, describe, expect, it } from 'vitest';
import { OPEN_STATUSES } from '../../core/model.ts';
import { openLedgerDb } from '../../functions/ledger/db.ts';
import { createLocalClient, STATEMENT_CACHE_SIZE } from '../../functions/ledger/local-client.ts';
import { loadMigrations } from '../../functions/ledger/migrations-fs.ts';
import {
  allHosts,
  bindingLeaseOfHost,
  bindingLeaseRows,
  buildKeyOf,
  buildsHadGrant,
  enabledRepositoryRow,
  hostById,
  leasesOfReservation,
  openReservations,
  openReservationsOfPrRows,
  reservationById,
} from '../../functions/ledger/raw-rows.ts';
import * as t from '../../functions/ledger/schema.ts';
import { adoptAll, makeTestLedger, type TestLedger, tempDir } from '../../scripts/sim/ledger.ts';

/**
 * The hand-written hot-path reads return exactly the rows drizzle returns for
 * the same tables, and the kept-statement client answers exactly like `@libsql/client`: these
 * are drop-in replacements, so every other ledger test keeps proving the rules through them.
 */
describe('raw admission reads', () => {
  let tl: TestLedger | null = null;
  afterEach(() => {
    tl?.close();
    tl = null;
  });

  it('match drizzle row for row, inside and outside a write transaction', async () => {
    tl = await makeTestLedger({
      config: { hosts: [{ id: 'spark-1', homeService: 'deckard' }, { id: 'spark-2' }, { id: 'spark-3' }] },
    });
    const { ledger } = tl;
    await adoptAll(ledger);
    for (let i = 0; i < 4; i++) {
      await ledger.createReservation(
        {
          kind: 'manual',
          topology: i === 3 ? 'pair' : 'single',
          repo: 'acme/iron',
          pr: i + 1,
          headSha: 'a'.repeat(40),
          requester: 'test',
        },
        'test',
      );
    }
    const pass = await ledger.admissionPass('test');
    expect(pass.granted.length).toBeGreaterThan(0);
    const db = ledger.db;
    // the reads come back as JSON text: every kind of value must survive it exactly
    const queuedId = (
      await db.select().from(t.reservations).where(sql`${t.reservations.status} = 'queued'`)
    )[0]!.id;
    await db
      .update(t.reservations)
      .set({
        reason: 'quote " backslash \\ newline \n tab \t ü 🚀 \u2028 end',
        metaJson: JSON.stringify({ trigger: 'comment', note: 'ü "x"' }),
        checkRunId: 2 ** 53 - 1,
        retryNotBefore: -1,
      })
      .where(sql`${t.reservations.id} = ${queuedId}`);
    await db.update(t.hosts).set({ note: '' }).where(sql`${t.hosts.id} = 'spark-3'`);
    const viaDrizzle = {
      hosts: await db.select().from(t.hosts),
      leases: await db
        .select()
        .from(t.leases)
        .where(sql`${t.leases.status} in ('active', 'expired', 'releasing')`),
      reservations: await db
        .select()
        .from(t.reservations)
        .where(inArray(t.reservations.status, [...OPEN_STATUSES]))
        .orderBy(desc(t.reservations.priority), asc(t.reservations.seq)),
    };
    expect(viaDrizzle.leases.length).toBeGreaterThan(0);
    expect(viaDrizzle.reservations.some((r) => r.status === 'queued')).toBe(true);
    const outside = ledger.store.raw(undefined);
    expect(await allHosts(outside)).toEqual(viaDrizzle.hosts);
    expect(await bindingLeaseRows(outside)).toEqual(viaDrizzle.leases);
    expect(await openReservations(outside)).toEqual(viaDrizzle.reservations);
    // the single-row reads (heartbeat, poll) go the same way
    for (const h of viaDrizzle.hosts) expect(await hostById(outside, h.id)).toEqual(h);
    for (const l of viaDrizzle.leases) expect(await bindingLeaseOfHost(outside, l.hostId)).toEqual(l);
    for (const r of viaDrizzle.reservations) expect(await reservationById(outside, r.id)).toEqual(r);
    // the inbox path's reads (docs/adr/0270-inbox-path-kept-statements.md)
    for (const r of viaDrizzle.reservations) {
      const leases = await db
        .select()
        .from(t.leases)
        .where(sql`${t.leases.reservationId} = ${r.id}`)
        .orderBy(asc(t.leases.hostId));
      expect(await leasesOfReservation(outside, r.id)).toEqual(leases);
      const ofPr = await db
        .select()
        .from(t.reservations)
        .where(
          sql`${t.reservations.repo} = ${r.repo} AND ${t.reservations.pr} = ${r.pr} AND ${inArray(t.reservations.status, [...OPEN_STATUSES])}`,
        );
      expect(ofPr.length).toBeGreaterThan(0);
      expect(await openReservationsOfPrRows(outside, r.repo!, r.pr!)).toEqual(ofPr);
    }
    expect(viaDrizzle.reservations.some((r) => r.topology === 'pair')).toBe(true);
    await db.insert(t.repositories).values([
      { fullName: 'Acme/Iron', installationId: 7, pairEnabled: true, workflow: 'ci.yml', enabledAt: 5 },
      { fullName: 'acme/gone', installationId: null, enabledAt: 5, disabledAt: 6 },
    ]);
    expect(await enabledRepositoryRow(outside, 'acme/IRON')).toEqual(
      (await db.select().from(t.repositories).where(sql`${t.repositories.fullName} = 'Acme/Iron'`))[0],
    );
    expect(await enabledRepositoryRow(outside, 'acme/gone')).toBeNull();
    expect(await hostById(outside, 'spark-404')).toBeNull();
    expect(await reservationById(outside, 'r-404')).toBeNull();
    expect(await bindingLeaseOfHost(outside, 'spark-404')).toBeNull();
    const inside = await ledger.store.write(async (tx) => {
      const q = ledger.store.raw(tx);
      return {
        hosts: await allHosts(q),
        leases: await bindingLeaseRows(q),
        reservations: await openReservations(q),
      };
    });
    expect(inside).toEqual(viaDrizzle);
  });

  it('records each granted build once and answers which builds had a lane granted (ADR 0101)', async () => {
    tl = await makeTestLedger({ config: { hosts: [{ id: 'spark-2' }] } });
    const { ledger } = tl;
    await adoptAll(ledger);
    const a = 'a'.repeat(40);
    const b = 'b'.repeat(40);
    const mk = (over: { kind?: 'manual' | 'merge'; pr?: number; headSha: string }) =>
      ledger.createReservation(
        {
          kind: over.kind ?? 'manual',
          topology: 'single',
          repo: 'acme/iron',
          ...(over.pr != null ? { pr: over.pr } : {}),
          headSha: over.headSha,
          requester: 'test',
        },
        'test',
      );
    const key = (r: { pr: number | null; headSha: string; kind: string; repo?: string }) =>
      buildKeyOf({ repo: 'acme/iron', ...r });
    expect(key({ pr: 1, headSha: a, kind: 'manual' })).toBe(`pr acme/iron#1 ${a}`);
    expect(key({ pr: null, headSha: b, kind: 'merge' })).toBe(`repo acme/iron ${b}`);
    expect(key({ pr: null, headSha: b, kind: 'development' })).toBeNull();
    expect(buildKeyOf({ repo: null, pr: 1, headSha: a, kind: 'manual' })).toBeNull();

    await mk({ pr: 1, headSha: a }); // granted below (the only host)
    await mk({ kind: 'merge', headSha: b }); // queued behind it
    expect((await ledger.admissionPass('test')).granted).toHaveLength(1);
    const q = ledger.store.raw(undefined);
    const asked = [
      key({ pr: 1, headSha: a, kind: 'manual' })!, // granted
      key({ pr: 2, headSha: a, kind: 'manual' })!, // another PR
      key({ pr: 1, headSha: b, kind: 'manual' })!, // another SHA
      buildKeyOf({ repo: 'acme/other', pr: 1, headSha: a, kind: 'manual' })!, // another repository
      key({ pr: null, headSha: b, kind: 'merge' })!, // the merge build, not granted yet
      key({ pr: null, headSha: a, kind: 'merge' })!, // no per-commit build granted on this SHA
    ];
    expect([...(await buildsHadGrant(q, asked))]).toEqual([asked[0]]);
    // the merge build granted next: now its repository-wide build counts as had
    const free = async () => {
      const lease = (await ledger.db.select().from(t.leases).where(sql`${t.leases.status} = 'active'`))[0]!;
      await ledger.beginRelease(lease.reservationId, 'passed', 'done', 'test');
      await ledger.confirmReleased(lease.hostId, lease.fencingToken, 'test');
    };
    await free();
    expect((await ledger.admissionPass('test')).granted).toHaveLength(1);
    expect([...(await buildsHadGrant(q, asked))].sort()).toEqual([asked[0], asked[4]].sort());
    expect(await buildsHadGrant(q, [])).toEqual(new Set());
    // a second lane of a known build keeps the first grant's time
    await free();
    const first = await ledger.db.select().from(t.grantedBuilds);
    await mk({ pr: 1, headSha: a });
    expect((await ledger.admissionPass('test')).granted.length).toBeGreaterThan(0);
    const after = await ledger.db.select().from(t.grantedBuilds);
    expect(after.filter((r) => r.build === asked[0])).toEqual(first.filter((r) => r.build === asked[0]));

    // migration 0006's backfill derives the same rows from the reservations' granted_at
    const backfill = loadMigrations()
      .find((m) => m.tag === '0006_granted_builds')!
      .statements.find((x) => x.includes('INSERT OR IGNORE INTO `granted_builds`'))!;
    await ledger.db.delete(t.grantedBuilds);
    await ledger.db.run(sql.raw(backfill));
    const byBuild = (rows: { build: string }[]) => [...rows].sort((x, y) => x.build.localeCompare(y.build));
    expect(byBuild(await ledger.db.select().from(t.grantedBuilds))).toEqual(byBuild(after));
  });

  it('refuses an integer beyond 2^53 instead of rounding it (as the client does)', async () => {
    tl = await makeTestLedger({ config: { hosts: [{ id: 'spark-2' }] } });
    const { ledger } = tl;
    await ledger.db.run(sql`UPDATE hosts SET fencing_token = 9007199254740993 WHERE id = 'spark-2'`);
    const q = ledger.store.raw(undefined);
    await expect(allHosts(q)).rejects.toThrow(
      /fencing_token 9007199254740992 is not an integer JavaScript can hold exactly/,
    );
    await expect(q.execute('SELECT fencing_token FROM hosts')).rejects.toThrow(RangeError);
  });

  it('refuses raw SQL on a transaction the ledger did not open', async () => {
    tl = await makeTestLedger();
    const other = await makeTestLedger();
    try {
      await other.ledger.store.write(async (tx) => {
        expect(() => tl!.ledger.store.raw(tx)).toThrow(/not a write transaction of this ledger/);
      });
    } finally {
      other.close();
    }
  });
});

describe('kept-statement local client', () => {
  it('answers like @libsql/client: rows, types, errors, transactions', async () => {
    const { dir, cleanup } = tempDir();
    const url = `file:${dir}/c.db`;
    const stock = createClient({ url });
    const kept = createLocalClient({ url, concurrency: 2 });
    try {
      await stock.executeMultiple(
        'CREATE TABLE x (id INTEGER PRIMARY KEY, name TEXT, n INTEGER, r REAL, b BLOB, f INTEGER NOT NULL DEFAULT 0)',
      );
      await stock.execute({
        sql: 'INSERT INTO x (name, n, r, b, f) VALUES (?, ?, ?, ?, ?)',
        args: ['a', 7, 1.5, new Uint8Array([1, 2]), true],
      });
      await stock.execute({
        sql: 'INSERT INTO x (name, n, r, b) VALUES (?, ?, ?, ?)',
        args: [null, -3, 0, null],
      });
      const q = 'SELECT id, name, n, r, b, f, name AS name FROM x ORDER BY id';
      for (let round = 0; round < 3; round++) {
        // the same text again: the kept statement must give the same answer every time
        const a = await stock.execute(q);
        const b = await kept.execute(q);
        expect(b.columns).toEqual(a.columns);
        expect(b.rows.map((r) => Array.prototype.slice.call(r))).toEqual(
          a.rows.map((r) => Array.prototype.slice.call(r)),
        );
        expect(b.rows.map((r) => ({ ...r }))).toEqual(a.rows.map((r) => ({ ...r })));
        expect(b.rows.map((r) => Object.keys(r))).toEqual(a.rows.map((r) => Object.keys(r)));
        expect(b.rows[0]!.length).toBe(a.rows[0]!.length);
      }
      const single = await kept.execute({ sql: 'SELECT name, n FROM x WHERE id = ?', args: [1] });
      expect(single.rows[0]!.name).toBe('a');
      expect(single.rows[0]![1]).toBe(7);
      expect(Object.keys(single.rows[0]!)).toEqual(['name', 'n']);
      const ins = await kept.execute({ sql: 'INSERT INTO x (name, n) VALUES (?, ?)', args: ['c', 9] });
      expect(ins.rowsAffected).toBe(1);
      expect(ins.lastInsertRowid).toBe(3n);
      await expect(
        kept.execute({ sql: 'INSERT INTO x (id, name) VALUES (?, ?)', args: [1, 'dup'] }),
      ).rejects.toMatchObject({
        code: 'SQLITE_CONSTRAINT',
      });
      await expect(kept.execute('SELECT nope FROM x')).rejects.toMatchObject({ code: 'SQLITE_ERROR' });
      // a rolled-back transaction leaves nothing; a committed one is seen by the other client
      const tx = await kept.transaction('write');
      await tx.execute({ sql: 'INSERT INTO x (name) VALUES (?)', args: ['gone'] });
      await tx.rollback();
      const tx2 = await kept.transaction('write');
      await tx2.execute({ sql: 'INSERT INTO x (name) VALUES (?)', args: ['kept'] });
      await tx2.commit();
      const names = (await stock.execute('SELECT name FROM x ORDER BY id')).rows.map((r) => r.name);
      expect(names).toEqual(['a', null, 'c', 'kept']);
      // more distinct statements than the cache holds: the oldest are dropped, answers stay right
      for (let i = 0; i < STATEMENT_CACHE_SIZE + 20; i++) {
        const rs = await kept.execute({ sql: `SELECT ? + ${i} AS v`, args: [1] });
        expect(rs.rows[0]!.v).toBe(1 + i);
      }
    } finally {
      stock.close();
      kept.close();
      cleanup();
    }
  });

  it('sets the connection pragmas on every pooled connection', async () => {
    const { dir, cleanup } = tempDir();
    try {
      const { createNodeLedgerClient } = await import('../../functions/ledger/node-client.ts');
      const store = await openLedgerDb({ url: `file:${dir}/p.db`, createClient: createNodeLedgerClient });
      const txs = await Promise.all([0, 1, 2, 3].map(() => store.client.transaction('deferred')));
      for (const tx of txs) {
        const rs = await tx.execute('PRAGMA synchronous');
        expect(rs.rows[0]![0]).toBe(1); // NORMAL
        tx.close();
      }
      store.close();
    } finally {
      cleanup();
    }
  });
});
