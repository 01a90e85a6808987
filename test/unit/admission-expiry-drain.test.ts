import { beforeEach, describe, expect, it } from 'vitest';
import { planAdmission } from '../../core/admission.ts';
import { config, host, input, lease, NOW, req, resetSeq } from './admission-fixtures.ts';

/**
 * Two admission rules at their edges: rule 7 (an expired lease never silently frees its host),
 * on a host that never sent facts; and rule 4 (only a development or Deckard request drains the
 * host it names), for a CI request naming a busy host; and rule 6 (the GPU budget) counting
 * the grants made earlier in the same pass.
 */

beforeEach(resetSeq);

describe('expiry on a host without facts (rule 7)', () => {
  it('an expired lease on a host that reports heartbeats but never sent facts needs a release', () => {
    const r = req({ status: 'running' });
    const plan = planAdmission(
      input(
        [host('spark-2', { phase: 'allocated', facts: null })],
        [r],
        [lease(r.id, 'spark-2', 1, { expiresAt: NOW - 1 })],
      ),
    );
    expect(plan.expiries).toEqual([
      { leaseId: 'l-spark-2-1', reservationId: r.id, hostId: 'spark-2', outcome: 'release-required' },
    ]);
  });
});

describe('who drains a busy host it names (rule 4)', () => {
  const busy = () => {
    const running = req({ kind: 'merge', status: 'running' });
    return {
      running,
      hosts: [host('spark-2', { phase: 'allocated' })],
      leases: [lease(running.id, 'spark-2', 1)],
    };
  };

  it('a CI request naming a busy host waits for it without draining it', () => {
    const { running, hosts, leases } = busy();
    const named = req({ kind: 'manual', targetHost: 'spark-2' });
    const plan = planAdmission(input(hosts, [running, named], leases));
    expect(plan.grants).toEqual([]);
    expect(plan.waits.map((w) => [w.reservationId, w.code])).toEqual([[named.id, 'hosts-busy']]);
    expect(plan.draining).toEqual([]);
    expect(plan.hostStates['spark-2']).toBe('allocated');
  });

  it('a development request naming the same busy host drains it', () => {
    const { running, hosts, leases } = busy();
    const dev = req({ kind: 'development', targetHost: 'spark-2', repo: null, pr: null });
    const plan = planAdmission(input(hosts, [running, dev], leases));
    expect(plan.draining).toEqual([{ hostId: 'spark-2', reservationId: dev.id }]);
    expect(plan.hostStates['spark-2']).toBe('draining');
  });
});

describe('GPU budget within one pass (rule 6)', () => {
  it('a grant made earlier in the pass counts: with one GPU of budget the second request waits', () => {
    const first = req();
    const second = req();
    const plan = planAdmission(
      input(
        [host('spark-2'), host('spark-3')],
        [first, second],
        [],
        config({ budgets: { maxPrs: 5, maxGpusPerPr: 5, maxGpus: 1 } }),
      ),
    );
    expect(plan.grants.map((g) => [g.reservationId, g.hostIds])).toEqual([[first.id, ['spark-2']]]);
    expect(plan.waits.map((w) => [w.reservationId, w.code, w.reason])).toEqual([
      [second.id, 'budget-gpus', 'budget: 1 of 1 GPUs in use'],
    ]);
  });
});
