import {
  type Eta,
  type EtaActive,
  estimateQueue,
  type OccupancySample,
  occupancyStats,
  type WorkClass,
} from '../core/eta.ts';
import type { HostState, ReservationKind, Suite, Topology } from '../core/model.ts';
import type { Ledger } from './ledger/ledger.ts';
import type { LeaseRow, ReservationRow } from './ledger/rows.ts';

/** Occupancy assumed for a class while the ledger has no finished work to learn from (20 min). */
export const DEFAULT_HELD_S = 1200;

/**
 * Host states the estimator may plan onto. Offline, unknown (never heartbeated or not adopted),
 * release-required and quarantined hosts start nothing until a person acts, so they are left out;
 * a restoring host comes back by itself.
 */
export const SCHEDULABLE: ReadonlySet<HostState> = new Set([
  'service',
  'idle',
  'held',
  'allocated',
  'draining',
  'cleaning',
  'restoring',
]);

const classOf = (r: ReservationRow): WorkClass => ({
  kind: r.kind as ReservationKind,
  topology: r.topology as Topology,
  suite: r.suite as Suite | null,
});

/**
 * Feeds the pure estimator (core/eta.ts) from the ledger: the recent occupancy history, the
 * hosts' derived states, the active leases and the queue in the plan's order.
 */
export async function queueEtas(
  ledger: Ledger,
  input: {
    now: number;
    hostStates: Record<string, HostState>;
    hostIds: readonly string[];
    leaseRows: readonly LeaseRow[];
    resvRows: readonly ReservationRow[];
    /** Queued reservation ids in admission order. */
    order: readonly string[];
  },
): Promise<Map<string, Eta>> {
  if (input.order.length === 0) return new Map();
  const stats = occupancyStats((await ledger.reads.occupancyHistory()) as OccupancySample[], DEFAULT_HELD_S);
  const byId = new Map(input.resvRows.map((r) => [r.id, r]));
  const active: EtaActive[] = [];
  for (const r of input.resvRows) {
    if (r.status === 'queued' || r.grantedAt == null) continue;
    const leases = input.leaseRows.filter((l) => l.reservationId === r.id && l.status !== 'released');
    if (!leases.length) continue;
    active.push({
      ...classOf(r),
      hostIds: leases.map((l) => l.hostId),
      grantedAt: r.grantedAt,
      // CI leases are renewed by heartbeats while the job runs: their TTL says nothing about the end
      expiresAt: r.kind === 'development' ? Math.min(...leases.map((l) => l.expiresAt)) : null,
    });
  }
  const etas = estimateQueue({
    now: input.now,
    hosts: input.hostIds.map((id) => ({
      id,
      schedulable: SCHEDULABLE.has(input.hostStates[id] ?? 'unknown'),
      state: input.hostStates[id] ?? 'unknown',
    })),
    active,
    queue: input.order.flatMap((id) => {
      const r = byId.get(id);
      return r ? [{ id, targetHost: r.targetHost, ...classOf(r) }] : [];
    }),
    stats,
  });
  return new Map(etas.map((e) => [e.id, e]));
}
