/**
 * The scheduler, all of it (docs/adr/0187-scheduler-pass-measured-whole.md): a real admission
 * pass on a real ledger (libSQL file, the Node ledger client) at every queue × fleet size up to
 * 10,000 queued × 256 hosts — what it reads, the plan, and what it writes. Half the hosts run
 * development work, the queue is the engine bench's mix (every kind, pairs, targeted development,
 * 40 PRs against a 20-PR budget). Each measured pass follows what a pass follows in production:
 * a host was freed (release confirmed) and a request arrived, both untimed; the pass grants the
 * freed host and rewrites the head of the queue's positions. Beside the pass, its stages are timed
 * on their own: reading the input as the pass reads it (the head of the queue,
 * functions/ledger/admission-input.ts `readQueueHead`), and planning it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { planAdmission } from '../../core/admission.ts';
import type { HostFacts, ReservationKind, Topology } from '../../core/model.ts';
import { readQueueHead } from '../../functions/ledger/admission-input.ts';
import { admissionPassStats } from '../../functions/ledger/admission-pass.ts';
import type { Ledger } from '../../functions/ledger/ledger.ts';
import { toHostRecord, toLeaseRecord, toReservationRecord } from '../../functions/ledger/ledger.ts';
import { createNodeLedgerClient } from '../../functions/ledger/node-client.ts';
import { BENCH_FACTS, benchLedger, cpuNowMs, percentile, round } from './admission-ledger.ts';
import { StatementTimes, TIME_STATEMENTS } from './admission-statements.ts';
import type { BenchRunner } from './types.ts';

const QUEUED = [100, 1000, 10000];
const HOSTS = [2, 16, 256];
const P50_TARGET = 5;
const P99_TARGET = 10;

/**
 * The hosts run the dstack executor: the development half of the mix needs it (a development
 * lease is used through its dstack dev environment, ADR 0176), and with it the fleet is half
 * busy with development work as the bench says.
 */
const FACTS: HostFacts = { ...BENCH_FACTS, executor: 'dstack' };

const KINDS: ReservationKind[] = ['development', 'manual', 'merge', 'benchmark', 'background'];

/** The i-th request of the bench's queue (the engine bench's mix). */
function request(i: number, hosts: number) {
  const kind = KINDS[i % KINDS.length]!;
  const topology: Topology = i % 7 === 0 && hosts >= 2 ? 'pair' : 'single';
  return {
    kind,
    topology,
    targetHost:
      kind === 'development' && i % 3 === 0 && topology === 'single' ? `spark-${(i % hosts) + 1}` : null,
    repo: kind === 'development' ? null : 'acme/iron',
    pr: kind === 'development' || kind === 'merge' ? null : i % 40,
    headSha: 'b'.repeat(40),
    suite: kind === 'development' ? null : ('smoke' as const),
    requester: 'bench',
  };
}

async function enqueue(ledger: Ledger, from: number, count: number, hosts: number) {
  // in transactions of 500: setup, not measured
  for (let i = from; i < from + count; i += 500) {
    const end = Math.min(from + count, i + 500);
    await ledger.write(async (tx) => {
      for (let j = i; j < end; j++) await ledger.createReservation(request(j, hosts), 'bench', tx);
    });
  }
}

