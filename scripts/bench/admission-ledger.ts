/**
 * The admission bench's two sides, each able to run in short slices so the bench can interleave
 * them in one run (docs/adr/0186-admission-measured-with-one-client.md): one-row write
 * transactions (the physical floor) and the ledger's mixed admission stream.
 */
import { join } from 'node:path';
import { parseConfig, type SparkConfig } from '../../core/config.ts';
import type { HostFacts } from '../../core/model.ts';
import { openLedgerDb } from '../../functions/ledger/db.ts';
import { Ledger, type TransitionHook } from '../../functions/ledger/ledger.ts';
import { applyMigrations } from '../../functions/ledger/migrate.ts';
import { loadMigrations } from '../../functions/ledger/migrations-fs.ts';
import { createNodeLedgerClient } from '../../functions/ledger/node-client.ts';
import { type ClientFactory, openRawWrites } from '../../functions/ledger/raw-baseline.ts';
import type { StatementTimes } from './admission-statements.ts';

export type { ClientFactory };

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

export const round = (n: number, d = 2) => Math.round(n * 10 ** d) / 10 ** d;

/** This process's CPU time (user + system) in ms: robust where wall time is shared with other work. */
export function cpuNowMs(): number {
  const c = process.cpuUsage();
  return (c.user + c.system) / 1000;
}

export const BENCH_FACTS: HostFacts = {
  gpuProcesses: [],
  freeDiskBytes: 1e12,
  serviceState: 'none',
  runnerState: 'none',
  interconnectOk: true,
};

/** Sums of one side over its slices. */
export interface Tally {
  /** Things done: transactions (raw) or grants persisted (admission). */
  n: number;
  /** Timed wall time, ms. */
  ms: number;
  /** Timed CPU time of this process, ms. */
  cpuMs: number;
}

/** One-row INSERT transactions through `client` (functions/ledger/raw-baseline.ts), nothing else: the floor a ledger write stands on. */
export async function openRawSide(dir: string, client: ClientFactory, name: string) {
  const raw = await openRawWrites(`file:${join(dir, `raw-${name}.db`)}`, client);
  const tally: Tally = { n: 0, ms: 0, cpuMs: 0 };
  return {
    tally,
    /** Runs transactions for `ms` of wall time. */
    async runFor(ms: number) {
      const c0 = cpuNowMs();
      const t0 = performance.now();
      const end = t0 + ms;
      let n = 0;
      while (performance.now() < end) {
        await raw.writeOne(`row-${tally.n + n}`);
        n++;
      }
      tally.n += n;
      tally.ms += performance.now() - t0;
      tally.cpuMs += cpuNowMs() - c0;
    },
    close: () => raw.close(),
  };
}

/** A migrated ledger with `hostCount` adopted, heartbeating hosts and no budget in the way. */
export async function benchLedger(opts: {
  url: string;
  client: ClientFactory;
  hostCount: number;
  clock?: () => number;
  hooks?: (ledger: Ledger) => TransitionHook[];
  /** Queue each event's GitHub outbox rows, as a controller with the GitHub part does. */
  githubEffects?: boolean;
  config?: Partial<Parameters<typeof parseConfig>[0]>;
  /** What every host's heartbeat reports (default {@link BENCH_FACTS}). */
  facts?: HostFacts;
}) {
  const config: SparkConfig = parseConfig(
    {
      hosts: Array.from({ length: opts.hostCount }, (_, i) => ({ id: `spark-${i + 1}` })),
      preferHosts: [],
      budgets: { maxPrs: 100_000, maxGpusPerPr: 100_000, maxGpus: 100_000 },
      ...opts.config,
    },
    'bench',
  );
  const store = await openLedgerDb({ url: opts.url, createClient: opts.client });
  await applyMigrations(store, loadMigrations());
  const ledger = new Ledger(store, {
    config,
    ...(opts.clock ? { clock: opts.clock } : {}),
    githubEffects: opts.githubEffects ?? false,
  });
  for (const h of opts.hooks?.(ledger) ?? []) ledger.addHook(h);
  await ledger.syncHosts();
  for (const h of config.hosts) {
    await ledger.setManaged(h.id, true, 'bench');
    await ledger.recordHeartbeat(h.id, opts.facts ?? BENCH_FACTS);
  }
  return { store, ledger, config };
}

