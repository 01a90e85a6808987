import type { LeaseStatus, ReservationStatus } from './model.ts';

/**
 * The event history's vocabulary (docs/architecture.md "Observability": an append-only history records
 * every transition with its cause). Every `events.type` the controller writes is one of these;
 * readers (dashboard, metrics, tests) match on the same names.
 */

export const LEDGER_SUBJECT_TYPES = [
  'reservation',
  'lease',
  'host',
  'token',
  'repository',
  'webhook',
  'audit',
  'outbox',
] as const;
export type LedgerSubjectType = (typeof LEDGER_SUBJECT_TYPES)[number];

/** Status transitions: `reservation.<status>` and `lease.<status>` as the state machines allow. */
export type ReservationTransitionEvent = `reservation.${ReservationStatus}`;
export type LeaseTransitionEvent = `lease.${LeaseStatus}`;

/** Events that are not a status transition of their subject. */
export const LEDGER_EVENTS = [
  // reservations
  'reservation.waiting',
  'reservation.unwanted_while_active',
  'reservation.job_mismatch',
  'reservation.job_completed',
  'reservation.receipt',
  'reservation.runner_registered',
  'reservation.runner_retry',
  'reservation.run_recorded',
  'reservation.recovery',
  // leases (a lease's grant is recorded by its reservation's `reservation.allocated` row: ADR 0100)
  'lease.renewed',
  'lease.prepared',
  'lease.prepare_failed',
  'lease.runner_handoff',
  'lease.runner_started',
  'lease.runner_exited',
  // hosts
  'host.registered',
  'host.phase',
  'host.adopted',
  'host.unadopted',
  'host.online',
  'host.restore_retry',
  // alerts an operator must see
  'alert.restore_failed',
  'alert.emergency_terminate',
  'alert.foreign_job',
  'alert.pair_node_lost',
  // a host whose agent could not clean up after a lease, quarantined with the reason (ADR 0156)
  'alert.cleanup_failed',
  // a home service that stopped by itself outside any lease: restarted through the restore path (ADR 0175)
  'alert.service_down',
  // credentials and repositories
  'token.created',
  'token.revoked',
  'agent_token.created',
  'agent_token.revoked',
  'repository.enabled',
  'repository.disabled',
  // GitHub intake and side effects
  'github.refused',
  'github.job_mismatch',
  'outbox.failed',
  // the rows a killed controller process had claimed, released for sending again
  'outbox.claims_released',
  // webhook inbox: a delivery that kept failing, and an operator's retry of it
  'webhook.parked',
  'webhook.retried',
  // a delivery GitHub failed to make (controller down) whose redelivery the controller asked for (ADR 0091)
  'webhook.redelivery_requested',
  // operator API audit trail
  'api.read',
  'api.denied',
] as const;

/**
 * Event types no longer written but still found in ledgers written before (history is
 * append-only): readers accept them. `lease.granted` was one row per granted host beside
 * `reservation.allocated`; a grant is now that one row, listing every lease (ADR 0100).
 */
export const RETIRED_LEDGER_EVENTS = ['lease.granted'] as const;

export type LedgerEventType =
  | ReservationTransitionEvent
  | LeaseTransitionEvent
  | (typeof LEDGER_EVENTS)[number];

/** The event type of a reservation's move to `to`. */
export function reservationEvent(to: ReservationStatus): ReservationTransitionEvent {
  return `reservation.${to}`;
}
/** The event type of a lease's move to `to`. */
export function leaseEvent(to: LeaseStatus): LeaseTransitionEvent {
  return `lease.${to}`;
}

/** One lease a grant issued, as the history records it. */
export interface GrantedLease {
  leaseId: string;
  reservationId: string;
  hostId: string;
  fencingToken: number;
  /** The host was lent by its home service (spark-1's Deckard drained for this work). */
  lend: boolean;
  /** The host's phase before the grant moved it to `allocated` (null when an old row lacks it). */
  hostFrom: string | null;
}

/** What the history keeps of each lease in a `reservation.allocated` row's data (`leases`). */
export interface GrantRowLease {
  id: string;
  hostId: string;
  fencingToken: number;
  lend: boolean;
  hostFrom: string;
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null;

/**
 * The leases an event row granted, from either form the history holds (ADR 0100): a
 * `reservation.allocated` row listing its leases in `data.leases` (one row per grant), or an
 * old ledger's `lease.granted` row (one per host; that ledger's `reservation.allocated` rows carry
 * no `leases`, so no grant is counted twice). Any other row, or data that is not JSON, grants nothing.
 */
export function leaseGrantsOf(row: {
  type: string;
  subjectId: string;
  dataJson: string | null;
}): GrantedLease[] {
  if (row.type !== 'reservation.allocated' && row.type !== 'lease.granted') return [];
  let data: unknown;
  try {
    data = JSON.parse(row.dataJson ?? 'null');
  } catch {
    return [];
  }
  return leaseGrantsOfData(row.type, row.subjectId, data);
}

/** {@link leaseGrantsOf} for an event whose data is at hand as recorded (a transition hook's). */
export function leaseGrantsOfData(type: string, subjectId: string, data: unknown): GrantedLease[] {
  if (!isObj(data)) return [];
  const one = (l: Record<string, unknown>, leaseId: unknown, reservationId: unknown): GrantedLease[] =>
    typeof leaseId === 'string' &&
    typeof reservationId === 'string' &&
    typeof l.hostId === 'string' &&
    typeof l.fencingToken === 'number'
      ? [
          {
            leaseId,
            reservationId,
            hostId: l.hostId,
            fencingToken: l.fencingToken,
            lend: l.lend === true,
            hostFrom: typeof l.hostFrom === 'string' ? l.hostFrom : null,
          },
        ]
      : [];
  if (type === 'lease.granted') return one(data, subjectId, data.reservationId);
  if (type !== 'reservation.allocated') return [];
  const leases = Array.isArray(data.leases) ? data.leases : [];
  return leases.flatMap((l) => (isObj(l) ? one(l, l.id, subjectId) : []));
}
