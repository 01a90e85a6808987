import { describe, expect, it } from 'vitest';
import { HOST_PHASES, LEASE_STATUSES } from '../../core/model.ts';
import {
  assertHostTransition,
  assertLeaseTransition,
  canTransition,
  HOST_PHASE_TRANSITIONS,
  IllegalTransitionError,
} from '../../core/state-machines.ts';

/** Every lease and host move docs/architecture.md allows, and only those (rules 5 and 7). */

const LEASE_ALLOWED = ['active→expired', 'active→releasing', 'expired→releasing', 'releasing→released'];
const HOST_ALLOWED = [
  // granted, or the home service comes up / stops, or an operator quarantines
  'idle→allocated',
  'idle→service',
  // an explicit Deckard start on an idle host drives the restore path (ADR 0050)
  'idle→restoring',
  'idle→quarantined',
  'service→allocated',
  'service→idle',
  'service→restoring',
  'service→quarantined',
  // work ends: cleaned, or processes outlive the lease
  'allocated→cleaning',
  'allocated→release-required',
  'cleaning→idle',
  'cleaning→restoring',
  'cleaning→release-required',
  // the agent could not clean up in its bounded time, or an emergency terminate ended the work
  // without its confirmation: the host is quarantined (ADR 0156)
  'cleaning→quarantined',
  'release-required→quarantined',
  // the home service comes back, retries, fails for good, or is not wanted
  'restoring→service',
  'restoring→restoring',
  'restoring→quarantined',
  'restoring→idle',
  'release-required→cleaning',
  // only an operator clears quarantine
  'quarantined→idle',
  'quarantined→restoring',
];

describe('lease and host transitions', () => {
  it('leases move exactly as allowed; anything else is an illegal lease transition', () => {
    for (const from of LEASE_STATUSES)
      for (const to of LEASE_STATUSES) {
        const move = `${from}→${to}`;
        if (LEASE_ALLOWED.includes(move)) expect(() => assertLeaseTransition(from, to), move).not.toThrow();
        else
          expect(() => assertLeaseTransition(from, to), move).toThrow(
            `illegal lease transition ${from} → ${to}`,
          );
      }
  });

  it('hosts move exactly as allowed; anything else is an illegal host transition', () => {
    for (const from of HOST_PHASES)
      for (const to of HOST_PHASES) {
        const move = `${from}→${to}`;
        if (HOST_ALLOWED.includes(move)) expect(() => assertHostTransition(from, to), move).not.toThrow();
        else
          expect(() => assertHostTransition(from, to), move).toThrow(
            `illegal host transition ${from} → ${to}`,
          );
      }
  });

  it('the error names the machine and the move; an unknown state has no moves', () => {
    const e = (() => {
      try {
        assertHostTransition('idle', 'cleaning');
      } catch (err) {
        return err as IllegalTransitionError;
      }
    })();
    expect(e).toBeInstanceOf(IllegalTransitionError);
    expect(e).toMatchObject({
      name: 'IllegalTransitionError',
      machine: 'host',
      from: 'idle',
      to: 'cleaning',
    });
    expect(canTransition(HOST_PHASE_TRANSITIONS, 'gone' as never, 'idle')).toBe(false);
  });
});
