import { createClient } from '@libsql/client';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../core/config.ts';
import { queueOrder } from '../../core/model.ts';
import { openLedgerDb } from '../../functions/ledger/db.ts';
import { Ledger, type PassResult, toReservationRecord } from '../../functions/ledger/ledger.ts';
import { applyMigrations, type Migration } from '../../functions/ledger/migrate.ts';
import { loadMigrations } from '../../functions/ledger/migrations-fs.ts';
import * as t from '../../functions/ledger/schema.ts';
import { idleFacts, servingFacts, testClock } from '../helpers/ledger.ts';

/**
 * Model-based test (fast-check `commands`) of the real ledger + admission engine on a real libSQL
 * database: random sequences of request / cancel / heartbeat / release / expire / new-SHA events,
 * checked after every step against a reference model and the admission invariants of DESIGN.md.
 * `npm test` runs 1,000 sequences; `npm run test:long` runs 10,000. A failure prints seed and path.
 */

const LONG = process.env.SPARK_TEST_LONG === '1';
const RUNS = Number(process.env.SPARK_MODEL_RUNS ?? (LONG ? 10_000 : 1_000));
const HOSTS = ['spark-1', 'spark-2', 'spark-3'];
const config = parseConfig(
  {
    hosts: [{ id: 'spark-1', homeService: 'deckard' }, { id: 'spark-2' }, { id: 'spark-3' }],
    budgets: { maxPrs: 2, maxGpusPerPr: 2, maxGpus: 3 },
    timings: { offlineAfterS: 40, heartbeatIntervalS: 10, ciLeaseTtlS: 300, devLeaseDefaultTtlS: 600 },
  },
  'model test',
);
const migrations: Migration[] = loadMigrations();

type Status = 'queued' | 'active' | 'ended';
interface Model {
  /** What the reference model expects of each reservation (by id). */
  status: Map<string, Status>;
  /** Reservations released by an explicit command (the only legal way active work ends here). */
  releasedByCommand: Set<string>;
  pr: Map<string, number | null>;
  headShaOfPr: Map<number, string>;
  shaOf: Map<string, string | null>;
}

interface Real {
  ledger: Ledger;
  clock: ReturnType<typeof testClock>;
  close(): void;
}

async function freshReal(): Promise<Real> {
  const clock = testClock();
  const store = await openLedgerDb({ url: ':memory:', createClient });
  await applyMigrations(store, migrations);
  const ledger = new Ledger(store, { config, clock });
  await ledger.syncHosts();
  for (const h of HOSTS) {
    await ledger.setManaged(h, true, 'model');
    await ledger.recordHeartbeat(h, h === 'spark-1' ? servingFacts() : idleFacts());
  }
  return { ledger, clock, close: () => store.close() };
}

