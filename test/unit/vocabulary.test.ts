import { describe, expect, it } from 'vitest';
import {
  LEDGER_EVENTS,
  LEDGER_SUBJECT_TYPES,
  leaseEvent,
  leaseGrantsOf,
  RETIRED_LEDGER_EVENTS,
  reservationEvent,
} from '../../core/events.ts';
import {
  ACTIVE_STATUSES,
  BINDING_LEASE_STATUSES,
  DONE_OUTCOMES,
  endsDone,
  HOST_PHASES,
  HOST_STATES,
  hostsNeeded,
  isActiveStatus,
  isJobOutcome,
  isReleasableStatus,
  isTerminalStatus,
  JOB_OUTCOMES,
  LEASE_STATUSES,
  OPEN_STATUSES,
  OUTCOMES,
  prKey,
  queueOrder,
  RELEASABLE_STATUSES,
  RESERVATION_KINDS,
  RESERVATION_STATUSES,
  SUITES,
  TERMINAL_STATUSES,
  TOPOLOGIES,
} from '../../core/model.ts';
import { LEASE_TRANSITIONS, RESERVATION_TRANSITIONS } from '../../core/state-machines.ts';
import { req } from './admission-fixtures.ts';

/**
 * core/ owns the vocabulary: statuses, outcomes and event types every part reads. These
 * tests pin what each set means in terms of the state machines and the design, not its spelling.
 */

const word = /^[a-z][a-z0-9_-]*$/;

describe('reservation statuses', () => {
  it('are the lifecycle of docs/architecture.md "Reservation"', () => {
    expect(RESERVATION_STATUSES).toEqual([
      'queued',
      'allocated',
      'preparing',
      'running',
      'releasing',
      'done',
      'cancelled',
      'superseded',
      'failed',
    ]);
    expect(RESERVATION_KINDS).toEqual([
      'development',
      'deckard',
      'manual',
      'merge',
      'benchmark',
      'background',
    ]);
    expect(TOPOLOGIES).toEqual(['single', 'pair']);
    expect(SUITES).toEqual(['smoke', 'performance']);
  });

  it('terminal = no way out; active = granted until termination is confirmed; releasable = may start releasing', () => {
    const out = (s: string) => RESERVATION_TRANSITIONS[s as keyof typeof RESERVATION_TRANSITIONS];
    expect(RESERVATION_STATUSES.filter((s) => out(s).length === 0)).toEqual([...TERMINAL_STATUSES]);
    expect(RESERVATION_STATUSES.filter((s) => out(s).includes('releasing'))).toEqual([
      ...RELEASABLE_STATUSES,
    ]);
    expect(ACTIVE_STATUSES).toEqual([...RELEASABLE_STATUSES, 'releasing']);
    expect(OPEN_STATUSES).toEqual(['queued', ...ACTIVE_STATUSES]);
    for (const s of RESERVATION_STATUSES) {
      expect(isTerminalStatus(s), s).toBe(TERMINAL_STATUSES.includes(s as never));
      expect(isActiveStatus(s), s).toBe(ACTIVE_STATUSES.includes(s as never));
      expect(isReleasableStatus(s), s).toBe(RELEASABLE_STATUSES.includes(s as never));
      // every status is exactly one of: queued, active, terminal
      expect([s === 'queued', isActiveStatus(s), isTerminalStatus(s)].filter(Boolean), s).toHaveLength(1);
    }
    expect(isActiveStatus('unknown')).toBe(false);
  });
});

describe('outcomes', () => {
  it('are distinct words; job and done outcomes are outcomes', () => {
    for (const o of OUTCOMES) expect(o).toMatch(/^[a-z][a-z0-9_ ]*$/);
    expect(new Set(OUTCOMES).size).toBe(OUTCOMES.length);
    expect(OUTCOMES).toEqual(expect.arrayContaining([...JOB_OUTCOMES, ...DONE_OUTCOMES]));
    expect(OUTCOMES).toEqual(
      expect.arrayContaining(['cancelled', 'superseded', 'queue_timeout', 'already_serving', 'expired']),
    );
  });

  it('never a wait code (those live in their own column)', () => {
    for (const code of ['hosts-busy', 'held-for-pair', 'budget-prs', 'budget-pr-gpus', 'budget-gpus'])
      expect(OUTCOMES).not.toContain(code);
  });

  it('GitHub job results are passed, failed, cancelled', () => {
    expect(JOB_OUTCOMES).toEqual(['passed', 'failed', 'cancelled']);
    expect(isJobOutcome('passed')).toBe(true);
    expect(isJobOutcome('cancelled')).toBe(true);
    expect(isJobOutcome('released')).toBe(false);
    expect(isJobOutcome(null)).toBe(false);
    expect(isJobOutcome(undefined)).toBe(false);
  });

  it('work ends done after a pass, a release, a clean runner exit or a clean expiry; else failed', () => {
    for (const o of ['passed', 'released', 'runner exited 0', 'expired', null])
      expect(endsDone(o), String(o)).toBe(true);
    for (const o of [
      'failed',
      'cancelled',
      'queue_timeout',
      'terminated',
      'runner_not_picked_up',
      'github_failed',
    ])
      expect(endsDone(o), o).toBe(false);
  });
});

