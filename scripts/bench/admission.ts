/**
 * Admission benchmarks (issue 2):
 * - `admission`: grants persisted per second by real admission passes on a libSQL file (WAL),
 *   against single-row write transactions per second measured in the same run on the same kind of
 *   file, so the ratio is honest.
 * - `scheduler`: the pure admission engine's pass time over queued × hosts.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Client, createClient } from '@libsql/client';
import { planAdmission } from '../../core/admission.ts';
import { parseConfig } from '../../core/config.ts';
import type { HostRecord, LeaseRecord, ReservationRecord } from '../../core/model.ts';
import { openLedgerDb } from '../../functions/ledger/db.ts';
import { Ledger } from '../../functions/ledger/ledger.ts';
import { applyMigrations } from '../../functions/ledger/migrate.ts';
import { loadMigrations } from '../../functions/ledger/migrations-fs.ts';
import { createNodeLedgerClient } from '../../functions/ledger/node-client.ts';
import type { BenchRunner, BenchSection } from './types.ts';

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

const round = (n: number, d = 2) => Math.round(n * 10 ** d) / 10 ** d;

type ClientFactory = (cfg: { url: string; timeout?: number; concurrency?: number }) => Client;

/** The physical limit: one-row INSERT transactions through the given client, nothing else. */
export async function rawWriteTxPerSecond(
  dir: string,
  seconds: number,
  client: ClientFactory,
  name: string,
): Promise<number> {
  const store = await openLedgerDb({ url: `file:${join(dir, `raw-${name}.db`)}`, createClient: client });
  await store.client.execute('CREATE TABLE IF NOT EXISTS scratch (id INTEGER PRIMARY KEY, v TEXT NOT NULL)');
  let n = 0;
  const end = performance.now() + seconds * 1000;
  const start = performance.now();
  while (performance.now() < end) {
    const tx = await store.client.transaction('write');
    await tx.execute({ sql: 'INSERT INTO scratch (v) VALUES (?)', args: [`row-${n}`] });
    await tx.commit();
    n++;
  }
  const rate = n / ((performance.now() - start) / 1000);
  store.close();
  return rate;
}

async function benchLedger(dir: string, name: string, client: ClientFactory = createNodeLedgerClient) {
  const hostCount = 16;
  const config = parseConfig(
    {
      hosts: Array.from({ length: hostCount }, (_, i) => ({ id: `spark-${i + 1}` })),
      preferHosts: [],
      budgets: { maxPrs: 1000, maxGpusPerPr: 1000, maxGpus: 1000 },
    },
    'bench',
  );
  const store = await openLedgerDb({
    url: `file:${join(dir, `ledger-${name}.db`)}`,
    createClient: client,
  });
  await applyMigrations(store, loadMigrations());
  const ledger = new Ledger(store, { config });
  await ledger.syncHosts();
  for (const h of config.hosts) {
    await ledger.setManaged(h.id, true, 'bench');
    await ledger.recordHeartbeat(h.id, {
      gpuProcesses: [],
      freeDiskBytes: 1e12,
      serviceState: 'none',
      runnerState: 'none',
      interconnectOk: true,
    });
  }
  return { store, ledger, hostCount };
}

/**
 * The mixed stream (issue 13): alternating bursts of 16 requests and single requests; only the
 * admission passes are timed (a burst shares one pass, hence the single-request figure beside it).
 */
export async function persistedAdmissionsPerSecond(
  dir: string,
  seconds: number,
  client: ClientFactory = createNodeLedgerClient,
  name = 'mixed',
) {
  const { store, ledger, hostCount } = await benchLedger(dir, name, client);
  let grants = 0;
  let passMs = 0;
  let singleGrantPasses = 0;
  let singleGrantMs = 0;
  const end = performance.now() + seconds * 1000;
  let round_ = 0;
  while (performance.now() < end) {
    // a burst of requests (not timed), then the passes that admit them (timed), then releases
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
    const t0 = performance.now();
    const res = await ledger.admissionPass('bench');
    const dt = performance.now() - t0;
    passMs += dt;
    grants += res.granted.length;
    if (burst === 1) {
      singleGrantPasses++;
      singleGrantMs += dt;
    }
    for (const g of res.granted) {
      await ledger.beginRelease(g.reservationId, 'passed', 'bench', 'bench');
      for (const l of g.leases) await ledger.confirmReleased(l.hostId, l.fencingToken, 'bench');
    }
    round_++;
  }
  store.close();
  return {
    persistedPerS: grants / (passMs / 1000),
    singleGrantPassPerS: singleGrantPasses / (singleGrantMs / 1000),
    grants,
  };
}

/**
 * The end-to-end cycle, all of it timed: a request is created, an admission pass grants it, the
 * work is released and the agent confirms the host clean — the ledger's whole path for one job.
 */
