import { join } from 'node:path';
import { createClient } from '@libsql/client';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { planAdmission } from '../../core/admission.ts';
import type { SparkConfigInput } from '../../core/config.ts';
import type { ReservationKind } from '../../core/model.ts';
import { admissionPassStats } from '../../functions/ledger/admission-pass.ts';
import { openLedgerDb } from '../../functions/ledger/db.ts';
import {
  Ledger,
  PERSISTED_WAITS_PER_PASS,
  toHostRecord,
  toLeaseRecord,
  toReservationRecord,
} from '../../functions/ledger/ledger.ts';
import * as t from '../../functions/ledger/schema.ts';
import { startFakeSqld } from '../../scripts/sim/fake-sqld/server.ts';
import { adoptAll, makeTestLedger, testClock } from '../../scripts/sim/ledger.ts';

/**
 * An admission pass over a long queue reads only its head (docs/adr/0187-scheduler-pass-measured-whole.md)
 * and must still write exactly what the plan of the whole queue says: the same grants on the same
 * hosts, the same queue timeouts, the same restores, and the same reason, position and wait code
 * for every request whose wait a pass persists. Random fleets (one or two pools), queues longer than
 * the head (every kind, pairs, targeted requests, several PRs and SHAs against small budgets, some
 * past their deadline), passes with work released between them; before each pass the whole queue
 * is planned from `loadAdmissionInput` at the pass's own clock reading, and the ledger compared
 * with it afterwards. On a local file ledger and on a remote one (batched pass).
 */

const RUNS = Number(process.env.SPARK_HEAD_RUNS ?? 12);
const KINDS: ReservationKind[] = ['development', 'manual', 'merge', 'benchmark', 'background', 'deckard'];

const scenario = fc.record({
  hosts: fc.integer({ min: 2, max: 6 }),
  twoPools: fc.boolean(),
  maxPrs: fc.integer({ min: 1, max: 4 }),
  maxGpusPerPr: fc.integer({ min: 1, max: 3 }),
  queue: fc.array(
    fc.record({
      kind: fc.constantFrom(...KINDS),
      pair: fc.integer({ min: 0, max: 5 }),
      target: fc.integer({ min: -3, max: 6 }),
      pr: fc.integer({ min: 1, max: 6 }),
      sha: fc.constantFrom('a', 'b'),
      old: fc.integer({ min: 0, max: 30 }),
    }),
    { minLength: PERSISTED_WAITS_PER_PASS + 20, maxLength: PERSISTED_WAITS_PER_PASS + 160 },
  ),
  releases: fc.array(fc.integer({ min: 0, max: 5 }), { minLength: 3, maxLength: 5 }),
});

type Scenario = typeof scenario extends fc.Arbitrary<infer T> ? T : never;

const totals = { passes: 0, wholeQueueReads: 0 };

async function check(s: Scenario, remote: boolean): Promise<void> {
  const clock = testClock();
  const config: SparkConfigInput = {
    hosts: Array.from({ length: s.hosts }, (_, i) => ({
      id: `spark-${i + 1}`,
      pool: s.twoPools && i % 2 ? 'b' : 'spark',
      ...(i === 0 ? { homeService: 'deckard' } : {}),
    })),
    pools: s.twoPools ? { spark: {}, b: {} } : { spark: {} },
    preferHosts: [],
    budgets: { maxPrs: s.maxPrs, maxGpusPerPr: s.maxGpusPerPr, maxGpus: 100 },
  };
  const local = await makeTestLedger({ config, clock, copyMigrated: true });
  let ledger = local.ledger;
  const closers: (() => unknown)[] = [() => local.close()];
  const start = clock();
  try {
    // the queue is written to the file first (fast), then served over HTTP when `remote`
    await adoptAll(ledger);
    await ledger.write(async (tx) => {
      for (const [i, q] of s.queue.entries()) {
        const pool = s.twoPools && i % 3 === 0 ? 'b' : 'spark';
        const target = q.target > 0 && q.target <= s.hosts ? `spark-${q.target}` : null;
        const kind = q.kind === 'deckard' && target !== 'spark-1' ? 'development' : q.kind;
        // some requests were queued long ago: their deadline passes during the run
        clock.set(start - q.old * 15 * 60_000);
        await ledger.createReservation(
          {
            kind,
            topology: q.pair === 0 && !target ? 'pair' : 'single',
            pool: target ? undefined : pool,
            targetHost: target,
            repo: kind === 'development' || kind === 'deckard' ? null : 'acme/iron',
            pr: kind === 'merge' || kind === 'development' || kind === 'deckard' ? null : q.pr,
            headSha: kind === 'development' || kind === 'deckard' ? null : q.sha.repeat(40),
            suite: kind === 'development' || kind === 'deckard' ? null : 'smoke',
            requester: 'test',
          },
          'test',
          tx,
        );
      }
    });
    if (remote) {
      local.ledger.store.close();
      const sqld = await startFakeSqld({ path: join(local.dir, 'spark.db') });
      const store = await openLedgerDb({ url: sqld.url, createClient });
      ledger = new Ledger(store, { config: local.ledger.config, clock });
      closers.unshift(
        () => store.close(),
        () => sqld.close(),
      );
    }
    clock.set(start);
    for (const [round, release] of [0, ...s.releases].entries()) {
      // some granted work ends and its hosts are confirmed clean before the next pass
      const { resvRows } = await ledger.loadAdmissionInput(undefined);
      const active = resvRows.filter((r) => r.status === 'allocated').slice(0, release);
      for (const r of active) {
        await ledger.beginRelease(r.id, 'passed', 'done', 'test');
        for (const l of await ledger.leasesOf(undefined, r.id))
          await ledger.confirmReleased(l.hostId, l.fencingToken, 'agent');
      }
      clock.advance(60_000 * (round + 1));
      await adoptAll(ledger);

      const whole = await ledger.loadAdmissionInput(undefined);
      const expected = planAdmission({
        now: clock(),
        config: ledger.config,
        hosts: whole.hostRows.map(toHostRecord),
        leases: whole.leaseRows.map(toLeaseRecord),
        reservations: whole.resvRows.map(toReservationRecord),
        keptSlots: whole.keptSlots,
      });
      const before = admissionPassStats(ledger).wholeQueueReads;
      const pass = await ledger.admissionPass('test');
      totals.passes++;
      totals.wholeQueueReads += admissionPassStats(ledger).wholeQueueReads - before;

      const ctx = `round ${round}`;
      expect(
        pass.granted.map((g) => [g.reservationId, g.leases.map((l) => l.hostId)]),
        `${ctx}: grants`,
      ).toEqual(expected.grants.map((g) => [g.reservationId, g.hostIds]));
      const rows = new Map((await ledger.db.select().from(t.reservations)).map((r) => [r.id, r]));
      for (const id of expected.queueTimeouts)
        expect(rows.get(id)!.outcome, `${ctx}: timeout ${id}`).toBe('queue_timeout');
      for (const r of expected.restores)
        expect(rows.get(r.reservationId)!.waitCode, `${ctx}: restore`).toBe('restoring');
      for (const w of expected.waits.slice(0, PERSISTED_WAITS_PER_PASS)) {
        const r = rows.get(w.reservationId)!;
        expect([r.status, r.reason, r.position, r.waitCode], `${ctx}: wait of ${w.reservationId}`).toEqual([
          'queued',
          w.reason,
          w.position,
          w.code,
        ]);
      }
    }
  } finally {
    for (const close of closers) await close();
  }
}

