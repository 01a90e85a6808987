/**
 * Agent benchmark (issues 4 and 13), measured on the shipped bundle (built once, as the test
 * fleet does), with the runner as its own user (when run as root), the production heartbeat
 * (10 s, offline after 40 s) and long-poll (25 s):
 *  - host freed → next runner process started, p50/p99 over ≥ 20 back-to-back cycles on one host
 *    ("freed" = the ledger's `lease.released` event; "started" = the fake runner's own start time,
 *    both on this machine's clock), and the median of each part (grant, prepare, hand-over,
 *    spawn). Each job shows in the fake nvidia-smi while it runs, and the JIT config arrives
 *    `SPARK_BENCH_GITHUB_LATENCY_MS` (default 150) after the grant, when the GitHub part asks for
 *    it (ADR 0070), as GitHub's registration answer would;
 *  - the agent's idle RSS and CPU over 60 s (children — nvidia-smi — included), and how many of
 *    its heartbeats had to open a new connection.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { agentBundle, startFleet } from '../../test/doubles/fleet.ts';
import { REPO_ROOT, readRunnerMarkers, waitFor } from '../../test/doubles/index.ts';
import type { BenchRunner } from './types.ts';

const CYCLES = 21;
const IDLE_S = 60;
const JOB_MS = 1500;
const GITHUB_LATENCY_MS = Number(process.env.SPARK_BENCH_GITHUB_LATENCY_MS ?? 150);
const PRODUCTION = {
  timings: { heartbeatIntervalS: 10, offlineAfterS: 40 },
  agentConfig: () => ({ timeouts: { requestS: 10, gpuQueryS: 15, backoffMaxS: 30, longPollS: 25 } }),
  controllerEnv: { SPARK_AGENT_LONG_POLL_S: '25' },
};

/** The parts of freed → started: grant (admission), prepare (agent), handoff (JIT config reaches the agent), spawn. */
type SegmentName = 'grant' | 'prepare' | 'handoff' | 'spawn';

function quantile(sorted: number[], q: number): number {
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i]!;
}

function cpuTicks(pid: number): number {
  const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
  // utime, stime, cutime, cstime: children (nvidia-smi calls) count as the agent's cost
  return [11, 12, 13, 14].reduce((sum, i) => sum + Number(f[i]), 0);
}

function rssKiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) : 0;
}

/** Host freed → next runner started over back-to-back cycles on one host, with its parts. */
export async function handoverLatency(progress: (m: string) => void) {
  const fleet = await startFleet({
    ...PRODUCTION,
    hosts: [{ id: 'spark-2' }],
    // each job lasts JOB_MS: a cycle is ~12 agent requests (polls, reports, the fresh-facts
    // heartbeat), and back-to-back 200 ms jobs (~18 requests/s) exhausted the agent API's default
    // limit (600/min, burst 60) after ~10 cycles, so every other hand-over then waited out a 1 s
    // Retry-After. Real jobs take minutes; the limit is kept, the jobs are made plausible.
    runner: () => ({ exitCode: 0, sleepMs: JOB_MS, onGpu: true }),
    githubOutcome: () => 'passed',
    handoffLatencyMs: GITHUB_LATENCY_MS,
  });
  try {
    fleet.startAgent('spark-2');
    await waitFor(
      'spark-2 heartbeat',
      async () => (await fleet.host('spark-2')).lastHeartbeatAt != null,
      30_000,
    );
    const ids: string[] = [];
    for (let i = 0; i < CYCLES; i++) ids.push(await fleet.reserve({ pr: 100 + i }));
    progress(`${CYCLES} reservations queued on one host`);
    await fleet.waitReservation(ids.at(-1)!, ['done', 'failed'], 180_000);
    const markers = readRunnerMarkers(fleet.markerDir);
    const deltas: number[] = [];
    const segments: Record<SegmentName, number[]> = { grant: [], prepare: [], handoff: [], spawn: [] };
    const at = async (leaseId: string, type: string) => {
      const e = (await fleet.controller.ledger.history('lease', leaseId)).find((x) => x.type === type);
      if (!e) throw new Error(`lease ${leaseId} has no ${type} event`);
      return e.at;
    };
    for (let i = 1; i < ids.length; i++) {
      const prev = (await fleet.leases(ids[i - 1]!))[0]!;
      const lease = (await fleet.leases(ids[i]!))[0]!;
      const released = await at(prev.id, 'lease.released');
      const next = markers.find((m) => m.reservationId === ids[i]);
      if (!next) throw new Error(`no runner started for ${ids[i]}`);
      deltas.push(next.startedAt - released);
      // where the time goes: freed → granted → prepared (agent) → config handed over → runner process
      // a lease's history starts with its grant: the reservation's one `reservation.allocated` row (ADR 0100)
      const granted = await at(lease.id, 'reservation.allocated');
      const prepared = await at(lease.id, 'lease.prepared');
      const handoff = await at(lease.id, 'lease.runner_handoff');
      segments.grant.push(granted - released);
      segments.prepare.push(prepared - granted);
      segments.handoff.push(handoff - prepared);
      segments.spawn.push(next.startedAt - handoff);
    }
    const median = (xs: number[]) =>
      quantile(
        [...xs].sort((a, b) => a - b),
        0.5,
      );
    return {
      deltas: deltas.sort((a, b) => a - b),
      segmentsP50Ms: Object.fromEntries(Object.entries(segments).map(([k, v]) => [k, median(v)])) as Record<
        SegmentName,
        number
      >,
      runnerUser: Object.keys(fleet.runnerUsers).length > 0,
    };
  } finally {
    await fleet.close();
  }
}

