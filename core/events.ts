import type { LeaseStatus, ReservationStatus } from './model.ts';

/**
 * The event history's vocabulary (DESIGN.md "Observability": an append-only history records
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
  // leases
  'lease.granted',
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
  // webhook inbox (issue 13): a delivery that kept failing, and an operator's retry of it
  'webhook.parked',
  'webhook.retried',
  // a delivery GitHub failed to make (controller down) whose redelivery the controller asked for (ADR 0091)
  'webhook.redelivery_requested',
  // operator API audit trail
  'api.read',
  'api.denied',
] as const;

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
