import {
  type EtaActive,
  type EtaRequest,
  estimateQueue,
  type OccupancySample,
  occupancyStats,
} from '../../../core/eta.ts';
import type { ReservationKind, Suite, Topology } from '../../../core/model.ts';

/**
 * Replays a recorded queue history against the ETA estimator ("measure its error
 * against replayed history"). The history is a trace of requests (arrival, class, priority, how
 * long each really held its hosts). The replay admits them by docs/architecture.md rules 1–3 (priority then
 * FIFO, non-preemptive; a pair takes two hosts at once and a head-of-queue pair holds freed hosts)
 * and, at every arrival, asks the estimator for every queued request's start using only what a
 * controller would know then: finished occupancies, active work, the queue. Each estimate is
 * compared with when the request really started.
 */

export interface TraceRequest {
  id: string;
  arrivalMs: number;
  kind: ReservationKind;
  priority: number;
  topology: Topology;
  suite: Suite | null;
  /** How long it really held its hosts once granted (unknown to the estimator). */
  heldMs: number;
}

/** One estimate made at some moment, with what really happened. */
export interface EtaObservation {
  id: string;
  madeAt: number;
  position: number;
  estimateLo: number;
  estimateHi: number;
  actual: number;
  /** Naive baseline 1: the median wait seen so far, from the request's arrival. */
  naiveMedianWait: number;
  /** Naive baseline 2: position × the mean occupancy so far ÷ the number of hosts. */
  naivePosition: number;
}

/** A small deterministic PRNG (mulberry32) so a failing replay can be rerun with its seed. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const CLASSES: {
  kind: ReservationKind;
  priority: number;
  topology: Topology;
  suite: Suite | null;
  meanMin: number;
  weight: number;
}[] = [
  { kind: 'manual', priority: 80, topology: 'single', suite: 'smoke', meanMin: 12, weight: 3 },
  { kind: 'merge', priority: 70, topology: 'single', suite: 'performance', meanMin: 25, weight: 3 },
  { kind: 'benchmark', priority: 50, topology: 'pair', suite: 'performance', meanMin: 40, weight: 1 },
  { kind: 'background', priority: 20, topology: 'single', suite: 'smoke', meanMin: 8, weight: 3 },
];

/**
 * A history like a busy week: `n` requests, mean inter-arrival `gapMin` minutes, occupancy per
 * class log-normally spread (σ 0.4) around its mean, so some jobs run long.
 */
export function syntheticTrace(n: number, seed: number, gapMin = 9): TraceRequest[] {
  const rnd = prng(seed);
  const total = CLASSES.reduce((a, c) => a + c.weight, 0);
  const normal = () => Math.sqrt(-2 * Math.log(1 - rnd())) * Math.cos(2 * Math.PI * rnd());
  let t = 0;
  const out: TraceRequest[] = [];
  for (let i = 0; i < n; i++) {
    t += -Math.log(1 - rnd()) * gapMin * 60_000;
    const pick = rnd() * total;
    let acc = 0;
    const c =
      CLASSES.find((x) => {
        acc += x.weight;
        return pick < acc;
      }) ?? CLASSES[0]!;
    const held = c.meanMin * Math.exp(0.4 * normal() - 0.08) * 60_000;
    out.push({
      id: `r-${i + 1}`,
      arrivalMs: Math.round(t),
      kind: c.kind,
      priority: c.priority,
      topology: c.topology,
      suite: c.suite,
      heldMs: Math.round(held),
    });
  }
  return out;
}

interface Running {
  r: TraceRequest;
  hosts: string[];
  start: number;
  end: number;
}

