import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient } from '@libsql/client';
import { eq } from 'drizzle-orm';
import { afterEach, describe, expect, it } from 'vitest';
import { createApiToken } from '../../functions/auth/tokens.ts';
import { openLedgerDb } from '../../functions/ledger/db.ts';
import { applyMigrations } from '../../functions/ledger/migrate.ts';
import { loadMigrations } from '../../functions/ledger/migrations-fs.ts';
import * as t from '../../functions/ledger/schema.ts';
import { startTestController } from '../helpers/controller.ts';
import { agentCleaned, agentPrepared, bringOnline, FAST_TIMINGS, http, until } from './cli-harness.ts';

/**
 * "Done when": promtool passes on a ledger with > 10,000 finished reservations and
 * counters only grow. Before, histograms were rebuilt from the newest 10,000 rows at every scrape,
 * so `_count` stopped at 10,000 and buckets could go down.
 */

const HISTORY = 10_500;

/** `promtool check metrics` (Debian `prometheus`, installed by `npm test`'s pretest). */
function promtool(text: string): { status: number | null; output: string } {
  const r = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  if (r.error)
    throw new Error(`promtool not runnable (${r.error.message}): run bash scripts/setup-test-deps.sh`);
  return { status: r.status, output: `${r.stdout}${r.stderr}` };
}

/** Counter and histogram samples (`name{labels}` → value) of an exposition. */
function monotonicSamples(text: string): Map<string, number> {
  const types = new Map<string, string>();
  const out = new Map<string, number>();
  for (const line of text.trimEnd().split('\n')) {
    const meta = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (meta) {
      types.set(meta[1]!, meta[2]!);
      continue;
    }
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`malformed line: ${line}`);
    const family = types.get(m[1]!) ? m[1]! : m[1]!.replace(/_(bucket|sum|count)$/, '');
    const type = types.get(family);
    if (type === 'counter' || type === 'histogram') out.set(`${m[1]}${m[2] ?? ''}`, Number(m[3]));
  }
  return out;
}

/** A ledger at migration 0001 holding `n` finished reservations, each with a released lease. */
async function seedHistory(url: string, n: number): Promise<void> {
  const db = await openLedgerDb({ url, createClient });
  try {
    await applyMigrations(
      db,
      loadMigrations().filter((m) => m.tag < '0002'),
    );
    const base = Date.now() - 40 * 86_400_000;
    // the controller's host sync completes this row from the configuration at start
    await db.client.execute({
      sql: `INSERT INTO hosts (id, pool, gpus, updated_at) VALUES ('spark-2', 'spark', 1, ?)`,
      args: [base],
    });
    // one statement each: a recursive CTE writes the rows inside SQLite
    await db.client.execute({
      sql: `WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ?)
        INSERT INTO reservations (id, seq, kind, priority, topology, pool, requester, status, outcome,
          created_at, updated_at, queue_deadline, granted_at, ended_at)
        SELECT 'r-h' || i, i, CASE i % 3 WHEN 0 THEN 'merge' WHEN 1 THEN 'manual' ELSE 'background' END,
          70, 'single', 'spark', 'github:bot', 'done', 'passed',
          ? + i * 60000, ? + i * 60000 + 900000, ? + i * 60000 + 21600000,
          ? + i * 60000 + (i % 97) * 7000, ? + i * 60000 + 900000 FROM k`,
      args: [n, base, base, base, base, base],
    });
    await db.client.execute({
      sql: `WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ?)
        INSERT INTO leases (id, reservation_id, host_id, fencing_token, status, granted_at, expires_at,
          released_at, prepared_at, runner_started_at)
        SELECT 'l-h' || i, 'r-h' || i, 'spark-2', -i, 'released', ? + i * 60000, ? + i * 60000 + 300000,
          ? + i * 60000 + 900000, ? + i * 60000 + 30000, ? + i * 60000 + 30000 + (i % 13) * 1000 FROM k`,
      args: [n, base, base, base, base, base],
    });
  } finally {
    db.close();
  }
}

