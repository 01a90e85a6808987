import { join } from 'node:path';
import { createClient } from '@libsql/client';
import { asc, count } from 'drizzle-orm';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { parseConfig, type SparkConfigInput } from '../../core/config.ts';
import { leaseGrantsOf } from '../../core/events.ts';
import { isReleasableStatus } from '../../core/model.ts';
import { admissionPassStats } from '../../functions/ledger/admission-pass.ts';
import { type LedgerDb, openLedgerDb } from '../../functions/ledger/db.ts';
import { Ledger } from '../../functions/ledger/ledger.ts';
import { applyMigrations } from '../../functions/ledger/migrate.ts';
import { loadMigrations } from '../../functions/ledger/migrations-fs.ts';
import * as t from '../../functions/ledger/schema.ts';
import { openNodeLedger } from '../../functions/node-server.ts';
import { settingsFromEnv } from '../../functions/settings.ts';
import { type FakeSqld, type FakeSqldOptions, startFakeSqld } from '../../scripts/sim/fake-sqld/server.ts';
import { adoptAll, idleFacts, tempDir } from '../../scripts/sim/ledger.ts';
import { startTestController } from '../helpers/controller.ts';

/**
 * The ledger over a remote libSQL URL (Turso / sqld), through the same `@libsql/client` Node
 * client the controller uses: its http transport speaks Hrana over HTTP to a local fake sqld
 * (scripts/sim/fake-sqld) backed by a real libSQL file, one connection per stream, so every ledger
 * write is a real interactive transaction spread over several HTTP requests.
 */

const TOKEN = 'remote-ledger-test-token';

const config: SparkConfigInput = {
  hosts: [{ id: 'spark-1' }, { id: 'spark-2' }, { id: 'spark-3' }],
  budgets: { maxPrs: 50, maxGpusPerPr: 8, maxGpus: 8 },
};

// every server, client and temp dir a test opens is closed here, even when an assertion fails
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const fn of cleanups.splice(0).reverse()) await fn();
});

async function fakeSqld(opts: Omit<FakeSqldOptions, 'path'> = {}): Promise<FakeSqld> {
  const { dir, cleanup } = tempDir('spark-sqld-');
  cleanups.push(cleanup);
  const sqld = await startFakeSqld({ path: join(dir, 'sqld.db'), ...opts });
  cleanups.push(() => sqld.close());
  return sqld;
}

async function remoteStore(sqld: FakeSqld, authToken = TOKEN): Promise<LedgerDb> {
  const store = await openLedgerDb({ url: sqld.url, authToken, createClient });
  cleanups.push(() => store.close());
  return store;
}

async function remoteLedger(sqld: FakeSqld, cfg: SparkConfigInput = config): Promise<Ledger> {
  const store = await remoteStore(sqld);
  await applyMigrations(store, loadMigrations());
  const ledger = new Ledger(store, { config: parseConfig(cfg, 'test') });
  await ledger.syncHosts();
  return ledger;
}

/** Number of rows in the append-only history. */
async function eventCount(ledger: Ledger): Promise<number> {
  const [row] = await ledger.db.select({ n: count() }).from(t.events);
  return row!.n;
}

/**
 * Replays the history: per host, grants and releases strictly alternate and fencing tokens
 * strictly increase. Returns the number of grants seen.
 */
async function replayGrants(ledger: Ledger, ctx: string): Promise<number> {
  const events = await ledger.db.select().from(t.events).orderBy(asc(t.events.id));
  const holder = new Map<string, string | null>();
  const lastToken = new Map<string, number>();
  let grants = 0;
  for (const e of events) {
    // one `reservation.allocated` row per grant lists its leases (ADR 0100)
    for (const g of leaseGrantsOf(e)) {
      grants++;
      expect(holder.get(g.hostId) ?? null, `double grant of ${g.hostId} (event ${e.id}): ${ctx}`).toBeNull();
      expect(g.fencingToken, `fencing token on ${g.hostId}: ${ctx}`).toBeGreaterThan(
        lastToken.get(g.hostId) ?? 0,
      );
      holder.set(g.hostId, g.leaseId);
      lastToken.set(g.hostId, g.fencingToken);
    }
    if (e.type !== 'lease.released') continue;
    const data = JSON.parse(e.dataJson!) as { hostId: string };
    expect(holder.get(data.hostId), `release of a lease that does not hold ${data.hostId}: ${ctx}`).toBe(
      e.subjectId,
    );
    holder.set(data.hostId, null);
  }
  return grants;
}