async function checkInvariants(m: Model, r: Real, pass: PassResult | null) {
  const db = r.ledger.db;
  const leases = await db.select().from(t.leases);
  const resv = await db.select().from(t.reservations);
  const byId = new Map(resv.map((x) => [x.id, x]));

  // rule 2: no host in two binding leases
  const binding = leases.filter((l) => ['active', 'expired', 'releasing'].includes(l.status));
  const hostsBound = binding.map((l) => l.hostId);
  expect(new Set(hostsBound).size, `a host is in two binding leases: ${hostsBound}`).toBe(hostsBound.length);

  // fencing tokens strictly increase per host, in grant order
  for (const h of HOSTS) {
    const tokens = leases
      .filter((l) => l.hostId === h)
      .sort((a, b) => a.grantedAt - b.grantedAt || a.fencingToken - b.fencingToken)
      .map((l) => l.fencingToken);
    for (let i = 1; i < tokens.length; i++)
      expect(tokens[i]!, `fencing tokens for ${h}`).toBeGreaterThan(tokens[i - 1]!);
  }

  // rule 3: pairs are all-or-nothing; singles have exactly one lease
  for (const x of resv) {
    const mine = leases.filter((l) => l.reservationId === x.id);
    if (x.status === 'queued' || x.status === 'cancelled' || x.status === 'superseded') {
      expect(mine.length, `${x.id} (${x.status}) has leases`).toBe(0);
    } else if (x.grantedAt != null) {
      expect(mine.length, `${x.id} ${x.topology} lease count`).toBe(x.topology === 'pair' ? 2 : 1);
      expect(new Set(mine.map((l) => l.grantedAt)).size, `${x.id} leases granted together`).toBe(1);
    }
  }

  // the model: statuses match; active work only ends by its own release
  for (const [id, expected] of m.status) {
    const row = byId.get(id)!;
    if (expected === 'queued') {
      // the real system may have granted it; it must not have ended
      expect(
        ['queued', 'allocated'].includes(row.status) || row.status === 'failed',
        `${id}: ${row.status}`,
      ).toBe(true);
      if (row.status === 'allocated') m.status.set(id, 'active');
      if (row.status === 'failed') {
        expect(row.outcome, `${id} failed while queued must be a queue timeout`).toBe('queue_timeout');
        m.status.set(id, 'ended');
      }
    } else if (expected === 'active') {
      expect(
        ['allocated', 'preparing', 'running', 'releasing'].includes(row.status),
        `${id} active, is ${row.status}`,
      ).toBe(true);
    }
  }
  for (const l of leases.filter((l) => l.status === 'released')) {
    expect(m.releasedByCommand.has(l.reservationId), `lease ${l.id} ended without a release`).toBe(true);
  }

  // rule 6: budgets never exceeded
  const active = resv.filter((x) => ['allocated', 'preparing', 'running', 'releasing'].includes(x.status));
  const prs = new Set(active.filter((x) => x.pr != null).map((x) => `${x.repo}#${x.pr}`));
  expect(prs.size).toBeLessThanOrEqual(config.budgets.maxPrs);
  const gpus = binding.length;
  expect(gpus).toBeLessThanOrEqual(config.budgets.maxGpus);
  for (const p of prs) {
    const n = binding.filter((l) => {
      const x = byId.get(l.reservationId)!;
      return `${x.repo}#${x.pr}` === p;
    }).length;
    expect(n).toBeLessThanOrEqual(config.budgets.maxGpusPerPr);
  }

  // rule 1: nothing granted past an earlier request that could have used the same free host
  if (pass) {
    const granted = new Set(pass.plan.grants.map((g) => g.reservationId));
    for (const g of pass.plan.grants) {
      const gr = toReservationRecord(byId.get(g.reservationId)!);
      for (const w of pass.plan.waits) {
        const q = toReservationRecord(byId.get(w.reservationId)!);
        if (granted.has(q.id) || queueOrder(q, gr) >= 0) continue;
        if (q.pool !== gr.pool || q.targetHost) continue;
        // an earlier request blocked on hosts took (or held) every free host of its pool first,
        // so a later one cannot have been granted a host there (rule 1 and the pair hold of rule 3)
        expect(
          ['hosts-busy', 'held-for-pair'].includes(w.code),
          `${gr.id} granted ${g.hostIds} while earlier ${q.id} waits: ${w.reason}`,
        ).toBe(false);
      }
    }
  }
}

let passOf: PassResult | null = null;
async function pass(r: Real) {
  passOf = await r.ledger.admissionPass('model');
  return passOf;
}

class RequestCmd implements fc.AsyncCommand<Model, Real> {
  constructor(
    readonly kind: 'development' | 'manual' | 'merge' | 'background',
    readonly topology: 'single' | 'pair',
    readonly pr: number,
    readonly target: string | null,
  ) {}
  check() {
    return true;
  }
  async run(m: Model, r: Real) {
    const dev = this.kind === 'development';
    const sha = m.headShaOfPr.get(this.pr) ?? 'a'.repeat(40);
    const row = await r.ledger.createReservation(
      {
        kind: this.kind,
        topology: this.topology,
        targetHost: dev ? this.target : null,
        repo: dev ? null : 'acme/iron',
        pr: dev ? null : this.pr,
        headSha: dev ? null : sha,
        suite: 'smoke',
        requester: 'model',
      },
      'model',
    );
    m.status.set(row.id, 'queued');
    m.pr.set(row.id, dev ? null : this.pr);
    m.shaOf.set(row.id, dev ? null : sha);
    await checkInvariants(m, r, await pass(r));
  }
  toString() {
    return `request(${this.kind},${this.topology},pr${this.pr},${this.target ?? '-'})`;
  }
}