describe('/metrics on a long-lived ledger', () => {
  let cleanup: (() => Promise<void>) | null = null;
  afterEach(async () => {
    await cleanup?.();
    cleanup = null;
  });

  it('passes promtool past 10,000 finished reservations and its counters only grow', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'spark-metrics-'));
    const url = `file:${join(dir, 'spark.db')}`;
    await seedHistory(url, HISTORY);
    const c = await startTestController({ ledgerUrl: url, config: { timings: { ...FAST_TIMINGS } } });
    cleanup = async () => {
      await c.close();
      rmSync(dir, { recursive: true, force: true });
    };
    const scrape = async () => {
      const res = await fetch(`${c.url}/metrics`);
      expect(res.status).toBe(200);
      return res.text();
    };

    const first = await scrape();
    const lint1 = promtool(first);
    expect(lint1.output).toBe('');
    expect(lint1.status).toBe(0);
    const m1 = monotonicSamples(first);
    const waits = (m: Map<string, number>) =>
      [...m]
        .filter(([k]) => k.startsWith('spark_reservation_wait_seconds_count'))
        .reduce((a, [, v]) => a + v, 0);
    // the migration counted every finished reservation, not the newest 10,000
    expect(waits(m1)).toBe(HISTORY);
    expect(m1.get('spark_runner_startup_seconds_count{host="spark-2"}')).toBe(HISTORY);
    expect(m1.get('spark_reservations_ended_total{kind="merge",status="done",outcome="passed"}')).toBe(
      Math.floor(HISTORY / 3),
    );

    // two more reservations run through the real commands: granted, prepared, started, released
    await bringOnline(c.ledger);
    const dev = (await createApiToken(c.ledger, { name: 'dev', scopes: ['develop'] }, 'test')).token;
    for (let i = 0; i < 2; i++) {
      const created = await http(c.url, dev, 'POST', '/api/v1/reservations', { host: 'spark-2' });
      expect(created.status).toBeLessThan(300);
      const id = created.body.reservation.id as string;
      await until(
        'grant',
        async () => (await c.ledger.getReservation(undefined, id))?.status === 'allocated',
      );
      await agentPrepared(c.ledger, id);
      await c.ledger.write(async (tx, now) => {
        await tx
          .update(t.leases)
          .set({ runnerStartedAt: now + 3000 })
          .where(eq(t.leases.reservationId, id));
      });
      expect((await http(c.url, dev, 'POST', `/api/v1/reservations/${id}/release`, {})).status).toBe(200);
      await agentCleaned(c.ledger, id);
      await until('ended', async () => (await c.ledger.getReservation(undefined, id))?.status === 'done');
    }

    const second = await scrape();
    const lint2 = promtool(second);
    expect(lint2.output).toBe('');
    expect(lint2.status).toBe(0);
    const m2 = monotonicSamples(second);
    const shrunk = [...m1].filter(([k, v]) => !((m2.get(k) ?? Number.NaN) >= v));
    expect(shrunk).toEqual([]);
    expect(waits(m2)).toBe(HISTORY + 2);
    expect(m2.get('spark_runner_startup_seconds_count{host="spark-2"}')).toBe(HISTORY + 2);
    expect(
      m2.get('spark_runner_startup_seconds_bucket{host="spark-2",le="5"}')! -
        m1.get('spark_runner_startup_seconds_bucket{host="spark-2",le="5"}')!,
    ).toBe(2);
    expect(
      (m2.get('spark_reservations_ended_total{kind="development",status="done",outcome="released"}') ?? 0) -
        (m1.get('spark_reservations_ended_total{kind="development",status="done",outcome="released"}') ?? 0),
    ).toBe(2);
    expect(m2.get('spark_ledger_events_total{type="reservation.allocated"}')).toBeGreaterThanOrEqual(2);
  });
});