/**
 * The mixed stream: alternating bursts of 16 requests and single requests on a 16-host
 * fleet; only the admission passes are timed (a burst shares one pass, hence the single-request
 * figure beside it). Requests and releases between passes are not timed.
 */
export async function openAdmissionSide(
  dir: string,
  client: ClientFactory = createNodeLedgerClient,
  name = 'mixed',
  /** When given, each statement of the timed passes is timed into it (admission-statements.ts). */
  times?: StatementTimes,
) {
  const hostCount = 16;
  const { store, ledger } = await benchLedger({
    url: `file:${join(dir, `ledger-${name}.db`)}`,
    client: times ? times.wrap(client) : client,
    hostCount,
  });
  const tally: Tally = { n: 0, ms: 0, cpuMs: 0 };
  const single = { passes: 0, ms: 0 };
  let round_ = 0;
  let beat = performance.now();
  return {
    tally,
    single,
    /** Runs whole rounds (requests, a timed pass, releases) for about `ms` of wall time. */
    async runFor(ms: number) {
      const end = performance.now() + ms;
      while (performance.now() < end) {
        const burst = round_ % 2 === 0 ? hostCount : 1;
        for (let i = 0; i < burst; i++) {
          await ledger.createReservation(
            {
              kind: 'manual',
              topology: 'single',
              repo: 'acme/iron',
              pr: i + 1,
              headSha: 'f'.repeat(40),
              requester: 'bench',
            },
            'bench',
          );
        }
        if (times) times.on = true;
        const c0 = cpuNowMs();
        const t0 = performance.now();
        const res = await ledger.admissionPass('bench');
        const dt = performance.now() - t0;
        tally.cpuMs += cpuNowMs() - c0;
        if (times) {
          times.on = false;
          times.passes++;
        }
        tally.ms += dt;
        tally.n += res.granted.length;
        if (res.granted.length !== burst)
          throw new Error(`round ${round_}: ${burst} requests, ${res.granted.length} granted`);
        if (burst === 1) {
          single.passes++;
          single.ms += dt;
        }
        for (const g of res.granted) {
          await ledger.beginRelease(g.reservationId, 'passed', 'bench', 'bench');
          for (const l of g.leases) await ledger.confirmReleased(l.hostId, l.fencingToken, 'bench');
        }
        // heartbeats keep every host online however long the run (not timed)
        if (performance.now() - beat > 10_000) {
          for (let h = 1; h <= hostCount; h++) await ledger.recordHeartbeat(`spark-${h}`, BENCH_FACTS);
          beat = performance.now();
        }
        round_++;
      }
    },
    close: () => store.close(),
  };
}

/**
 * The end-to-end cycle, all of it timed: a request is created, an admission pass grants it, the
 * work is released and the agent confirms the host clean — the ledger's whole path for one job.
 */
export async function cyclesPerSecond(dir: string, seconds: number) {
  const { store, ledger } = await benchLedger({
    url: `file:${join(dir, 'ledger-cycle.db')}`,
    client: createNodeLedgerClient,
    hostCount: 16,
  });
  let cycles = 0;
  const start = performance.now();
  const end = start + seconds * 1000;
  while (performance.now() < end) {
    await ledger.createReservation(
      {
        kind: 'manual',
        topology: 'single',
        repo: 'acme/iron',
        pr: (cycles % 50) + 1,
        headSha: 'e'.repeat(40),
        requester: 'bench',
      },
      'bench',
    );
    const res = await ledger.admissionPass('bench');
    const g = res.granted[0];
    if (!g)
      throw new Error(`cycle ${cycles}: the pass granted nothing (${JSON.stringify(res.plan.waits[0])})`);
    await ledger.beginRelease(g.reservationId, 'passed', 'bench', 'bench');
    for (const l of g.leases) await ledger.confirmReleased(l.hostId, l.fencingToken, 'bench');
    cycles++;
  }
  const perS = cycles / ((performance.now() - start) / 1000);
  store.close();
  return { perS, cycles };
}