class CancelCmd implements fc.AsyncCommand<Model, Real> {
  constructor(readonly pick: number) {}
  check(m: Model) {
    return m.status.size > 0;
  }
  async run(m: Model, r: Real) {
    const ids = [...m.status.keys()];
    const id = ids[this.pick % ids.length]!;
    const row = (await r.ledger.getReservation(undefined, id))!;
    if (row.status === 'queued') {
      await r.ledger.cancelReservation(id, 'model');
      m.status.set(id, 'ended');
    } else {
      await expect(r.ledger.cancelReservation(id, 'model')).rejects.toMatchObject({
        status: expect.any(Number),
      });
    }
    await checkInvariants(m, r, await pass(r));
  }
  toString() {
    return `cancel(#${this.pick})`;
  }
}

class ReleaseCmd implements fc.AsyncCommand<Model, Real> {
  constructor(readonly pick: number) {}
  check(m: Model) {
    return [...m.status.values()].includes('active');
  }
  async run(m: Model, r: Real) {
    const ids = [...m.status.entries()].filter(([, s]) => s === 'active').map(([id]) => id);
    const id = ids[this.pick % ids.length]!;
    m.releasedByCommand.add(id);
    await r.ledger.beginRelease(id, 'passed', 'work finished', 'model');
    for (const l of await r.ledger.leasesOf(undefined, id)) {
      if (l.status === 'released') continue;
      const host = (await r.ledger.getHost(undefined, l.hostId))!;
      if (host.phase === 'release-required') {
        // the agent reports the leftover processes gone first
        await r.ledger.recordHeartbeat(l.hostId, idleFacts());
      }
      await r.ledger.confirmReleased(l.hostId, l.fencingToken, 'agent');
      const after = (await r.ledger.getHost(undefined, l.hostId))!;
      if (after.phase === 'restoring') await r.ledger.recordRestore(l.hostId, true, 'model-ready', 'agent');
    }
    m.status.set(id, 'ended');
    await checkInvariants(m, r, await pass(r));
  }
  toString() {
    return `release(#${this.pick})`;
  }
}

class StaleConfirmCmd implements fc.AsyncCommand<Model, Real> {
  constructor(readonly host: string) {}
  check() {
    return true;
  }
  async run(m: Model, r: Real) {
    const h = (await r.ledger.getHost(undefined, this.host))!;
    const before = await r.ledger.db.select().from(t.events);
    // a token that was never issued (or is old) is rejected and changes nothing
    await expect(r.ledger.confirmReleased(this.host, h.fencingToken + 7, 'agent')).rejects.toMatchObject({
      code: 'stale_fencing_token',
    });
    const after = await r.ledger.db.select().from(t.events);
    expect(after.length).toBe(before.length);
    await checkInvariants(m, r, null);
  }
  toString() {
    return `staleConfirm(${this.host})`;
  }
}

class HeartbeatCmd implements fc.AsyncCommand<Model, Real> {
  constructor(
    readonly host: string,
    readonly procs: number,
    readonly advanceS: number,
  ) {}
  check() {
    return true;
  }
  async run(m: Model, r: Real) {
    r.clock.advance(this.advanceS * 1000);
    const h = (await r.ledger.getHost(undefined, this.host))!;
    const facts =
      h.homeService && (h.phase === 'service' || h.phase === 'idle')
        ? servingFacts()
        : idleFacts({
            gpuProcesses: Array.from({ length: this.procs }, (_, i) => ({
              pid: 100 + i,
              name: 'job',
              usedMemoryMiB: 5,
            })),
          });
    // processes outside a lease would keep an idle host out; the model sends them only to leased hosts
    const leased = h.phase === 'allocated' || h.phase === 'release-required';
    await r.ledger.recordHeartbeat(this.host, leased || h.homeService ? facts : idleFacts());
    await checkInvariants(m, r, await pass(r));
  }
  toString() {
    return `heartbeat(${this.host},procs=${this.procs},+${this.advanceS}s)`;
  }
}

