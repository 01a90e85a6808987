import { beforeEach, describe, expect, it } from 'vitest';
import { planAdmission } from '../../core/admission.ts';
import { config, facts, host, input, lease, NOW, req, resetSeq } from './admission-fixtures.ts';

/** The exact edges of rules 7 and 8: offline after, lease expiry, queue timeout. */

beforeEach(resetSeq);
const cfg = config();
const offlineMs = cfg.timings.offlineAfterS * 1000;

describe('boundaries', () => {
  it('a heartbeat exactly offlineAfterS old is still fresh; one millisecond more is offline', () => {
    expect(
      planAdmission(input([host('spark-2', { lastHeartbeatAt: NOW - offlineMs })], [req()])).grants,
    ).toHaveLength(1);
    const late = planAdmission(input([host('spark-2', { lastHeartbeatAt: NOW - offlineMs - 1 })], [req()]));
    expect(late.grants).toEqual([]);
    expect(late.hostStates['spark-2']).toBe('offline');
  });

  it('a lease expires at its expiry time, not a millisecond later', () => {
    const r = req({ status: 'running' });
    const at = planAdmission(
      input([host('spark-2', { phase: 'allocated' })], [r], [lease(r.id, 'spark-2', 1, { expiresAt: NOW })]),
    );
    expect(at.expiries).toEqual([
      { leaseId: 'l-spark-2-1', reservationId: r.id, hostId: 'spark-2', outcome: 'release' },
    ]);
    const before = planAdmission(
      input(
        [host('spark-2', { phase: 'allocated' })],
        [r],
        [lease(r.id, 'spark-2', 1, { expiresAt: NOW + 1 })],
      ),
    );
    expect(before.expiries).toEqual([]);
  });

  it('an expired lease on a host whose GPU cannot be queried is release-required', () => {
    const r = req({ status: 'running' });
    const plan = planAdmission(
      input(
        [host('spark-2', { phase: 'allocated', facts: facts({ gpuProcesses: null }) })],
        [r],
        [lease(r.id, 'spark-2', 1, { expiresAt: NOW - 1 })],
      ),
    );
    expect(plan.expiries[0]!.outcome).toBe('release-required');
  });

  it('queued work times out at its deadline, not a millisecond later', () => {
    const due = req({ queueDeadline: NOW });
    const notYet = req({ queueDeadline: NOW + 1 });
    const plan = planAdmission(input([], [due, notYet]));
    expect(plan.queueTimeouts).toEqual([due.id]);
    expect(plan.waits.map((w) => w.reservationId)).toEqual([notYet.id]);
  });

  it('a host the ledger marks allocated is busy even without a lease row', () => {
    const r = req();
    const plan = planAdmission(input([host('spark-2', { phase: 'allocated' })], [r]));
    expect(plan.grants).toEqual([]);
    expect(plan.waits.map((w) => [w.reservationId, w.code, w.reason])).toEqual([
      [r.id, 'hosts-busy', `waiting for a host in pool spark: spark-2 draining for ${r.id}`],
    ]);
    // busy as allocated (a free host would be granted), so the request next in line claims it and
    // it drains for that request (ADR 0050); draining is only ever an allocated host
    expect(plan.draining).toEqual([{ hostId: 'spark-2', reservationId: r.id }]);
    expect(plan.hostStates['spark-2']).toBe('draining');
    expect(plan.hostNotes).toEqual({});
  });
});