export async function measure(dir: string, queued: number, hosts: number, iterations: number) {
  let now = Date.UTC(2026, 11, 1, 9);
  const clock = () => now;
  // SPARK_BENCH_STATEMENTS=1: each statement of the measured passes timed (admission-statements.ts)
  const times = new StatementTimes();
  const { store, ledger } = await benchLedger({
    url: `file:${join(dir, `sched-${queued}-${hosts}.db`)}`,
    client: TIME_STATEMENTS ? times.wrap(createNodeLedgerClient) : createNodeLedgerClient,
    hostCount: hosts,
    clock,
    config: { budgets: { maxPrs: 20, maxGpusPerPr: 4, maxGpus: 100_000 } },
    facts: FACTS,
  });
  try {
    // half the fleet busy with development work (no budget slot), then the queue
    const active: { reservationId: string; leases: { hostId: string; fencingToken: number }[] }[] = [];
    for (let i = 0; i < Math.floor(hosts / 2); i++) {
      await ledger.createReservation(
        { kind: 'development', topology: 'single', targetHost: `spark-${2 * i + 1}`, requester: 'bench' },
        'bench',
      );
    }
    active.push(...(await ledger.admissionPass('bench')).granted);
    await enqueue(ledger, 0, queued, hosts);
    // the first pass fills the free half; from then on every pass follows one freed host
    active.push(...(await ledger.admissionPass('bench')).granted);
    const wall: number[] = [];
    const cpu: number[] = [];
    const readMs: number[] = [];
    const planMs: number[] = [];
    let grants = 0;
    let wholeReads = 0;
    let next = queued;
    for (let it = 0; it < iterations + 5; it++) {
      // untimed: the oldest work ends and its host is confirmed clean; a request arrives
      const done = active.shift();
      if (done) {
        await ledger.beginRelease(done.reservationId, 'passed', 'bench', 'bench');
        for (const l of done.leases) await ledger.confirmReleased(l.hostId, l.fencingToken, 'bench');
      }
      await enqueue(ledger, next++, 1, hosts);
      now += 50;
      if (it % 100 === 99) for (let h = 1; h <= hosts; h++) await ledger.recordHeartbeat(`spark-${h}`, FACTS);
      const whole0 = admissionPassStats(ledger).wholeQueueReads;
      times.on = it >= 5;
      const c0 = cpuNowMs();
      const t0 = performance.now();
      const res = await ledger.admissionPass('bench');
      const dt = performance.now() - t0;
      const dc = cpuNowMs() - c0;
      times.on = false;
      active.push(...res.granted);
      if (it < 5) continue; // warm-up
      times.passes++;
      grants += res.granted.length;
      wholeReads += admissionPassStats(ledger).wholeQueueReads - whole0;
      wall.push(dt);
      cpu.push(dc);
      // the stages on their own (after the pass, not part of its time)
      const r0 = performance.now();
      const input = await readQueueHead(ledger, undefined, now);
      readMs.push(performance.now() - r0);
      const p0 = performance.now();
      planAdmission({
        now,
        config: ledger.config,
        hosts: input.hostRows.map(toHostRecord),
        leases: input.leaseRows.map(toLeaseRecord),
        reservations: input.resvRows.map(toReservationRecord),
        keptSlots: input.keptSlots,
      });
      planMs.push(performance.now() - p0);
    }
    const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
    const [w, c, r, p] = [sorted(wall), sorted(cpu), sorted(readMs), sorted(planMs)];
    return {
      queued,
      hosts,
      passes: wall.length,
      grantsPerPass: round(grants / wall.length, 2),
      // passes whose queue head could not decide alone and read the whole queue
      wholeQueueReads: wholeReads,
      pass_ms_p50: round(percentile(w, 50), 3),
      pass_ms_p99: round(percentile(w, 99), 3),
      pass_cpu_ms_p50: round(percentile(c, 50), 3),
      pass_cpu_ms_p99: round(percentile(c, 99), 3),
      // where the time goes, each stage timed on its own
      read_ms_p50: round(percentile(r, 50), 3),
      plan_ms_p50: round(percentile(p, 50), 3),
      loadAverage1m: round(loadavg()[0]!, 2),
      ...(TIME_STATEMENTS ? { statements: times.summary() } : {}),
    };
  } finally {
    store.close();
  }
}

export const run: BenchRunner = async (progress) => {
  const dir = mkdtempSync(join(tmpdir(), 'spark-bench-sched-'));
  try {
    const rows: Awaited<ReturnType<typeof measure>>[] = [];
    for (const queued of QUEUED) {
      for (const hosts of HOSTS) {
        progress(`scheduler: ${queued} queued × ${hosts} hosts…`);
        rows.push(await measure(dir, queued, hosts, queued >= 10000 ? 120 : 200));
      }
    }
    const big = rows.find((r) => r.queued === 10000 && r.hosts === 256)!;
    const worstP99 = Math.max(...rows.map((r) => r.pass_ms_p99));
    return {
      key: 'scheduler',
      json: {
        rows,
        targets: { everyRowP99Ms: P99_TARGET, p50Ms10kx256: P50_TARGET },
        method:
          'ledger.admissionPass() on a libSQL file (WAL) through the Node ledger client, after an untimed release and an untimed new request (so each pass grants the freed host and rewrites the head of the queue); half the hosts run development work; queue mix: development (some targeted), manual, merge, benchmark, background, every 7th a pair, 40 PRs against maxPrs 20 / maxGpusPerPr 4; wall and CPU time per pass; read_ms / plan_ms: what the pass reads (readQueueHead: the head of the queue, the past-deadline and kept-slot rows, hosts, leases, granted work) and planAdmission over it, timed on their own after each pass; wholeQueueReads: passes whose head could not decide and read every open reservation (docs/adr/0187-scheduler-pass-measured-whole.md)',
      },
      rows: [
        ...rows.map((s) => ({
          metric: `pass ${s.queued} queued × ${s.hosts} hosts (p50 / p99 ms; CPU p50 / p99; read / plan p50; load)`,
          value: `${s.pass_ms_p50} / ${s.pass_ms_p99}; ${s.pass_cpu_ms_p50} / ${s.pass_cpu_ms_p99}; ${s.read_ms_p50} / ${s.plan_ms_p50}; ${s.loadAverage1m}`,
          target: `p99 ≤ ${P99_TARGET}${s === big ? `, p50 ≤ ${P50_TARGET}` : ''}`,
          met: s.pass_ms_p99 <= P99_TARGET && (s !== big || s.pass_ms_p50 <= P50_TARGET),
        })),
        {
          metric: 'worst p99 of any row',
          value: `${worstP99} ms`,
          target: `≤ ${P99_TARGET}`,
          met: worstP99 <= P99_TARGET,
        },
      ],
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
};
