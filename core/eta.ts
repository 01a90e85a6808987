import type { ReservationKind, Suite, Topology } from './model.ts';

/**
 * Queue ETA ("Beyond the anchors"): when will each queued request start? A pure
 * estimator fed by the ledger's own history. It replays the queue in admission order against the
 * hosts' expected free times, once with short (25th percentile) and once with long (75th
 * percentile) occupancy per class, so the answer is a range. The rules it follows are the ones
 * admission keeps (docs/architecture.md rules 1–4): non-preemptive priority order, a pair takes both hosts at
 * once (a host freed first is held for it), a targeted request waits for its host, and an
 * offline, unadopted or quarantined host never starts anything. It cannot know about requests
 * that have not arrived yet (a later, higher-priority arrival moves a request back) nor budget
 * waits, so it is an estimate, measured against replayed history in test/unit/eta-replay.test.ts.
 */

/** A class of work whose host occupancy the history describes. */
export interface WorkClass {
  kind: ReservationKind;
  topology: Topology;
  suite: Suite | null;
}

/** One finished occupancy from the history: grant to host released, in seconds. */
export interface OccupancySample extends WorkClass {
  heldS: number;
}

/** Occupancy quantiles (seconds) for one class, and which level of the history they came from. */
export interface OccupancyStats {
  loS: number;
  midS: number;
  hiS: number;
  samples: number;
  basis: 'class' | 'kind' | 'all' | 'default';
}

/** Fewer samples than this at one level fall back to the next, coarser level. */
export const MIN_SAMPLES = 5;

function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return 0;
  const pos = (sorted.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (pos - lo);
}

/**
 * Builds the per-class occupancy lookup: exact class (kind, topology, suite), then kind, then all
 * history, then `defaultHeldS` (the CI lease TTL's typical use) when the ledger is new.
 */
export function occupancyStats(
  history: readonly OccupancySample[],
  defaultHeldS: number,
): (c: WorkClass) => OccupancyStats {
  const groups = new Map<string, number[]>();
  const add = (k: string, v: number) => {
    const g = groups.get(k);
    if (g) g.push(v);
    else groups.set(k, [v]);
  };
  for (const h of history) {
    if (!Number.isFinite(h.heldS) || h.heldS < 0) continue;
    add(`c:${h.kind}/${h.topology}/${h.suite ?? '-'}`, h.heldS);
    add(`k:${h.kind}`, h.heldS);
    add('all', h.heldS);
  }
  for (const g of groups.values()) g.sort((a, b) => a - b);
  const cache = new Map<string, OccupancyStats>();
  return (c) => {
    const key = `${c.kind}/${c.topology}/${c.suite ?? '-'}`;
    const hit = cache.get(key);
    if (hit) return hit;
    const levels: [string, OccupancyStats['basis']][] = [
      [`c:${key}`, 'class'],
      [`k:${c.kind}`, 'kind'],
      ['all', 'all'],
    ];
    let out: OccupancyStats = {
      loS: defaultHeldS * 0.5,
      midS: defaultHeldS,
      hiS: defaultHeldS * 1.5,
      samples: 0,
      basis: 'default',
    };
    for (const [k, basis] of levels) {
      const g = groups.get(k);
      if (g && g.length >= MIN_SAMPLES) {
        out = {
          loS: quantile(g, 0.25),
          midS: quantile(g, 0.5),
          hiS: quantile(g, 0.75),
          samples: g.length,
          basis,
        };
        break;
      }
    }
    cache.set(key, out);
    return out;
  };
}

/** A host as the estimator sees it. */
export interface EtaHost {
  id: string;
  /** False for offline, unadopted, restoring, release-required or quarantined hosts. */
  schedulable: boolean;
  /** The host's derived state, so a blocked estimate names it (absent: treated as offline). */
  state?: string;
}

/** Work holding hosts now. */
export interface EtaActive extends WorkClass {
  hostIds: readonly string[];
  grantedAt: number;
  /** Lease expiry (ms): a development lease is expected to run to it unless history says less. */
  expiresAt: number | null;
}

/** A queued request, in admission order (the plan's positions). */
export interface EtaRequest extends WorkClass {
  id: string;
  targetHost: string | null;
}

export interface EtaInput {
  now: number;
  hosts: readonly EtaHost[];
  active: readonly EtaActive[];
  /** Queued requests in the order admission will consider them. */
  queue: readonly EtaRequest[];
  stats: (c: WorkClass) => OccupancyStats;
}

/** The estimate for one queued request. Times are epoch ms; null when nothing can start it. */
export interface Eta {
  id: string;
  position: number;
  startLo: number | null;
  startHi: number | null;
  /** Why no time can be given (every eligible host offline, unknown target…), else null. */
  blocked: string | null;
  basis: OccupancyStats['basis'];
}

/** Expected end of an active occupancy for a quantile: never before now, and, with a TTL, never past it. */
function activeEnd(a: EtaActive, heldS: number, now: number, overrunS: number): number {
  let end = a.grantedAt + heldS * 1000;
  // already past the quantile: it ends "soon", by a fraction of the class's typical time
  if (end <= now) end = now + overrunS * 1000;
  if (a.expiresAt != null && end > a.expiresAt) end = Math.max(now, a.expiresAt);
  return end;
}

