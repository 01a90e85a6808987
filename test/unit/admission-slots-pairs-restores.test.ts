import { beforeEach, describe, expect, it } from 'vitest';
import { budgetSlot, planAdmission } from '../../core/admission.ts';
import { config, facts, host, input, lease, NOW, req, resetSeq } from './admission-fixtures.ts';

/**
 * Rule 6 budget slots for CI without a PR, a pair failing as a unit only while it runs on active
 * leases, and the Deckard restore path's waits.
 */

beforeEach(resetSeq);

describe('budget slots', () => {
  const r = (kind: string, over: Record<string, unknown> = {}) =>
    budgetSlot({ repo: 'acme/iron', pr: null, kind: kind as never, headSha: 'abc123', id: 'r-7', ...over });
  it('a PR is its slot; merge, benchmark and background builds take one per build; the rest none', () => {
    expect(r('manual', { pr: 5 })).toBe('acme/iron#5');
    for (const kind of ['merge', 'benchmark', 'background']) {
      expect(r(kind), kind).toBe('acme/iron@abc123');
      expect(r(kind, { headSha: null }), kind).toBe('acme/iron@r-7');
      expect(r(kind, { repo: null }), kind).toBeNull();
    }
    for (const kind of ['manual', 'development', 'deckard']) expect(r(kind), kind).toBeNull();
  });
});

describe('pairs fail as a unit only while they run', () => {
  const pairOn = (status: 'running' | 'releasing', second: 'active' | 'expired' = 'active') => {
    const pair = req({ topology: 'pair', status });
    const hosts = [
      host('spark-2', { phase: 'allocated' }),
      host('spark-3', { phase: 'allocated', lastHeartbeatAt: NOW - 600_000 }),
    ];
    const leases = [lease(pair.id, 'spark-2', 1), lease(pair.id, 'spark-3', 2, { status: second })];
    return { pair, plan: planAdmission(input(hosts, [pair], leases)) };
  };
  it('a running pair with a dark node is lost: the dark node and the healthy one named', () => {
    const { pair, plan } = pairOn('running');
    expect(plan.pairLosses).toEqual([
      { reservationId: pair.id, lostHosts: ['spark-3'], healthyHosts: ['spark-2'] },
    ]);
  });
  it('a pair already releasing is not lost again', () => {
    expect(pairOn('releasing').plan.pairLosses).toEqual([]);
  });
  it('a lease that already expired follows the expiry rules, not the pair loss', () => {
    expect(pairOn('running', 'expired').plan.pairLosses).toEqual([]);
  });
  it('a pair whose nodes both report is not lost', () => {
    const pair = req({ topology: 'pair', status: 'running' });
    const hosts = [host('spark-2', { phase: 'allocated' }), host('spark-3', { phase: 'allocated' })];
    const plan = planAdmission(
      input(hosts, [pair], [lease(pair.id, 'spark-2', 1), lease(pair.id, 'spark-3', 2)]),
    );
    expect(plan.pairLosses).toEqual([]);
  });
});

describe('GPUs of active work', () => {
  it('an active reservation counts the GPUs of its leases: none before it has any', () => {
    const starting = req({ status: 'allocated' });
    const next = req();
    const plan = planAdmission(
      input(
        [host('spark-2')],
        [starting, next],
        [],
        config({ budgets: { maxPrs: 5, maxGpusPerPr: 5, maxGpus: 1 } }),
      ),
    );
    expect(plan.grants.map((g) => g.reservationId)).toEqual([next.id]);
  });
});

describe('Deckard restore', () => {
  it('sends an idle home host restoring, and a second start for it waits for the same health check', () => {
    const first = req({ kind: 'deckard', targetHost: 'spark-1', repo: null, pr: null });
    const second = req({ kind: 'deckard', targetHost: 'spark-1', repo: null, pr: null });
    const hosts = [host('spark-1', { phase: 'idle', facts: facts() })];
    const plan = planAdmission(input(hosts, [first, second]));
    expect(plan.restores).toEqual([{ hostId: 'spark-1', reservationId: first.id }]);
    expect(plan.waits.map((w) => [w.reservationId, w.code, w.reason])).toEqual([
      [first.id, 'restoring', 'spark-1 restoring deckard: waiting for its model-ready health check'],
      [second.id, 'restoring', 'waiting for spark-1 restoring deckard: model-ready health check'],
    ]);
    expect(plan.hostStates['spark-1']).toBe('restoring');
    expect(plan.grants).toEqual([]);
  });
});