/** Replays `trace` on `hostCount` hosts; estimates for every queued request at each arrival. */
export function replay(trace: readonly TraceRequest[], hostCount: number, warmup = 50): EtaObservation[] {
  const hostIds = Array.from({ length: hostCount }, (_, i) => `spark-${i + 1}`);
  const free = new Set(hostIds);
  const queue: TraceRequest[] = [];
  const running: Running[] = [];
  const finished: OccupancySample[] = [];
  const waits: number[] = [];
  const starts = new Map<string, number>();
  const pending: Omit<EtaObservation, 'actual'>[] = [];
  const order = (a: TraceRequest, b: TraceRequest) => b.priority - a.priority || a.arrivalMs - b.arrivalMs;

  const admit = (now: number) => {
    queue.sort(order);
    while (queue.length) {
      const head = queue[0]!;
      const need = head.topology === 'pair' ? 2 : 1;
      // non-preemptive, and a head that does not fit holds what is free (rule 3): nothing behind it starts
      if (free.size < need) break;
      const hosts = [...free].slice(0, need);
      for (const h of hosts) free.delete(h);
      queue.shift();
      running.push({ r: head, hosts, start: now, end: now + head.heldMs });
      starts.set(head.id, now);
      waits.push(now - head.arrivalMs);
    }
  };
  const finishUntil = (t: number) => {
    for (;;) {
      running.sort((a, b) => a.end - b.end);
      const next = running[0];
      if (!next || next.end > t) return;
      running.shift();
      for (const h of next.hosts) free.add(h);
      finished.push({
        kind: next.r.kind,
        topology: next.r.topology,
        suite: next.r.suite,
        heldS: next.r.heldMs / 1000,
      });
      admit(next.end);
    }
  };

  trace.forEach((r, i) => {
    finishUntil(r.arrivalMs);
    queue.push(r);
    admit(r.arrivalMs);
    if (i < warmup || queue.length === 0) return;
    const now = r.arrivalMs;
    queue.sort(order);
    const history = finished.slice(-2000);
    const stats = occupancyStats(history, 1200);
    const active: EtaActive[] = running.map((x) => ({
      kind: x.r.kind,
      topology: x.r.topology,
      suite: x.r.suite,
      hostIds: x.hosts,
      grantedAt: x.start,
      expiresAt: null,
    }));
    const requests: EtaRequest[] = queue.map((q) => ({
      id: q.id,
      kind: q.kind,
      topology: q.topology,
      suite: q.suite,
      targetHost: null,
    }));
    const etas = estimateQueue({
      now,
      hosts: hostIds.map((id) => ({ id, schedulable: true })),
      active,
      queue: requests,
      stats,
    });
    const sortedWaits = [...waits].sort((a, b) => a - b);
    const medianWait = sortedWaits[Math.floor(sortedWaits.length / 2)] ?? 0;
    const meanHeld = history.length
      ? (history.reduce((a, h) => a + h.heldS, 0) / history.length) * 1000
      : 1_200_000;
    for (const e of etas) {
      const q = queue.find((x) => x.id === e.id)!;
      pending.push({
        id: e.id,
        madeAt: now,
        position: e.position,
        estimateLo: e.startLo!,
        estimateHi: e.startHi!,
        naiveMedianWait: q.arrivalMs + medianWait,
        naivePosition: now + ((e.position - 1) * meanHeld) / hostCount,
      });
    }
  });
  finishUntil(Number.POSITIVE_INFINITY);
  return pending.flatMap((p) => {
    const actual = starts.get(p.id);
    return actual == null ? [] : [{ ...p, actual }];
  });
}

/** Median of absolute errors in minutes; `pick` chooses the estimate. */
export function medianAbsErrorMin(
  obs: readonly EtaObservation[],
  pick: (o: EtaObservation) => number,
): number {
  const errs = obs.map((o) => Math.abs(pick(o) - o.actual) / 60_000).sort((a, b) => a - b);
  if (!errs.length) return Number.NaN;
  const mid = Math.floor(errs.length / 2);
  return errs.length % 2 ? errs[mid]! : (errs[mid - 1]! + errs[mid]!) / 2;
}

/** Share of observations whose real start fell inside the estimated range (a minute's slack). */
export function rangeCoverage(obs: readonly EtaObservation[]): number {
  if (!obs.length) return Number.NaN;
  const inside = obs.filter((o) => o.actual >= o.estimateLo - 60_000 && o.actual <= o.estimateHi + 60_000);
  return inside.length / obs.length;
}

/** The estimator's point estimate: the middle of its range. */
export const midpoint = (o: EtaObservation) => (o.estimateLo + o.estimateHi) / 2;