function simulate(
  input: EtaInput,
  pick: (s: OccupancyStats) => number,
  long: boolean,
  out: Map<string, number | null>,
): void {
  const { now } = input;
  const freeAt = new Map<string, number>();
  for (const h of input.hosts) if (h.schedulable) freeAt.set(h.id, now);
  for (const a of input.active) {
    const s = input.stats(a);
    // a lease with an end and no history of its own kind: the long bound is that end
    const unknownKind = a.expiresAt != null && (s.basis === 'all' || s.basis === 'default');
    const end = unknownKind && long ? Math.max(now, a.expiresAt!) : activeEnd(a, pick(s), now, s.midS * 0.1);
    for (const id of a.hostIds) if (freeAt.has(id)) freeAt.set(id, Math.max(freeAt.get(id)!, end));
  }
  for (const r of input.queue) {
    const need = r.topology === 'pair' ? 2 : 1;
    const eligible = [...freeAt.entries()]
      .filter(([id]) => r.targetHost == null || id === r.targetHost)
      .sort((a, b) => a[1] - b[1]);
    if (eligible.length < need) {
      out.set(r.id, null);
      continue;
    }
    const chosen = eligible.slice(0, need);
    const start = Math.max(now, ...chosen.map(([, t]) => t));
    const end = start + pick(input.stats(r)) * 1000;
    for (const [id] of chosen) freeAt.set(id, end);
    out.set(r.id, start);
  }
}

/** Estimates a start range for every queued request (see the module comment for the rules). */
export function estimateQueue(input: EtaInput): Eta[] {
  const lo = new Map<string, number | null>();
  const hi = new Map<string, number | null>();
  simulate(input, (s) => s.loS, false, lo);
  simulate(input, (s) => s.hiS, true, hi);
  const schedulable = input.hosts.filter((h) => h.schedulable);
  return input.queue.map((r, i) => {
    const startLo = lo.get(r.id) ?? null;
    const startHi = hi.get(r.id) ?? null;
    let blocked: string | null = null;
    if (startLo == null) {
      if (r.targetHost != null && !input.hosts.some((h) => h.id === r.targetHost)) {
        blocked = `${r.targetHost} is not a configured host`;
      } else if (r.targetHost != null) {
        blocked = `${r.targetHost} is offline or not adopted`;
      } else if (schedulable.length === 0) {
        // "install an agent" is wrong advice for hosts that are online but held out (quarantined after a failed restore, release-required after a lease expired)
        const held = input.hosts.filter((h) => h.state && h.state !== 'offline' && h.state !== 'unknown');
        blocked = held.length
          ? `no host can take work now: ${input.hosts.map((h) => `${h.id} ${h.state ?? 'offline'}`).join(', ')}`
          : 'no host is online: install or adopt an agent';
      } else {
        const n = r.topology === 'pair' ? 2 : 1;
        const held = input.hosts.filter(
          (h) => !h.schedulable && h.state && h.state !== 'offline' && h.state !== 'unknown',
        );
        blocked = held.length
          ? `needs ${n} hosts, ${schedulable.length} can take work (${held.map((h) => `${h.id} ${h.state}`).join(', ')})`
          : `needs ${n} online hosts, ${schedulable.length} online`;
      }
    }
    return {
      id: r.id,
      position: i + 1,
      startLo,
      startHi: startHi == null || startLo == null ? startHi : Math.max(startLo, startHi),
      blocked,
      basis: input.stats(r).basis,
    };
  });
}

function roundDuration(s: number): string {
  if (s < 90) return `${Math.max(1, Math.round(s / 60))} min`;
  if (s < 90 * 60) return `${Math.round(s / 60)} min`;
  const h = s / 3600;
  return `${h < 10 ? Math.round(h * 10) / 10 : Math.round(h)} h`;
}

/** "starts in ~12–20 min", "should start now", "cannot start: …" — one phrase for every surface. */
export function describeEta(eta: Pick<Eta, 'startLo' | 'startHi' | 'blocked'>, now: number): string {
  if (eta.startLo == null) return `cannot start yet: ${eta.blocked ?? 'no eligible host'}`;
  const loS = Math.max(0, (eta.startLo - now) / 1000);
  const hiS = Math.max(loS, ((eta.startHi ?? eta.startLo) - now) / 1000);
  if (hiS < 30) return 'should start now';
  if (hiS < 60 * 90) {
    const a = Math.round(loS / 60);
    const b = Math.max(a, Math.round(hiS / 60));
    return a === b ? `starts in ~${Math.max(1, b)} min` : `starts in ~${a}–${b} min`;
  }
  const a = roundDuration(loS);
  const b = roundDuration(hiS);
  return a === b
    ? `starts in ~${b}`
    : `starts in ~${a.replace(/ (min|h)$/, a.endsWith(' h') && b.endsWith(' h') ? '' : ' $1')}–${b}`;
}
