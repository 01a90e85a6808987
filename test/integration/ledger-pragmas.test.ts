import { sql } from 'drizzle-orm';
import { afterEach, describe, expect, it } from 'vitest';
import { bindingLeases, CONNECTION_PRAGMAS, POOL_SIZE } from '../../functions/ledger/db.ts';
import * as t from '../../functions/ledger/schema.ts';
import { makeTestLedger, type TestLedger } from '../../scripts/sim/ledger.ts';

/**
 * "two plain bugs": the per-connection pragmas reach every pooled connection (not the
 * one that happened to run them), and the binding-leases query is one SQLite can answer from
 * the partial index `leases_one_binding_per_host` instead of scanning every lease ever granted.
 */

let tl: TestLedger | null = null;
afterEach(() => {
  tl?.close();
  tl = null;
});

describe('ledger connection settings and query plans', () => {
  it(`every one of the ${POOL_SIZE} pooled connections runs synchronous=NORMAL and the other pragmas`, async () => {
    tl = await makeTestLedger();
    const { client } = tl.ledger.store;
    expect(CONNECTION_PRAGMAS).toContain('PRAGMA synchronous = NORMAL');
    // POOL_SIZE transactions at once hold POOL_SIZE distinct connections
    const held = await Promise.all(Array.from({ length: POOL_SIZE }, () => client.transaction('deferred')));
    try {
      for (const tx of held) {
        expect(Number((await tx.execute('PRAGMA synchronous')).rows[0]![0])).toBe(1); // NORMAL
        expect(Number((await tx.execute('PRAGMA temp_store')).rows[0]![0])).toBe(2); // MEMORY
        expect(Number((await tx.execute('PRAGMA cache_size')).rows[0]![0])).toBe(-16000);
        expect(String((await tx.execute('PRAGMA journal_mode')).rows[0]![0])).toBe('wal');
      }
    } finally {
      for (const tx of held) tx.close();
    }
  });

  it('the binding-leases query uses the partial index (literal statuses, not bound parameters)', async () => {
    tl = await makeTestLedger();
    const q = tl.ledger.db.select({ id: t.leases.id }).from(t.leases).where(bindingLeases).toSQL();
    expect(q.params).toEqual([]);
    expect(q.sql).toMatch(/in \('active', 'expired', 'releasing'\)/);
    const plan = await tl.ledger.store.client.execute(`EXPLAIN QUERY PLAN ${q.sql}`);
    const detail = plan.rows.map((r) => String(r.detail)).join('\n');
    expect(detail).toMatch(/USING (COVERING )?INDEX leases_one_binding_per_host/);
    expect(detail).not.toMatch(/^SCAN leases$/m);
    // the same query with the statuses bound as parameters cannot use it: the reason for literals
    const bound = await tl.ledger.store.client.execute({
      sql: `EXPLAIN QUERY PLAN SELECT id FROM leases WHERE status IN (?, ?, ?)`,
      args: ['active', 'expired', 'releasing'],
    });
    expect(bound.rows.map((r) => String(r.detail)).join('\n')).not.toMatch(/leases_one_binding_per_host/);
    // and the inbox's open-deliveries read uses its partial index
    const inbox = await tl.ledger.db.all<{ detail: string }>(
      sql`EXPLAIN QUERY PLAN SELECT delivery_id FROM webhook_deliveries WHERE state <> 'done' AND state = 'pending' ORDER BY rowid LIMIT 64`,
    );
    expect(inbox.map((r) => r.detail).join('\n')).toMatch(/webhook_deliveries_open/);
  });
});
