import { spawn } from 'node:child_process';
import { asc } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { leaseGrantsOf } from '../../core/events.ts';
import * as t from '../../functions/ledger/schema.ts';
import { adoptAll, makeTestLedger } from '../../scripts/sim/ledger.ts';

/**
 * Four Node processes share one libSQL ledger file and race admission passes over a randomized
 * stream of requests, releases and heartbeats. Afterwards the append-only history must prove zero
 * double grants (per host: granted/released strictly alternate, tokens strictly increase) and zero
 * lost requests (every id a process was given exists with its `reservation.queued` event).
 */

const PROCESSES = 4;
const OPS = Number(process.env.SPARK_RACE_OPS ?? (process.env.SPARK_TEST_LONG === '1' ? 600 : 150));

function runRacer(
  url: string,
  config: unknown,
  seed: number,
): Promise<{ created: string[]; passes: number; grants: number }> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        'test/helpers/ledger-racer.ts',
        url,
        JSON.stringify(config),
        String(seed),
        String(OPS),
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => {
      out += d;
    });
    child.stderr.on('data', (d) => {
      err += d;
    });
    child.on('error', reject);
    child.on('exit', (code) => {
      if (code !== 0) reject(new Error(`racer seed ${seed} exited ${code}: ${err.slice(-2000)}`));
      else resolve(JSON.parse(out.trim().split('\n').pop()!));
    });
  });
}

describe('ledger shared by several processes', () => {
  it(
    'never double-grants and never loses a request',
    async () => {
      const config = {
        hosts: [
          { id: 'spark-1', homeService: 'deckard' },
          { id: 'spark-2' },
          { id: 'spark-3' },
          { id: 'spark-4' },
        ],
        budgets: { maxPrs: 50, maxGpusPerPr: 8, maxGpus: 8 },
      };
      const tl = await makeTestLedger({ config });
      try {
        await adoptAll(tl.ledger);
        const base = Date.now() % 100000;
        const results = await Promise.all(
          Array.from({ length: PROCESSES }, (_, i) => runRacer(tl.url, config, base + i * 7919)),
        );
        const seeds = Array.from({ length: PROCESSES }, (_, i) => base + i * 7919);
        const ctx = `seeds ${seeds.join(',')} (replay: SPARK_RACE_OPS=${OPS})`;

        const created = results.flatMap((r) => r.created);
        expect(new Set(created).size, `duplicate reservation ids: ${ctx}`).toBe(created.length);
        const totalGrants = results.reduce((n, r) => n + r.grants, 0);
        expect(totalGrants, 'the race should actually grant work').toBeGreaterThan(10);

        const db = tl.ledger.db;
        const rows = await db.select().from(t.reservations);
        const ids = new Set(rows.map((r) => r.id));
        for (const id of created) expect(ids.has(id), `lost request ${id}: ${ctx}`).toBe(true);
        const events = await db.select().from(t.events).orderBy(asc(t.events.id));
        const queuedEvents = new Set(
          events.filter((e) => e.type === 'reservation.queued').map((e) => e.subjectId),
        );
        for (const id of created) expect(queuedEvents.has(id), `no queued event for ${id}`).toBe(true);

        // replay the history: per host, grants and releases alternate and tokens strictly increase
        const holder = new Map<string, string | null>();
        const lastToken = new Map<string, number>();
        let grantsSeen = 0;
        for (const e of events) {
          // one `reservation.allocated` row per grant lists its leases (ADR 0100)
          for (const g of leaseGrantsOf(e)) {
            grantsSeen++;
            expect(
              holder.get(g.hostId) ?? null,
              `double grant of ${g.hostId} (event ${e.id}): ${ctx}`,
            ).toBeNull();
            expect(g.fencingToken, `fencing token on ${g.hostId}`).toBeGreaterThan(
              lastToken.get(g.hostId) ?? 0,
            );
            holder.set(g.hostId, g.leaseId);
            lastToken.set(g.hostId, g.fencingToken);
          }
          if (e.type !== 'lease.released') continue;
          const data = JSON.parse(e.dataJson!) as { hostId: string };
          expect(holder.get(data.hostId), `release of a lease that does not hold ${data.hostId}`).toBe(
            e.subjectId,
          );
          holder.set(data.hostId, null);
        }
        const leaseRows = await db.select().from(t.leases);
        expect(grantsSeen).toBe(leaseRows.length);
        // every granted reservation appears in exactly one pass's grants across processes
        const granted = rows.filter((r) => r.grantedAt != null).length;
        expect(granted).toBe(totalGrants);
      } finally {
        tl.close();
      }
      // 150 ops take ~30 s on a loaded 2-core machine; test:long's 600 need more than the default 60 s
    },
    Math.max(60_000, OPS * 1_000),
  );
});