class ExpireCmd implements fc.AsyncCommand<Model, Real> {
  check() {
    return true;
  }
  async run(m: Model, r: Real) {
    // jump past every lease TTL with no heartbeat in between, so CI leases expire too
    r.clock.advance(config.timings.devLeaseDefaultTtlS * 1000 + 1000);
    const p = await pass(r);
    for (const ex of p.plan.expiries) {
      // active work is not ended by expiry: it stays bound (release-required) or awaits the agent
      expect(m.status.get(ex.reservationId)).toBe('active');
    }
    for (const h of HOSTS) {
      const row = (await r.ledger.getHost(undefined, h))!;
      await r.ledger.recordHeartbeat(
        h,
        row.homeService && row.phase === 'service' ? servingFacts() : idleFacts(),
      );
    }
    await checkInvariants(m, r, await pass(r));
  }
  toString() {
    return 'expire()';
  }
}

class NewShaCmd implements fc.AsyncCommand<Model, Real> {
  constructor(
    readonly pr: number,
    readonly sha: string,
  ) {}
  check() {
    return true;
  }
  async run(m: Model, r: Real) {
    m.headShaOfPr.set(this.pr, this.sha);
    const superseded = await r.ledger.supersedeQueued('acme/iron', this.pr, this.sha, 'model');
    for (const x of superseded) {
      expect(m.status.get(x.id)).toBe('queued');
      m.status.set(x.id, 'ended');
    }
    // active work for the PR keeps the SHA it was admitted with
    for (const [id, s] of m.status) {
      if (s !== 'active' || m.pr.get(id) !== this.pr) continue;
      const row = (await r.ledger.getReservation(undefined, id))!;
      expect(row.headSha).toBe(m.shaOf.get(id));
    }
    await checkInvariants(m, r, await pass(r));
  }
  toString() {
    return `newSha(pr${this.pr},${this.sha.slice(0, 7)})`;
  }
}

const request = fc
  .tuple(
    fc.constantFrom('development', 'manual', 'merge', 'background'),
    fc.constantFrom('single', 'single', 'pair'),
    fc.integer({ min: 1, max: 4 }),
    fc.constantFrom(null, null, 'spark-1', 'spark-2'),
  )
  .map(([k, tp, pr, tg]) => new RequestCmd(k as RequestCmd['kind'], tp as 'single' | 'pair', pr, tg));

// requests and releases are listed more than once so sequences keep the fleet busy
const commands = [
  request,
  request,
  request,
  request,
  fc.nat().map((n) => new CancelCmd(n)),
  fc.nat().map((n) => new ReleaseCmd(n)),
  fc.nat().map((n) => new ReleaseCmd(n)),
  fc
    .tuple(fc.constantFrom(...HOSTS), fc.integer({ min: 0, max: 2 }), fc.integer({ min: 0, max: 20 }))
    .map(([h, p, s]) => new HeartbeatCmd(h, p, s)),
  fc.constant(new ExpireCmd()),
  fc
    .tuple(fc.integer({ min: 1, max: 4 }), fc.stringMatching(/^[0-9a-f]{40}$/))
    .map(([pr, sha]) => new NewShaCmd(pr, sha)),
  fc.constantFrom(...HOSTS).map((h) => new StaleConfirmCmd(h)),
];

describe('ledger + admission, model-based', () => {
  it(
    `holds every admission invariant over ${RUNS} random event sequences`,
    async () => {
      await fc.assert(
        fc.asyncProperty(fc.commands(commands, { maxCommands: 15, size: 'medium' }), async (cmds) => {
          const real = await freshReal();
          const model: Model = {
            status: new Map(),
            releasedByCommand: new Set(),
            pr: new Map(),
            headShaOfPr: new Map(),
            shaOf: new Map(),
          };
          try {
            await fc.asyncModelRun(() => ({ model, real }), cmds);
          } finally {
            real.close();
          }
        }),
        {
          numRuns: RUNS,
          verbose: 1,
          // fast-check prints the seed and the shrunk command path on failure
          reporter: (out) => {
            if (out.failed) throw new Error(fc.defaultReportMessage(out) ?? 'property failed');
          },
        },
      );
    },
    LONG ? 3_600_000 : 900_000,
  );
});