describe('a pass over a long queue reads its head and writes the whole queue’s plan', () => {
  afterAll(() => {
    // both ways were taken: a head that decided alone, and one that had to read the whole queue
    expect(totals.wholeQueueReads).toBeGreaterThan(0);
    expect(totals.wholeQueueReads).toBeLessThan(totals.passes);
  });

  it(`on a local ledger, over ${RUNS} random fleets and queues`, async () => {
    // endOnFailure: shrinking a 400-request queue takes longer than the failure report needs
    await fc.assert(
      fc.asyncProperty(scenario, (s) => check(s, false)),
      { numRuns: RUNS, endOnFailure: true },
    );
  }, 900_000);

  it(`on a remote ledger (batched passes), over ${Math.ceil(RUNS / 6)} random fleets and queues`, async () => {
    await fc.assert(
      fc.asyncProperty(scenario, (s) => check(s, true)),
      { numRuns: Math.ceil(RUNS / 6), endOnFailure: true },
    );
  }, 900_000);
});

describe('a row read past the head', () => {
  it('never takes a host a request between the head and it would take (the pass reads the whole queue)', async () => {
    // one PR slot, taken by PR 1's first lane: the head is a page of other PRs waiting on the
    // budget, a development request follows it, and PR 1's second lane (a kept lane, read past
    // the head for its slot) comes last. The whole queue gives the free host to the development
    // request; a plan of the head alone would give it to PR 1's lane.
    const clock = testClock();
    const { ledger, close } = await makeTestLedger({
      config: {
        hosts: [{ id: 'spark-1' }, { id: 'spark-2' }],
        preferHosts: [],
        budgets: { maxPrs: 1, maxGpusPerPr: 10, maxGpus: 100 },
      },
      clock,
      copyMigrated: true,
    });
    try {
      await adoptAll(ledger);
      const lane = (pr: number) =>
        ({
          kind: 'manual',
          topology: 'single',
          repo: 'acme/iron',
          pr,
          headSha: 'f'.repeat(40),
          suite: 'smoke',
          requester: 'test',
        }) as const;
      await ledger.createReservation(lane(1), 'test');
      expect((await ledger.admissionPass('test')).granted.map((g) => g.leases[0]!.hostId)).toEqual([
        'spark-1',
      ]);
      await ledger.write(async (tx) => {
        for (let pr = 2; pr < PERSISTED_WAITS_PER_PASS + 8; pr++)
          await ledger.createReservation(lane(pr), 'test', tx);
      });
      const dev = await ledger.createReservation(
        {
          kind: 'development',
          topology: 'single',
          priority: ledger.config.priorities.manual,
          requester: 'test',
        },
        'test',
      );
      const second = await ledger.createReservation(lane(1), 'test');

      const before = admissionPassStats(ledger).wholeQueueReads;
      const pass = await ledger.admissionPass('test');
      expect(pass.granted.map((g) => [g.reservationId, g.leases.map((l) => l.hostId)])).toEqual([
        [dev.id, ['spark-2']],
      ]);
      expect(admissionPassStats(ledger).wholeQueueReads - before).toBe(1);
      expect((await ledger.getReservation(undefined, second.id))!.status).toBe('queued');
    } finally {
      close();
    }
  });
});