export async function cyclesPerSecond(dir: string, seconds: number) {
  const { store, ledger } = await benchLedger(dir, 'cycle');
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

export function schedulerInput(queued: number, hosts: number) {
  const now = Date.UTC(2026, 10, 30, 9);
  const hostRecs: HostRecord[] = Array.from({ length: hosts }, (_, i) => ({
    id: `spark-${i + 1}`,
    pool: 'spark',
    gpus: 1,
    homeService: i === 0 ? 'deckard' : null,
    managed: true,
    phase: i === 0 ? 'service' : i % 2 === 0 ? 'allocated' : 'idle',
    lastHeartbeatAt: now - 1000,
    facts: {
      gpuProcesses: [],
      freeDiskBytes: 1e12,
      serviceState: i === 0 ? 'serving' : 'none',
      runnerState: 'none',
      interconnectOk: true,
    },
  }));
  const reservations: ReservationRecord[] = [];
  const leases: LeaseRecord[] = [];
  // half the hosts run active work so the pass sees a realistic mix of busy and free hosts
  hostRecs.forEach((h, i) => {
    if (h.phase !== 'allocated') return;
    const id = `a-${i}`;
    reservations.push({
      id,
      seq: i,
      kind: 'manual',
      priority: 80,
      topology: 'single',
      pool: 'spark',
      targetHost: null,
      repo: 'acme/iron',
      pr: i,
      headSha: 'a'.repeat(40),
      suite: 'smoke',
      requester: 'bench',
      status: 'running',
      createdAt: now - 60000,
      queueDeadline: now + 3600000,
      ttlS: null,
    });
    leases.push({
      id: `l-${i}`,
      reservationId: id,
      hostId: h.id,
      fencingToken: 1,
      status: 'active',
      grantedAt: now - 60000,
      expiresAt: now + 600000,
    });
  });
  const kinds = ['development', 'manual', 'merge', 'benchmark', 'background'] as const;
  const prio = { development: 100, manual: 80, merge: 70, benchmark: 50, background: 20 } as const;
  for (let i = 0; i < queued; i++) {
    const kind = kinds[i % kinds.length]!;
    reservations.push({
      id: `q-${i}`,
      seq: 100000 + i,
      kind,
      priority: prio[kind],
      topology: i % 7 === 0 ? 'pair' : 'single',
      pool: 'spark',
      targetHost: kind === 'development' && i % 3 === 0 ? `spark-${(i % hosts) + 1}` : null,
      repo: kind === 'development' ? null : 'acme/iron',
      pr: kind === 'development' ? null : i % 40,
      headSha: 'b'.repeat(40),
      suite: 'smoke',
      requester: 'bench',
      status: 'queued',
      createdAt: now - i,
      queueDeadline: now + 3600000,
      ttlS: null,
    });
  }
  // the ledger loads reservations in admission order (ORDER BY priority DESC, seq)
  reservations.sort((a, b) => b.priority - a.priority || a.seq - b.seq);
  const config = parseConfig({ hosts: [{ id: 'spark-1' }], preferHosts: [] }, 'bench');
  return {
    now,
    config: {
      budgets: { maxPrs: 20, maxGpusPerPr: 4, maxGpus: 1000 },
      timings: config.timings,
      preferHosts: ['spark-2'],
    },
    hosts: hostRecs,
    leases,
    reservations,
  };
}

export const run: BenchRunner = async (progress) => {
  const dir = mkdtempSync(join(tmpdir(), 'spark-bench-'));
  try {
    progress('admission: raw single-row write transactions, @libsql/client (3 s)…');
    const raw = await rawWriteTxPerSecond(dir, 3, createClient, 'stock');
    progress('admission: raw single-row write transactions, kept statements (3 s)…');
    const rawKept = await rawWriteTxPerSecond(dir, 3, createNodeLedgerClient, 'kept');
    progress('admission: persisted admission passes (5 s)…');
    const adm = await persistedAdmissionsPerSecond(dir, 5);
    // the same passes through @libsql/client: what the kept statements alone are worth
    progress('admission: persisted admission passes through @libsql/client (5 s)…');
    const admStock = await persistedAdmissionsPerSecond(dir, 5, createClient, 'mixed-stock');
    progress('admission: end-to-end cycles (3 s)…');
    const cycle = await cyclesPerSecond(dir, 3);
    const ratio = adm.persistedPerS / raw;
    const ratioKept = adm.persistedPerS / rawKept;

    const scheduler: {
      queued: number;
      hosts: number;
      pass_ms_p50: number;
      pass_ms_p99: number;
      pass_cpu_ms_p50: number;
      pass_cpu_ms_p99: number;
    }[] = [];
    for (const queued of [100, 1000, 10000]) {
      for (const hosts of [2, 16, 256]) {
        progress(`scheduler: ${queued} queued × ${hosts} hosts…`);
        const input = schedulerInput(queued, hosts);
        const iterations = queued >= 10000 ? 60 : 200;
        for (let i = 0; i < 5; i++) planAdmission(input);
        const times: number[] = [];
        // CPU time beside wall time: on a shared VM the wall p99 is mostly time the pass sat
        // preempted (a 0.05 ms pass measured 20 ms p99 at load 18 on 2 cores)
        const cpu: number[] = [];
        for (let i = 0; i < iterations; i++) {
          const c0 = process.cpuUsage();
          const t0 = performance.now();
          planAdmission(input);
          times.push(performance.now() - t0);
          const c = process.cpuUsage(c0);
          cpu.push((c.user + c.system) / 1000);
        }
        times.sort((a, b) => a - b);
        cpu.sort((a, b) => a - b);
        scheduler.push({
          queued,
          hosts,
          pass_ms_p50: round(percentile(times, 50), 3),
          pass_ms_p99: round(percentile(times, 99), 3),
          pass_cpu_ms_p50: round(percentile(cpu, 50), 3),
          pass_cpu_ms_p99: round(percentile(cpu, 99), 3),
        });
      }
    }
    const at = (q: number, h: number) => scheduler.find((s) => s.queued === q && s.hosts === h)!;
    const big = at(10000, 256);
    const scale = big.pass_ms_p50 / at(1000, 256).pass_ms_p50;

    const sections: BenchSection[] = [
      {
        key: 'admission',
        json: {
          persisted_per_s: round(adm.persistedPerS, 1),
          persisted_stock_client_per_s: round(admStock.persistedPerS, 1),
          single_grant_pass_stock_client_per_s: round(admStock.singleGrantPassPerS, 1),
          raw_write_tx_per_s: round(raw, 1),
          raw_write_tx_kept_per_s: round(rawKept, 1),
          ratio: round(ratio, 3),
          ratio_vs_kept: round(ratioKept, 3),
          single_grant_pass_per_s: round(adm.singleGrantPassPerS, 1),
          grants_measured: adm.grants,
          cycle_per_s: round(cycle.perS, 1),
          cycles_measured: cycle.cycles,
          method:
            '16-host fleet, file: ledger (WAL), the Node ledger client (kept statements); alternating bursts of 16 requests and single requests, only admission passes timed; raw = one-row INSERT transactions through @libsql/client (ratio, as in issue 13) and through the kept-statement client (ratio_vs_kept); cycle = create → pass grants → release → agent confirms clean, all timed',
        },
        rows: [
          { metric: 'raw single-row write tx/s (@libsql/client)', value: round(raw, 0).toString() },
          { metric: 'raw single-row write tx/s (kept statements)', value: round(rawKept, 0).toString() },
          { metric: 'persisted admissions/s', value: round(adm.persistedPerS, 0).toString() },
          {
            metric: 'persisted admissions/s through @libsql/client (no kept statements)',
            value: round(admStock.persistedPerS, 0).toString(),
          },
          {
            metric: 'admission/raw ratio',
            value: round(ratio, 2).toString(),
            target: '≥ 0.5',
            met: ratio >= 0.5,
          },
          { metric: 'admission/raw ratio (raw with kept statements)', value: round(ratioKept, 2).toString() },
          {
            metric: 'single-grant passes/s',
            value: round(adm.singleGrantPassPerS, 0).toString(),
            target: '≥ 1000',
            met: adm.singleGrantPassPerS >= 1000,
          },
          {
            metric: 'end-to-end cycles/s (create → grant → release)',
            value: round(cycle.perS, 0).toString(),
          },
        ],
      },
      {
        key: 'scheduler',
        json: scheduler,
        rows: [
          ...scheduler.map((s) => ({
            metric: `pass ${s.queued} queued × ${s.hosts} hosts (p50 / p99 ms)`,
            value: `${s.pass_ms_p50} / ${s.pass_ms_p99}`,
            ...(s.queued === 10000 && s.hosts === 256
              ? { target: 'p50 ≤ 5, p99 ≤ 10', met: s.pass_ms_p50 <= 5 && s.pass_ms_p99 <= 10 }
              : {}),
          })),
          {
            metric: 'pass 10000 queued × 256 hosts, CPU time (p50 / p99 ms)',
            value: `${big.pass_cpu_ms_p50} / ${big.pass_cpu_ms_p99}`,
          },
          {
            metric: 'time(10k)/time(1k) at 256 hosts',
            value: round(scale, 2).toString(),
            target: '≤ 12',
            met: scale <= 12,
          },
        ],
      },
    ];
    return sections;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
};
