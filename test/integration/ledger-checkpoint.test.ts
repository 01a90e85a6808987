import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { makeTestLedger } from '../helpers/ledger.ts';

/**
 * The WAL checkpoint after a JIT hand-over (issue 11 item 8) beside another write transaction of
 * the same process — a pair's two hand-overs at once. The local client's busy handler waits
 * synchronously, so a TRUNCATE checkpoint that waited for our own open transaction blocked the
 * event loop for the whole busy timeout (5 s): no heartbeat was answered and both pair nodes went
 * offline (the system tests' pair failed `pair_node_lost`). It must queue behind the transaction.
 */
describe('WAL checkpoint', () => {
  it('never blocks the event loop waiting for a transaction of its own process', async () => {
    const t = await makeTestLedger();
    try {
      let last = Date.now();
      let maxGap = 0;
      const ticker = setInterval(() => {
        const now = Date.now();
        maxGap = Math.max(maxGap, now - last);
        last = now;
      }, 10);
      const started = Date.now();
      let inTx!: () => void;
      const open = new Promise<void>((r) => {
        inTx = r;
      });
      const tx = t.ledger.write(async (tx) => {
        await tx.run(sql`UPDATE hosts SET updated_at = updated_at + 1`);
        inTx();
        // the transaction stays open across an await, as every ledger command may
        await new Promise((r) => setTimeout(r, 200));
      });
      await open;
      await Promise.all([tx, t.ledger.checkpointWal()]);
      clearInterval(ticker);
      expect(Date.now() - started).toBeLessThan(2000);
      expect(maxGap).toBeLessThan(1000);
      // and it did truncate the WAL
      const rs = await t.ledger.store.client.execute('PRAGMA wal_checkpoint(TRUNCATE)');
      expect(Number(rs.rows[0]![0])).toBe(0);
    } finally {
      t.close();
    }
  });
});
