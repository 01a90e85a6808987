import { byHostId, isHeartbeatFresh } from './admission-fleet.ts';
import type { AdmissionInput, AdmissionPlan } from './admission-plan.ts';
import {
  BINDING_LEASE_STATUSES,
  type HostRecord,
  isActiveStatus,
  type LeaseRecord,
  queueOrder,
  type ReservationRecord,
} from './model.ts';

/**
 * The ledger's side of one admission pass: which leases bind which hosts, what is queued and what
 * is active, and the rules that end granted work without preempting it — a pair fails as a unit
 * when a node goes dark, and an expired lease never silently frees its host (rule 7).
 * Rules: docs/adr/0206-admission-as-named-steps.md.
 */
export interface Book {
  /** The lease binding each host (active, expired or releasing). */
  boundLease: Map<string, LeaseRecord>;
  /** Hosts bound to each reservation. */
  leasesByReservation: Map<string, string[]>;
  /** Queued reservations still inside their queue deadline, in the order the ledger gave them. */
  queued: ReservationRecord[];
  active: ReservationRecord[];
  activeById: Map<string, ReservationRecord>;
}

/** Indexes leases and reservations; a queued request past its deadline times out here. */
export function readBook(input: AdmissionInput, plan: AdmissionPlan): Book {
  const boundLease = new Map<string, LeaseRecord>();
  for (const l of input.leases) {
    if (BINDING_LEASE_STATUSES.includes(l.status)) boundLease.set(l.hostId, l);
  }
  const leasesByReservation = hostsPerReservation(boundLease.values(), () => true);
  // One walk over the reservations (10,000s queued): a set or map of every id costs more than the
  // rest of the pass, so only the active ones are indexed.
  const queued: ReservationRecord[] = [];
  const active: ReservationRecord[] = [];
  const activeById = new Map<string, ReservationRecord>();
  for (const r of input.reservations) {
    if (r.status === 'queued') {
      if (r.queueDeadline <= input.now) plan.queueTimeouts.push(r.id);
      else queued.push(r);
    } else if (isActiveStatus(r.status)) {
      active.push(r);
      activeById.set(r.id, r);
    }
  }
  return { boundLease, leasesByReservation, queued, active, activeById };
}

function hostsPerReservation(leases: Iterable<LeaseRecord>, keep: (l: LeaseRecord) => boolean) {
  const byReservation = new Map<string, string[]>();
  for (const l of leases) {
    if (!keep(l)) continue;
    const list = byReservation.get(l.reservationId) ?? [];
    list.push(l.hostId);
    byReservation.set(l.reservationId, list);
  }
  return byReservation;
}

/**
 * Rule 1, priority then FIFO: the queue in admission order. The ledger loads queued work already
 * in this order; it is sorted only when it is not.
 */
export function inPriorityOrder(queued: ReservationRecord[]): ReservationRecord[] {
  for (let i = 1; i < queued.length; i++) {
    if (queueOrder(queued[i - 1]!, queued[i]!) > 0) {
      queued.sort(queueOrder);
      break;
    }
  }
  return queued;
}

/**
 * A pair whose node went dark fails as a unit within the offline threshold: its job cannot finish
 * on one node, so waiting for the lease TTL only keeps the healthy node. Returns the lost pairs.
 */
export function failPairsWithADarkNode(
  book: Book,
  hostsById: ReadonlyMap<string, HostRecord>,
  now: number,
  offlineAfterS: number,
  plan: AdmissionPlan,
): Set<string> {
  const pairHosts = hostsPerReservation(book.boundLease.values(), (l) => l.status === 'active');
  const lostPairs = new Set<string>();
  for (const [rid, hostIds] of pairHosts) {
    const r = book.activeById.get(rid);
    if (r?.topology !== 'pair' || r.status === 'releasing') continue;
    const lost = hostIds.filter((id) => {
      const h = hostsById.get(id);
      return !h || !isHeartbeatFresh(h, now, offlineAfterS);
    });
    if (lost.length === 0) continue;
    lost.sort(byHostId);
    lostPairs.add(rid);
    plan.pairLosses.push({
      reservationId: rid,
      lostHosts: lost,
      healthyHosts: hostIds.filter((id) => !lost.includes(id)).sort(byHostId),
    });
  }
  return lostPairs;
}

/**
 * Rule 7: an expired lease never silently frees its host. Its host is released when its agent is
 * fresh and reports no GPU process; otherwise it needs release (never killed, never admitted).
 */
export function expireLeases(
  book: Book,
  lostPairs: ReadonlySet<string>,
  hostsById: ReadonlyMap<string, HostRecord>,
  now: number,
  offlineAfterS: number,
  plan: AdmissionPlan,
): void {
  for (const l of book.boundLease.values()) {
    if (l.status !== 'active' || l.expiresAt > now) continue;
    // a lost pair is released as a unit; its leases do not also expire
    if (lostPairs.has(l.reservationId)) continue;
    const host = hostsById.get(l.hostId);
    const fresh = host ? isHeartbeatFresh(host, now, offlineAfterS) : false;
    const procs = host?.facts?.gpuProcesses;
    const clean = fresh && procs != null && procs.length === 0;
    plan.expiries.push({
      leaseId: l.id,
      reservationId: l.reservationId,
      hostId: l.hostId,
      outcome: clean ? 'release' : 'release-required',
    });
  }
}