async function idleCost(progress: (m: string) => void) {
  const fleet = await startFleet({ ...PRODUCTION, hosts: [{ id: 'spark-2' }] });
  try {
    const agent = fleet.startAgent('spark-2');
    await waitFor(
      'spark-2 heartbeat',
      async () => (await fleet.host('spark-2')).lastHeartbeatAt != null,
      30_000,
    );
    await new Promise((r) => setTimeout(r, 3000));
    const pid = agent.proc.pid!;
    const hz = 100; // USER_HZ on Linux
    const c0 = cpuTicks(pid);
    const t0 = performance.now();
    const rss: number[] = [];
    progress(`sampling the idle agent for ${IDLE_S} s`);
    while (performance.now() - t0 < IDLE_S * 1000) {
      rss.push(rssKiB(pid));
      await new Promise((r) => setTimeout(r, 1000));
    }
    const cpuS = (cpuTicks(pid) - c0) / hz;
    const wallS = (performance.now() - t0) / 1000;
    // the agent logs each heartbeat with its count of requests that opened a new connection
    const beats = agent
      .output()
      .split('\n')
      .filter((l) => l.includes('"heartbeat sent"'))
      .map((l) => JSON.parse(l) as { newConnections: number });
    return {
      // what ran: node and the bundle, no TypeScript loader (issue 13 item 3)
      agentCommand: agent.proc.spawnargs.slice(0, 2),
      heartbeats: beats.length,
      newConnectionsDuringIdle: (beats.at(-1)?.newConnections ?? 0) - (beats[0]?.newConnections ?? 0),
      cpuPercent: (cpuS / wallS) * 100,
      cpuSeconds: cpuS,
      rssMiBMean: rss.reduce((a, b) => a + b, 0) / rss.length / 1024,
      rssMiBMax: Math.max(...rss) / 1024,
    };
  } finally {
    await fleet.close();
  }
}

/** The bundle the fleet runs, and whether it is byte for byte the committed `agent/dist` file. */
async function bundleIdentity() {
  const path = await agentBundle();
  const digest = (f: string) => createHash('sha256').update(readFileSync(f)).digest('hex');
  const sha256 = digest(path);
  const committed = join(REPO_ROOT, 'agent/dist/spark-agent.mjs');
  return { path, sha256, sameAsCommittedDist: existsSync(committed) && digest(committed) === sha256 };
}

export const run: BenchRunner = async (progress) => {
  const bundle = await bundleIdentity();
  if (!bundle.sameAsCommittedDist)
    progress(
      'note: agent/dist/spark-agent.mjs differs from the bundle built from this tree (run npm run build)',
    );
  // the machine's 1-minute load average around the hand-over cycles: on a shared 2-core VM the
  // figures move with it (other processes' fsyncs and CPU), so it is recorded beside them
  const loadBefore = loadavg()[0]!;
  const { deltas, runnerUser, segmentsP50Ms } = await handoverLatency(progress);
  const loadAverage1m = [loadBefore, loadavg()[0]!].map((x) => Math.round(x * 100) / 100);
  const p50 = quantile(deltas, 0.5);
  const p99 = quantile(deltas, 0.99);
  progress(`host freed → next runner started: p50 ${p50} ms, p99 ${p99} ms over ${deltas.length} cycles`);
  progress(`  segment medians (ms): ${JSON.stringify(segmentsP50Ms)}`);
  const idle = await idleCost(progress);
  return {
    key: 'agent',
    json: {
      handover: {
        githubLatencyMs: GITHUB_LATENCY_MS,
        runnerUser,
        cycles: deltas.length,
        p50Ms: p50,
        p99Ms: p99,
        minMs: deltas[0],
        maxMs: deltas.at(-1),
        samplesMs: deltas,
        segmentsP50Ms,
        loadAverage1m,
      },
      bundle,
      idle: { seconds: IDLE_S, heartbeatS: 10, longPollS: 25, ...idle },
    },
    rows: [
      {
        metric: `agent: host freed → next runner started, p50 (${deltas.length} cycles, GitHub ${GITHUB_LATENCY_MS} ms, load ${loadAverage1m.join('→')})`,
        value: `${p50} ms`,
        target: '≤ 250 ms',
        met: p50 <= 250,
      },
      {
        metric: 'agent: host freed → next runner started, p99',
        value: `${p99} ms`,
        target: '≤ 1000 ms',
        met: p99 <= 1000,
      },
      {
        metric: `agent: idle CPU over ${IDLE_S} s (bundle)`,
        value: `${idle.cpuPercent.toFixed(2)} %`,
        target: '≤ 0.5 %',
        met: idle.cpuPercent <= 0.5,
      },
      {
        metric: 'agent: idle RSS max (mean)',
        value: `${idle.rssMiBMax.toFixed(1)} MiB (${idle.rssMiBMean.toFixed(1)})`,
        target: '≤ 60 MiB',
        met: idle.rssMiBMax <= 60,
      },
      {
        metric: 'agent: the process measured runs the bundle, same bytes as agent/dist/spark-agent.mjs',
        value: bundle.sameAsCommittedDist ? 'yes' : 'no (rebuild dist)',
      },
      {
        metric: 'agent: idle heartbeats that opened a new connection',
        value: `${idle.newConnectionsDuringIdle} of ${Math.max(0, idle.heartbeats - 1)}`,
      },
    ],
  };
};
