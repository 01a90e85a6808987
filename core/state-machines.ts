import type { HostPhase, LeaseStatus, ReservationStatus } from './model.ts';

/**
 * Explicit transition tables (docs/architecture.md "Domain model"). Every ledger write that changes a
 * status goes through {@link assertTransition}; anything not listed is illegal.
 */

export const RESERVATION_TRANSITIONS: Readonly<Record<ReservationStatus, readonly ReservationStatus[]>> = {
  // queued work may be granted, withdrawn (cancel/supersede), time out (failed, reason on the
  // check run), or be met without a lease (done: a Deckard start whose host already serves)
  queued: ['allocated', 'cancelled', 'superseded', 'failed', 'done'],
  // once granted, work only ends through releasing: the agent must confirm termination (rule 7)
  allocated: ['preparing', 'releasing'],
  preparing: ['running', 'releasing'],
  running: ['releasing'],
  releasing: ['done', 'failed'],
  done: [],
  cancelled: [],
  superseded: [],
  failed: [],
};

export const LEASE_TRANSITIONS: Readonly<Record<LeaseStatus, readonly LeaseStatus[]>> = {
  active: ['expired', 'releasing'],
  // an expired lease is never renewed back to active: old work may still run
  expired: ['releasing'],
  releasing: ['released'],
  released: [],
};

export const HOST_PHASE_TRANSITIONS: Readonly<Record<HostPhase, readonly HostPhase[]>> = {
  // idle → restoring: an explicit Deckard start drives the restore path
  idle: ['allocated', 'service', 'restoring', 'quarantined'],
  service: ['allocated', 'idle', 'restoring', 'quarantined'],
  allocated: ['cleaning', 'release-required'],
  // → quarantined: the agent could not clean up in its bounded time, or an emergency terminate
  // ended the work without its confirmation (ADR 0156)
  cleaning: ['idle', 'restoring', 'release-required', 'quarantined'],
  restoring: ['service', 'restoring', 'quarantined', 'idle'],
  'release-required': ['cleaning', 'quarantined'],
  // only an operator clears quarantine
  quarantined: ['idle', 'restoring'],
};

export class IllegalTransitionError extends Error {
  override name = 'IllegalTransitionError';
  constructor(
    readonly machine: 'reservation' | 'lease' | 'host',
    readonly from: string,
    readonly to: string,
  ) {
    super(`illegal ${machine} transition ${from} → ${to}`);
  }
}

export function canTransition<S extends string>(
  table: Readonly<Record<S, readonly S[]>>,
  from: S,
  to: S,
): boolean {
  return table[from]?.includes(to) ?? false;
}

export function assertReservationTransition(from: ReservationStatus, to: ReservationStatus): void {
  if (!canTransition(RESERVATION_TRANSITIONS, from, to))
    throw new IllegalTransitionError('reservation', from, to);
}
export function assertLeaseTransition(from: LeaseStatus, to: LeaseStatus): void {
  if (!canTransition(LEASE_TRANSITIONS, from, to)) throw new IllegalTransitionError('lease', from, to);
}
export function assertHostTransition(from: HostPhase, to: HostPhase): void {
  if (!canTransition(HOST_PHASE_TRANSITIONS, from, to)) throw new IllegalTransitionError('host', from, to);
}
