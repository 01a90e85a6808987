/**
 * Admission benchmarks (docs/adr/0186-admission-measured-with-one-client.md):
 * - persisted admissions per second by real admission passes on a libSQL file (WAL), over
 *   one-row write transactions per second **through the same client**, the two interleaved in
 *   short slices in one run so both meet the same machine (`ratio_same_client`, the Node ledger
 *   client with kept statements; `stock_client.ratio`, `@libsql/client` on both sides);
 * - the same admissions over a remote ledger with a fixed round-trip time (`remote`,
 *   docs/adr/0185-admission-pass-in-two-round-trips.md);
 * - the end-to-end cycle (create → grant → release → confirmed clean), all timed.
 * The scheduler's pass at every queue × fleet size is `scheduler.ts`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createNodeLedgerClient } from '../../functions/ledger/node-client.ts';
import { stockLedgerClient } from '../../functions/ledger/raw-baseline.ts';
import { benchNumber } from '../settings.ts';
import {
  type ClientFactory,
  cyclesPerSecond,
  openAdmissionSide,
  openRawSide,
  round,
  type Tally,
} from './admission-ledger.ts';
import { REMOTE_RTT_MS, remoteAdmission } from './admission-remote.ts';
import { StatementTimes, TIME_STATEMENTS } from './admission-statements.ts';
import type { BenchRunner, BenchSection } from './types.ts';

export { percentile } from './admission-ledger.ts';

const SLICES = benchNumber('SPARK_BENCH_ADMISSION_SLICES', 16);
const SLICE_MS = 300;
const REMOTE_ROUNDS = benchNumber('SPARK_BENCH_REMOTE_ROUNDS', 40);
const RATIO_TARGET = 0.3;
const REMOTE_RT_TARGET = 2;

/** Raw transactions and admissions through one client, interleaved slice by slice. */
async function sameClient(dir: string, client: ClientFactory, name: string, progress: (m: string) => void) {
  const raw = await openRawSide(dir, client, name);
  // SPARK_BENCH_STATEMENTS=1: each statement of the timed passes timed (it adds its own cost to them)
  const times = TIME_STATEMENTS ? new StatementTimes() : undefined;
  const adm = await openAdmissionSide(dir, client, name, times);
  try {
    // warm-up (JIT, statement caches, WAL), not counted
    await raw.runFor(300);
    await adm.runFor(600);
    times?.reset();
    const warm = { raw: { ...raw.tally }, adm: { ...adm.tally }, single: { ...adm.single } };
    const minus = (a: Tally, b: Tally): Tally => ({
      n: a.n - b.n,
      ms: a.ms - b.ms,
      cpuMs: a.cpuMs - b.cpuMs,
    });
    for (let i = 0; i < SLICES; i++) {
      // alternate which goes first, so neither always follows the other's checkpoint
      if (i % 2 === 0) {
        await raw.runFor(SLICE_MS);
        await adm.runFor(SLICE_MS * 2);
      } else {
        await adm.runFor(SLICE_MS * 2);
        await raw.runFor(SLICE_MS);
      }
      if (i % 4 === 3) progress(`admission (${name}): slice ${i + 1}/${SLICES}`);
    }
    const r = minus(raw.tally, warm.raw);
    const a = minus(adm.tally, warm.adm);
    const singles = adm.single.passes - warm.single.passes;
    const singleMs = adm.single.ms - warm.single.ms;
    const rawPerS = r.n / (r.ms / 1000);
    const persistedPerS = a.n / (a.ms / 1000);
    return {
      raw_write_tx_per_s: round(rawPerS, 1),
      persisted_per_s: round(persistedPerS, 1),
      ratio: round(persistedPerS / rawPerS, 3),
      // the same over CPU time: what the machine's other work cannot stretch
      raw_write_tx_per_cpu_s: round(r.n / (r.cpuMs / 1000), 1),
      persisted_per_cpu_s: round(a.n / (a.cpuMs / 1000), 1),
      ratio_cpu: round(a.n / a.cpuMs / (r.n / r.cpuMs), 3),
      single_grant_pass_per_s: round(singles / (singleMs / 1000), 1),
      grants_measured: a.n,
      raw_tx_measured: r.n,
      ...(times ? { statements: times.summary() } : {}),
    };
  } finally {
    raw.close();
    adm.close();
  }
}

