import { statSync } from 'node:fs';
import { sql } from 'drizzle-orm';
import { afterEach, describe, expect, it } from 'vitest';
import { makeTestLedger, type TestLedger } from '../../scripts/sim/ledger.ts';

/**
 * The WAL truncation after a JIT hand-over beside this process's own write
 * transaction: a pair's two agents take their configs at the same moment, so one hand-over's
 * checkpoint meets the other's open transaction. SQLite's busy handler runs on the event loop's
 * thread, so a checkpoint outside the writer queue froze the controller for the whole busy
 * timeout (5 s) while the transaction it waited for could not commit; heartbeats went
 * unanswered and the pair was failed as `pair_node_lost`.
 */

let tl: TestLedger | null = null;
afterEach(() => {
  tl?.close();
  tl = null;
});

describe('WAL checkpoint', () => {
  it('waits for this process’s open write instead of blocking the event loop, then truncates the WAL', async () => {
    tl = await makeTestLedger();
    const { ledger } = tl;
    // the event loop's longest stall while both run
    let last = performance.now();
    let worstGapMs = 0;
    const tick = setInterval(() => {
      const now = performance.now();
      worstGapMs = Math.max(worstGapMs, now - last);
      last = now;
    }, 10);
    try {
      const started = performance.now();
      let entered!: () => void;
      const inside = new Promise<void>((r) => {
        entered = r;
      });
      const write = ledger.store.write(async (tx) => {
        await tx.run(sql`UPDATE hosts SET note = 'busy' WHERE id = 'spark-1'`);
        entered();
        await new Promise((r) => setTimeout(r, 200));
      });
      await inside;
      const checkpoint = ledger.checkpointWal();
      await Promise.all([write, checkpoint]);
      expect(performance.now() - started).toBeLessThan(2000);
      expect(worstGapMs).toBeLessThan(1000);
      expect(statSync(`${tl.dir}/spark.db-wal`).size).toBe(0);
    } finally {
      clearInterval(tick);
    }
  });
});
