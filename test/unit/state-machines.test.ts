import { describe, expect, it } from 'vitest';
import { HOST_PHASES, LEASE_STATUSES, RESERVATION_STATUSES } from '../../core/model.ts';
import {
  assertHostTransition,
  assertLeaseTransition,
  assertReservationTransition,
  HOST_PHASE_TRANSITIONS,
  IllegalTransitionError,
  LEASE_TRANSITIONS,
  RESERVATION_TRANSITIONS,
} from '../../core/state-machines.ts';

describe('state machines', () => {
  it('every status has a row and only names known statuses', () => {
    expect(Object.keys(RESERVATION_TRANSITIONS).sort()).toEqual([...RESERVATION_STATUSES].sort());
    expect(Object.keys(LEASE_TRANSITIONS).sort()).toEqual([...LEASE_STATUSES].sort());
    expect(Object.keys(HOST_PHASE_TRANSITIONS).sort()).toEqual([...HOST_PHASES].sort());
    for (const to of Object.values(RESERVATION_TRANSITIONS).flat())
      expect(RESERVATION_STATUSES).toContain(to);
    for (const to of Object.values(LEASE_TRANSITIONS).flat()) expect(LEASE_STATUSES).toContain(to);
    for (const to of Object.values(HOST_PHASE_TRANSITIONS).flat()) expect(HOST_PHASES).toContain(to);
  });

  it('the design lifecycle is legal', () => {
    const path = ['queued', 'allocated', 'preparing', 'running', 'releasing', 'done'] as const;
    for (let i = 1; i < path.length; i++)
      expect(() => assertReservationTransition(path[i - 1]!, path[i]!)).not.toThrow();
  });

  it('cancelled and superseded only while queued', () => {
    for (const from of ['allocated', 'preparing', 'running', 'releasing'] as const) {
      expect(() => assertReservationTransition(from, 'cancelled')).toThrow(IllegalTransitionError);
      expect(() => assertReservationTransition(from, 'superseded')).toThrow(IllegalTransitionError);
    }
    expect(() => assertReservationTransition('queued', 'cancelled')).not.toThrow();
  });

  it('active work ends only through releasing (termination confirmed)', () => {
    for (const from of ['allocated', 'preparing', 'running'] as const) {
      expect(() => assertReservationTransition(from, 'done')).toThrow(/illegal reservation transition/);
      expect(() => assertReservationTransition(from, 'failed')).toThrow(IllegalTransitionError);
    }
  });

  it('terminal statuses never move', () => {
    for (const from of ['done', 'cancelled', 'superseded', 'failed'] as const) {
      for (const to of RESERVATION_STATUSES) expect(() => assertReservationTransition(from, to)).toThrow();
    }
  });

  it('an expired lease is never renewed back to active; only release frees it', () => {
    expect(() => assertLeaseTransition('expired', 'active')).toThrow(IllegalTransitionError);
    expect(() => assertLeaseTransition('active', 'released')).toThrow(IllegalTransitionError);
    expect(() => assertLeaseTransition('releasing', 'released')).not.toThrow();
  });

  it('hosts: release-required and quarantine are exits only an operator or confirmation opens', () => {
    expect(() => assertHostTransition('release-required', 'idle')).toThrow(IllegalTransitionError);
    expect(() => assertHostTransition('release-required', 'allocated')).toThrow(IllegalTransitionError);
    expect(() => assertHostTransition('quarantined', 'allocated')).toThrow(IllegalTransitionError);
    expect(() => assertHostTransition('allocated', 'idle')).toThrow(IllegalTransitionError);
    expect(() => assertHostTransition('restoring', 'allocated')).toThrow(IllegalTransitionError);
    expect(() => assertHostTransition('allocated', 'cleaning')).not.toThrow();
  });
});