export const run: BenchRunner = async (progress) => {
  const dir = mkdtempSync(join(tmpdir(), 'spark-bench-'));
  try {
    const load = [loadavg()[0]!];
    progress(`admission: kept-statement client on both sides, ${SLICES} interleaved slices…`);
    const kept = await sameClient(dir, createNodeLedgerClient, 'kept', progress);
    load.push(loadavg()[0]!);
    progress(`admission: @libsql/client on both sides, ${SLICES} interleaved slices…`);
    const stock = await sameClient(dir, stockLedgerClient, 'stock', progress);
    load.push(loadavg()[0]!);
    progress('admission: end-to-end cycles (3 s)…');
    const cycle = await cyclesPerSecond(dir, 3);
    load.push(loadavg()[0]!);
    progress(`admission: remote ledger, ${REMOTE_RTT_MS} ms round trip, ${REMOTE_ROUNDS} passes…`);
    const remote = await remoteAdmission(dir, REMOTE_ROUNDS, progress);
    load.push(loadavg()[0]!);

    const section: BenchSection = {
      key: 'admission',
      json: {
        ratio_same_client: kept.ratio,
        ratio_same_client_cpu: kept.ratio_cpu,
        persisted_per_s: kept.persisted_per_s,
        raw_write_tx_per_s: kept.raw_write_tx_per_s,
        single_grant_pass_per_s: kept.single_grant_pass_per_s,
        kept_client: kept,
        stock_client: stock,
        cycle_per_s: round(cycle.perS, 1),
        cycles_measured: cycle.cycles,
        remote,
        loadAverage1m: load.map((l) => round(l, 2)),
        targets: { ratio_same_client: RATIO_TARGET, remoteRoundTripsPerPass: REMOTE_RT_TARGET },
        method: `16-host fleet, file: ledger (WAL, synchronous NORMAL); alternating bursts of 16 requests and single requests, only admission passes timed (persisted grants per second of pass); raw = one-row INSERT write transactions; both through the same client (ratio_same_client: the Node ledger client with kept statements, functions/ledger/node-client.ts; stock_client: @libsql/client), in ${SLICES} interleaved slices of ${SLICE_MS} ms raw / ${SLICE_MS * 2} ms admission stream, order alternating; *_cpu: the same per CPU second of this process; cycle = create → pass grants → release → agent confirms clean, all timed`,
      },
      rows: [
        {
          metric: 'raw one-row write tx/s (kept-statement client)',
          value: round(kept.raw_write_tx_per_s, 0).toString(),
        },
        {
          metric: 'persisted admissions/s (kept-statement client)',
          value: round(kept.persisted_per_s, 0).toString(),
        },
        {
          metric: 'admissions / raw write tx, same client',
          value: `${kept.ratio} (CPU ${kept.ratio_cpu})`,
          target: `≥ ${RATIO_TARGET}`,
          met: kept.ratio >= RATIO_TARGET,
        },
        {
          metric: 'admissions / raw write tx, both @libsql/client',
          value: `${stock.ratio} (${round(stock.persisted_per_s, 0)} / ${round(stock.raw_write_tx_per_s, 0)})`,
        },
        {
          metric: 'single-grant passes/s',
          value: round(kept.single_grant_pass_per_s, 0).toString(),
          target: '≥ 1000',
          met: kept.single_grant_pass_per_s >= 1000,
        },
        { metric: 'end-to-end cycles/s (create → grant → release)', value: round(cycle.perS, 0).toString() },
        {
          metric: `remote ledger (${REMOTE_RTT_MS} ms RTT): round trips per pass`,
          value: `${remote.roundTripsPerPass} (max ${remote.roundTripsMax})`,
          target: `≤ ${REMOTE_RT_TARGET}`,
          met: remote.roundTripsMax <= REMOTE_RT_TARGET,
        },
        {
          metric: `remote ledger (${REMOTE_RTT_MS} ms RTT): pass p50 / p99`,
          value: `${remote.passP50Ms} / ${remote.passP99Ms} ms`,
        },
      ],
    };
    return section;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
};