describe('leases and hosts', () => {
  it('only released frees a host; released is final', () => {
    expect(LEASE_STATUSES).toEqual(['active', 'expired', 'releasing', 'released']);
    expect(BINDING_LEASE_STATUSES).toEqual(LEASE_STATUSES.filter((s) => s !== 'released'));
    expect(LEASE_TRANSITIONS.released).toEqual([]);
  });

  it('host states are the persisted phases plus what is derived', () => {
    expect(HOST_PHASES).toEqual([
      'idle',
      'service',
      'allocated',
      'cleaning',
      'restoring',
      'release-required',
      'quarantined',
    ]);
    expect([...HOST_STATES].sort()).toEqual(
      [...HOST_PHASES, 'unknown', 'offline', 'held', 'draining'].sort(),
    );
  });
});

describe('event types', () => {
  it('are <subject>.<what>, distinct, for the subjects the history knows', () => {
    expect(LEDGER_SUBJECT_TYPES).toEqual([
      'reservation',
      'lease',
      'host',
      'token',
      'repository',
      'webhook',
      'audit',
      'outbox',
    ]);
    expect(LEDGER_EVENTS.length).toBeGreaterThan(30);
    expect(new Set(LEDGER_EVENTS).size).toBe(LEDGER_EVENTS.length);
    for (const e of LEDGER_EVENTS) {
      const [subject, what, ...rest] = e.split('.');
      expect(rest, e).toEqual([]);
      expect(subject, e).toMatch(word);
      expect(what, e).toMatch(word);
    }
    // the ones readers match on by name
    expect(LEDGER_EVENTS).toEqual(
      expect.arrayContaining([
        'reservation.waiting',
        'lease.renewed',
        'host.phase',
        'alert.restore_failed',
        'api.read',
      ]),
    );
  });

  it('a grant is one `reservation.allocated` row; old `lease.granted` rows still read (ADR 0100)', () => {
    // retired: never written again (not in the writable vocabulary), but readers accept it
    expect(RETIRED_LEDGER_EVENTS).toEqual(['lease.granted']);
    expect(LEDGER_EVENTS).not.toContain('lease.granted');
    const pair = {
      type: 'reservation.allocated',
      subjectId: 'r-7',
      dataJson: JSON.stringify({
        hosts: ['spark-2', 'spark-1'],
        lend: ['spark-1'],
        leases: [
          { id: 'l-spark-2-4', hostId: 'spark-2', fencingToken: 4, lend: false, hostFrom: 'idle' },
          { id: 'l-spark-1-9', hostId: 'spark-1', fencingToken: 9, lend: true, hostFrom: 'service' },
        ],
      }),
    };
    expect(leaseGrantsOf(pair)).toEqual([
      {
        leaseId: 'l-spark-2-4',
        reservationId: 'r-7',
        hostId: 'spark-2',
        fencingToken: 4,
        lend: false,
        hostFrom: 'idle',
      },
      {
        leaseId: 'l-spark-1-9',
        reservationId: 'r-7',
        hostId: 'spark-1',
        fencingToken: 9,
        lend: true,
        hostFrom: 'service',
      },
    ]);
    // an old ledger: the lease's own row grants it; that ledger's allocated row lists no leases
    const old = {
      type: 'lease.granted',
      subjectId: 'l-spark-2-3',
      dataJson: JSON.stringify({ reservationId: 'r-6', hostId: 'spark-2', fencingToken: 3, lend: false }),
    };
    expect(leaseGrantsOf(old)).toEqual([
      {
        leaseId: 'l-spark-2-3',
        reservationId: 'r-6',
        hostId: 'spark-2',
        fencingToken: 3,
        lend: false,
        hostFrom: null,
      },
    ]);
    const oldAllocated = { ...pair, dataJson: JSON.stringify({ hosts: ['spark-2'], lend: [] }) };
    expect(leaseGrantsOf(oldAllocated)).toEqual([]);
    // anything else, or data that is not what a grant writes, grants nothing
    expect(leaseGrantsOf({ ...pair, type: 'reservation.queued' })).toEqual([]);
    expect(leaseGrantsOf({ ...pair, dataJson: '{not json' })).toEqual([]);
    expect(
      leaseGrantsOf({ ...old, dataJson: JSON.stringify({ reservationId: 'r-6', hostId: 'spark-2' }) }),
    ).toEqual([]);
  });

  it('status transitions are named after the status they reach', () => {
    expect(RESERVATION_STATUSES.map(reservationEvent)).toContain('reservation.superseded');
    expect(reservationEvent('queued')).toBe('reservation.queued');
    expect(leaseEvent('expired')).toBe('lease.expired');
  });
});

describe('queue helpers', () => {
  it('PR key is repo#pr only when both are known', () => {
    expect(prKey({ repo: 'acme/iron', pr: 7 })).toBe('acme/iron#7');
    expect(prKey({ repo: 'acme/iron', pr: 0 })).toBe('acme/iron#0');
    expect(prKey({ repo: 'acme/iron', pr: null })).toBeNull();
    expect(prKey({ repo: null, pr: 7 })).toBeNull();
  });

  it('priority first, then arrival; a pair needs two hosts', () => {
    const a = req({ priority: 80, seq: 5 });
    const b = req({ priority: 80, seq: 6 });
    const c = req({ priority: 100, seq: 9 });
    expect([b, a, c].sort(queueOrder).map((r) => r.seq)).toEqual([9, 5, 6]);
    expect(queueOrder(a, a)).toBe(0);
    expect([hostsNeeded('single'), hostsNeeded('pair')]).toEqual([1, 2]);
  });
});