describe('ledger on a remote libSQL server (Hrana over HTTP)', () => {
  it('runs the admission lifecycle with fencing over interactive remote transactions', async () => {
    const sqld = await fakeSqld({ authToken: TOKEN });
    const ledger = await remoteLedger(sqld);
    expect(ledger.store.local).toBe(false);

    // the committed migrations landed on the remote database, once
    const store2 = await remoteStore(sqld);
    expect(await applyMigrations(store2, loadMigrations())).toEqual([]);

    await adoptAll(ledger);
    const hosts = await ledger.db.select().from(t.hosts).orderBy(asc(t.hosts.id));
    expect(hosts.map((h) => [h.id, h.managed, h.phase])).toEqual([
      ['spark-1', true, 'idle'],
      ['spark-2', true, 'idle'],
      ['spark-3', true, 'idle'],
    ]);

    const base = {
      kind: 'manual' as const,
      repo: 'acme/iron',
      headSha: 'c'.repeat(40),
      suite: 'smoke' as const,
    };
    const single = await ledger.createReservation(
      { ...base, topology: 'single', pr: 1, requester: 'alice' },
      'test',
    );
    const pair = await ledger.createReservation(
      { ...base, topology: 'pair', pr: 2, requester: 'bob' },
      'test',
    );
    expect([single.id, pair.id]).toEqual(['r-1', 'r-2']);
    expect(single.status).toBe('queued');

    const pass = await ledger.admissionPass('test');
    const granted = new Map(pass.granted.map((g) => [g.reservationId, g.leases]));
    expect(granted.get(single.id)).toHaveLength(1);
    expect(granted.get(pair.id)).toHaveLength(2);
    const allLeases = [...granted.values()].flat();
    expect(new Set(allLeases.map((l) => l.hostId)).size).toBe(3);
    for (const l of allLeases) expect(l.fencingToken).toBeGreaterThan(0);
    expect((await ledger.getReservation(undefined, pair.id))!.status).toBe('allocated');
    expect((await ledger.admissionPass('test')).granted).toEqual([]);

    // release the single: releasing → confirmed clean → done, host back to idle
    const [lease] = granted.get(single.id)!;
    await ledger.beginRelease(single.id, 'passed', 'suite finished', 'test');
    expect((await ledger.leasesOf(undefined, single.id)).map((l) => l.status)).toEqual(['releasing']);
    const confirmed = await ledger.confirmReleased(lease!.hostId, lease!.fencingToken, 'agent');
    expect(confirmed.reservation.status).toBe('done');
    expect((await ledger.getHost(undefined, lease!.hostId))!.phase).toBe('idle');

    // stale fencing tokens are refused and the rolled-back transaction leaves no trace
    const before = await eventCount(ledger);
    const pairLeases = await ledger.leasesOf(undefined, pair.id);
    const held = pairLeases[0]!;
    await expect(
      ledger.confirmReleased(held.hostId, held.fencingToken + 1, 'impostor'),
    ).rejects.toMatchObject({ status: 409, code: 'stale_fencing_token' });
    await expect(
      ledger.confirmReleased(lease!.hostId, lease!.fencingToken, 'late agent'),
    ).rejects.toMatchObject({
      code: 'stale_fencing_token',
    });
    expect(await eventCount(ledger)).toBe(before);
    expect((await ledger.leasesOf(undefined, pair.id)).map((l) => l.status)).toEqual(['active', 'active']);
    expect((await ledger.getReservation(undefined, pair.id))!.status).toBe('allocated');

    // a new grant of a freed host gets a higher fencing token than any before it
    const next = await ledger.createReservation(
      { ...base, topology: 'single', pr: 3, requester: 'carol' },
      'test',
    );
    const again = await ledger.admissionPass('test');
    const [regrant] = again.granted.find((g) => g.reservationId === next.id)!.leases;
    expect(regrant!.hostId).toBe(lease!.hostId);
    expect(regrant!.fencingToken).toBeGreaterThan(lease!.fencingToken);
    expect(await replayGrants(ledger, 'lifecycle')).toBe(4);

    // everything went through real remote streams; none were abandoned
    expect(sqld.stats.pipelines).toBeGreaterThan(50);
    expect(sqld.stats.streamsExpired).toBe(0);
    expect(sqld.stats.unauthorized).toBe(0);
  });

  it('two ledger clients racing admission passes over http never double-grant', async () => {
    const sqld = await fakeSqld({ authToken: TOKEN });
    const first = await remoteLedger(sqld);
    await adoptAll(first);
    // the second controller is a separate client (own HTTP streams), as a second process would be
    const second = new Ledger(await remoteStore(sqld), { config: first.config });

    const OPS = 24;
    const race = async (ledger: Ledger, name: string, seed0: number) => {
      let seed = seed0 >>> 0;
      const rand = () => {
        // mulberry32, deterministic per racer so a failure can be replayed from the seed
        seed = (seed + 0x6d2b79f5) >>> 0;
        let x = seed;
        x = Math.imul(x ^ (x >>> 15), x | 1);
        x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
        return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
      };
      const created: string[] = [];
      let grants = 0;
      for (let i = 0; i < OPS; i++) {
        const x = rand();
        if (x < 0.4) {
          const r = await ledger.createReservation(
            {
              kind: 'manual',
              topology: rand() < 0.3 ? 'pair' : 'single',
              repo: 'acme/iron',
              pr: 1 + Math.floor(rand() * 40),
              headSha: 'c'.repeat(40),
              suite: 'smoke',
              requester: name,
            },
            name,
          );
          created.push(r.id);
        } else if (x < 0.75) {
          grants += (await ledger.admissionPass(name)).granted.length;
        } else if (x < 0.95) {
          const { resvRows } = await ledger.loadAdmissionInput(undefined);
          const active = resvRows.filter((r) => isReleasableStatus(r.status));
          const pick = active[Math.floor(rand() * active.length)];
          if (!pick) continue;
          try {
            await ledger.beginRelease(pick.id, 'passed', `${name} finished`, name);
            for (const l of await ledger.leasesOf(undefined, pick.id)) {
              if (l.status === 'releasing') await ledger.confirmReleased(l.hostId, l.fencingToken, name);
            }
          } catch (e) {
            // the other racer may have released it first: that surfaces as a 409 conflict
            const code = (e as { code?: string }).code;
            if (code !== 'not_active' && code !== 'stale_fencing_token') throw e;
          }
        } else {
          const h = ledger.config.hosts[Math.floor(rand() * ledger.config.hosts.length)]!;
          await ledger.recordHeartbeat(h.id, idleFacts());
        }
      }
      return { created, grants };
    };

    const seeds = [Date.now() % 100000, (Date.now() % 100000) + 7919];
    const ctx = `seeds ${seeds.join(',')}`;
    const [a, b] = await Promise.all([race(first, 'racer-a', seeds[0]!), race(second, 'racer-b', seeds[1]!)]);

    const created = [...a.created, ...b.created];
    expect(new Set(created).size, `duplicate reservation ids: ${ctx}`).toBe(created.length);
    const rows = await first.db.select().from(t.reservations);
    const ids = new Set(rows.map((r) => r.id));
    for (const id of created) expect(ids.has(id), `lost request ${id}: ${ctx}`).toBe(true);

    const grantsSeen = await replayGrants(first, ctx);
    expect(grantsSeen, 'every lease row has exactly one grant event').toBe(
      (await first.db.select().from(t.leases)).length,
    );
    const totalGrants = a.grants + b.grants;
    expect(totalGrants, `the race should actually grant work: ${ctx}`).toBeGreaterThan(1);
    expect(rows.filter((r) => r.grantedAt != null).length, ctx).toBe(totalGrants);
    // the two clients really contended: writers queued on the server's write lock
    expect(sqld.stats.writeLockWaits, ctx).toBeGreaterThan(0);
    expect(sqld.stats.streamsExpired).toBe(0);
  });

  it('a pass is two round trips: one read batch, one write batch', async () => {
    const sqld = await fakeSqld({ authToken: TOKEN });
    const ledger = await remoteLedger(sqld);
    await adoptAll(ledger);
    for (const pr of [1, 2]) {
      await ledger.createReservation(
        {
          kind: 'manual',
          topology: 'single',
          repo: 'acme/iron',
          pr,
          headSha: 'c'.repeat(40),
          requester: 't',
        },
        'test',
      );
    }
    await ledger.createReservation(
      { kind: 'manual', topology: 'pair', repo: 'acme/iron', pr: 3, headSha: 'c'.repeat(40), requester: 't' },
      'test',
    );
    const before = sqld.stats.requests;
    const pass = await ledger.admissionPass('test');
    // two singles granted, the pair waits for a second host: grants, a wait and its history row
    expect(pass.granted.map((g) => g.reservationId)).toEqual(['r-1', 'r-2']);
    expect(pass.plan.waits.map((w) => w.reservationId)).toEqual(['r-3']);
    expect(sqld.stats.requests - before).toBe(2);
    // a pass with nothing to write reads once
    const idle = sqld.stats.requests;
    expect((await ledger.admissionPass('test')).granted).toEqual([]);
    expect(sqld.stats.requests - idle).toBe(1);
    expect(admissionPassStats(ledger)).toEqual({
      batched: 2,
      conflicts: 0,
      interactive: 0,
      wholeQueueReads: 0,
    });
    expect(await replayGrants(ledger, 'two round trips')).toBe(2);
    expect((await ledger.getReservation(undefined, 'r-3'))!.waitCode).toBe('held-for-pair');
  });

  // Another controller changes what a pass decided on between its read batch and its write batch:
  // the guard fails the whole batch, the pass reads again and decides on what is there now.
  const interferences: [string, (other: Ledger) => Promise<unknown>][] = [
    ["another controller's pass grants the same request first", (other) => other.admissionPass('other')],
    ['the request is cancelled', (other) => other.cancelReservation('r-1', 'other')],
    ['the host is un-adopted', (other) => other.setManaged('spark-1', false, 'other')],
  ];
  for (const [what, interfere] of interferences) {
    it(`a pass whose write batch meets a change it did not read plans again: ${what}`, async () => {
      const sqld = await fakeSqld({ authToken: TOKEN });
      const one = { hosts: [{ id: 'spark-1' }], preferHosts: [], budgets: config.budgets };
      const first = await remoteLedger(sqld, one);
      await adoptAll(first);
      const other = new Ledger(await remoteStore(sqld), { config: first.config });
      const base = await remoteStore(sqld);
      let armed = true;
      const racing = new Ledger(
        {
          ...base,
          // the other controller acts right after this one's read, before its write
          async readBatch(stmts) {
            const rs = await base.readBatch(stmts);
            if (armed) {
              armed = false;
              await interfere(other);
            }
            return rs;
          },
        },
        { config: first.config },
      );
      await first.createReservation(
        {
          kind: 'manual',
          topology: 'single',
          repo: 'acme/iron',
          pr: 1,
          headSha: 'c'.repeat(40),
          requester: 't',
        },
        'test',
      );
      const pass = await racing.admissionPass('racing');
      expect(armed).toBe(false);
      expect(pass.granted, 'the racing pass grants nothing the change took away').toEqual([]);
      expect(admissionPassStats(racing)).toMatchObject({ batched: 1, conflicts: 1, interactive: 0 });
      const leases = await first.db.select().from(t.leases);
      expect(leases.length).toBe(what.startsWith("another controller's pass") ? 1 : 0);
      expect(await replayGrants(first, what)).toBe(leases.length);
    });
  }

  it('two controllers passing at once over a slow network never double-grant; the loser plans again', async () => {
    const sqld = await fakeSqld({ authToken: TOKEN, rttMs: 4 });
    const first = await remoteLedger(sqld);
    await adoptAll(first);
    const second = new Ledger(await remoteStore(sqld), { config: first.config });
    let pr = 0;
    const request = (ledger: Ledger, pair: boolean) =>
      ledger.createReservation(
        {
          kind: 'manual',
          topology: pair ? 'pair' : 'single',
          repo: 'acme/iron',
          pr: ++pr,
          headSha: 'c'.repeat(40),
          requester: 't',
        },
        'test',
      );
    let granted = 0;
    for (let round = 0; round < 8; round++) {
      await request(first, round % 3 === 0);
      await request(second, false);
      // both read the same state and plan the same grants; one write batch wins
      const [a, b] = await Promise.all([first.admissionPass('a'), second.admissionPass('b')]);
      for (const g of [...a.granted, ...b.granted]) granted += g.leases.length;
      const ids = [...a.granted, ...b.granted].map((g) => g.reservationId);
      expect(new Set(ids).size, `round ${round}: one request granted twice`).toBe(ids.length);
      // release everything granted so far, so the next round has hosts to race for
      const { resvRows } = await first.loadAdmissionInput(undefined);
      for (const r of resvRows.filter((x) => isReleasableStatus(x.status))) {
        await first.beginRelease(r.id, 'passed', 'done', 'test');
        for (const l of await first.leasesOf(undefined, r.id))
          if (l.status === 'releasing') await first.confirmReleased(l.hostId, l.fencingToken, 'agent');
      }
    }
    const conflicts = admissionPassStats(first).conflicts + admissionPassStats(second).conflicts;
    expect(conflicts, 'the two passes really raced').toBeGreaterThan(0);
    expect(granted).toBeGreaterThan(8);
    expect(await replayGrants(first, 'racing passes')).toBe(granted);
    expect((await first.db.select().from(t.leases)).length).toBe(granted);
    expect(sqld.stats.streamsExpired).toBe(0);
  });

  it('a wrong auth token is refused with a clear 401 error', async () => {
    const sqld = await fakeSqld({ authToken: TOKEN });
    const wrong = await remoteStore(sqld, 'not-the-token');
    await expect(applyMigrations(wrong, loadMigrations())).rejects.toMatchObject({
      code: 'SERVER_ERROR',
      message: expect.stringMatching(/HTTP status 401/),
    });
    // the controller's own start path (settings from env) fails the same way instead of starting
    const settings = settingsFromEnv(
      { SPARK_LEDGER_URL: sqld.url, SPARK_LEDGER_AUTH_TOKEN: 'also-wrong' },
      { text: JSON.stringify(config), source: 'test config' },
    );
    await expect(openNodeLedger(settings)).rejects.toThrow(/HTTP status 401/);
    expect(sqld.stats.unauthorized).toBe(2);
    expect(sqld.stats.pipelines).toBe(0);
  });

  it('a controller on the remote ledger serves health and fleet, and reports 503 when it goes away', async () => {
    const sqld = await fakeSqld({ authToken: TOKEN });
    const c = await startTestController({
      config,
      ledgerUrl: sqld.url,
      env: { SPARK_LEDGER_AUTH_TOKEN: TOKEN },
    });
    cleanups.push(() => c.close());
    expect(c.ledger.store.local).toBe(false);

    const health = await fetch(`${c.url}/healthz`);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ ok: true, ledger: 'reachable' });

    await adoptAll(c.ledger);
    const fleet = (await (await fetch(`${c.url}/api/v1/fleet`)).json()) as {
      hosts: { id: string; state: string }[];
    };
    expect(fleet.hosts.map((h) => [h.id, h.state])).toEqual([
      ['spark-1', 'idle'],
      ['spark-2', 'idle'],
      ['spark-3', 'idle'],
    ]);
    expect(sqld.stats.unauthorized).toBe(0);

    await sqld.close();
    const down = await fetch(`${c.url}/healthz`);
    expect(down.status).toBe(503);
    expect(await down.json()).toMatchObject({ error: { code: 'ledger_unreachable' } });
  });

  it('the stand-in behaves like sqld: abandoned streams roll back, stuck writers lose the lock', async () => {
    // two instances: one expires idle streams fast, the other steals the write lock fast
    const quickIdle = await fakeSqld({ streamIdleMs: 300 });
    const quickSteal = await fakeSqld({ txnTimeoutMs: 200 });
    const client = createClient({ url: quickIdle.url });
    cleanups.push(() => client.close());
    await client.execute('CREATE TABLE probe (who TEXT NOT NULL)');

    // a writer that goes silent inside its transaction is rolled back when its stream expires
    const abandoned = await client.transaction('write');
    await abandoned.execute("INSERT INTO probe VALUES ('abandoned')");
    await vi.waitFor(() => expect(quickIdle.stats.streamsExpired).toBe(1), { timeout: 5000, interval: 50 });
    await expect(abandoned.execute('SELECT 1')).rejects.toMatchObject({ code: 'STREAM_EXPIRED' });
    abandoned.close();
    expect((await client.execute('SELECT count(*) AS n FROM probe')).rows[0]!.n).toBe(0);

    // a writer waiting on a transaction that holds the lock too long takes it over (sqld's
    // lock stealing); the stuck one is rolled back and learns so on its next statement
    const other = createClient({ url: quickSteal.url });
    cleanups.push(() => other.close());
    await other.execute('CREATE TABLE probe (who TEXT NOT NULL)');
    const stuck = await other.transaction('write');
    await stuck.execute("INSERT INTO probe VALUES ('stuck')");
    const waiter = await other.transaction('write');
    await waiter.execute("INSERT INTO probe VALUES ('waiter')");
    await waiter.commit();
    expect(quickSteal.stats.writeLockWaits).toBe(1);
    expect(quickSteal.stats.txnsStolen).toBe(1);
    await expect(stuck.commit()).rejects.toMatchObject({ code: 'TRANSACTION_TIMEOUT' });
    stuck.close();
    expect((await other.execute('SELECT who FROM probe')).rows.map((r) => r.who)).toEqual(['waiter']);

    // Hrana 3 over JSON answers too (the 0.18 client settles on v2 without probing)
    expect((await fetch(`${quickSteal.url}/v3`)).status).toBe(200);
    expect((await fetch(`${quickSteal.url}/v3-protobuf`)).status).toBe(404);
    const v3 = await fetch(`${quickSteal.url}/v3/pipeline`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        baton: null,
        requests: [
          {
            type: 'batch',
            batch: {
              steps: [
                { stmt: { sql: 'BEGIN' } },
                {
                  condition: { type: 'not', cond: { type: 'is_autocommit' } },
                  stmt: { sql: 'SELECT count(*) FROM probe' },
                },
                { stmt: { sql: 'ROLLBACK' } },
              ],
            },
          },
          { type: 'get_autocommit' },
          { type: 'close' },
        ],
      }),
    });
    const body = (await v3.json()) as {
      baton: string | null;
      results: {
        type: string;
        response: { result?: { step_results: ({ rows: unknown[][] } | null)[] }; is_autocommit?: boolean };
      }[];
    };
    expect(body.baton).toBeNull();
    expect(body.results.map((r) => r.type)).toEqual(['ok', 'ok', 'ok']);
    expect(body.results[0]!.response.result!.step_results[1]!.rows).toEqual([
      [{ type: 'integer', value: '1' }],
    ]);
    expect(body.results[1]!.response).toEqual({ type: 'get_autocommit', is_autocommit: true });
  });
});
