import { beforeEach, describe, expect, it } from 'vitest';
import { type AdmissionPlan, planAdmission } from '../../core/admission.ts';
import { config, facts, host, input, lease, NOW, req, resetSeq } from './admission-fixtures.ts';

/**
 * What the ledger can hand a pass after the fleet changed under it: a host removed from the
 * configuration while leased or named by queued work, a lease row whose reservation is gone, rows
 * that no longer bind. None of them may free a host early, lose GPUs from the budget or crash
 * the pass (rules 5–7), and each wait still says why.
 */

beforeEach(resetSeq);

const budgets = (maxGpus: number) => config({ budgets: { maxPrs: 10, maxGpusPerPr: 10, maxGpus } });
const waits = (p: AdmissionPlan) => p.waits.map((w) => [w.reservationId, w.code, w.reason]);

describe('admission after the fleet changed', () => {
  it('an expired lease on a host no longer in the fleet is release-required, and still holds a GPU', () => {
    const gone = req({ status: 'running' });
    const next = req();
    const plan = planAdmission(
      input(
        [host('spark-2')],
        [gone, next],
        [lease(gone.id, 'spark-9', 1, { expiresAt: NOW - 1 })],
        budgets(1),
      ),
    );
    expect(plan.expiries).toEqual([
      { leaseId: 'l-spark-9-1', reservationId: gone.id, hostId: 'spark-9', outcome: 'release-required' },
    ]);
    // a host the pass cannot see counts one GPU until its lease is released
    expect(waits(plan)).toEqual([[next.id, 'budget-gpus', 'budget: 1 of 1 GPUs in use']]);
  });

  it('a lease whose reservation is missing still holds its host GPUs', () => {
    const next = req();
    const plan = planAdmission(
      input(
        [host('spark-2'), host('spark-3', { gpus: 2, phase: 'allocated' })],
        [next],
        [lease('r-999', 'spark-3', 1)],
        budgets(2),
      ),
    );
    expect(waits(plan)).toEqual([[next.id, 'budget-gpus', 'budget: 2 of 2 GPUs in use']]);
    expect(plan.hostStates['spark-3']).toBe('allocated');
  });

  it('lease rows that no longer bind (released) neither keep a host nor count against budgets', () => {
    const old = req({ status: 'done' });
    const next = req({ pr: old.pr });
    const plan = planAdmission(
      input(
        [host('spark-2')],
        [old, next],
        [lease(old.id, 'spark-2', 1, { status: 'released' })],
        config({ budgets: { maxPrs: 1, maxGpusPerPr: 1, maxGpus: 1 } }),
      ),
    );
    expect(plan.grants.map((g) => [g.reservationId, g.hostIds])).toEqual([[next.id, ['spark-2']]]);
  });

  it('a finished reservation takes no PR slot', () => {
    const done = req({ status: 'done', pr: 1 });
    const next = req({ pr: 2 });
    const plan = planAdmission(
      input(
        [host('spark-2')],
        [done, next],
        [],
        config({ budgets: { maxPrs: 1, maxGpusPerPr: 1, maxGpus: 5 } }),
      ),
    );
    expect(plan.grants.map((g) => g.reservationId)).toEqual([next.id]);
  });

  it('work naming a host that left the fleet waits as target-unavailable', () => {
    const deckard = req({ kind: 'deckard', targetHost: 'spark-9', repo: null, pr: null });
    const dev = req({ kind: 'development', targetHost: 'spark-9', repo: null, pr: null });
    const plan = planAdmission(input([host('spark-1'), host('spark-2')], [deckard, dev]));
    expect(waits(plan)).toEqual([
      [dev.id, 'target-unavailable', 'spark-9 is not a host of pool spark'],
      [deckard.id, 'target-unavailable', 'spark-9 is not a host of pool spark'],
    ]);
    expect(plan.grants).toEqual([]);
  });

  it('a development request naming a host held for a pair waits without draining it', () => {
    const running = req({ status: 'running' });
    const pair = req({ topology: 'pair' });
    const dev = req({ kind: 'development', targetHost: 'spark-2', repo: null, pr: null });
    // priority: development first would take spark-2, so the pair must come first: same priority
    const plan = planAdmission(
      input(
        [host('spark-2'), host('spark-3')],
        [running, { ...pair, priority: 100 }, { ...dev, seq: pair.seq + 1 }],
        [lease(running.id, 'spark-3', 1)],
      ),
    );
    expect(plan.holds).toEqual([{ hostId: 'spark-2', reservationId: pair.id }]);
    expect(waits(plan)[1]).toEqual([dev.id, 'held-for-pair', `spark-2 held for ${pair.id}`]);
    // the pair claims the busy spark-3; the held spark-2 is not drained for the development request
    expect(plan.draining).toEqual([{ hostId: 'spark-3', reservationId: pair.id }]);
    expect(plan.hostStates).toEqual({ 'spark-2': 'held', 'spark-3': 'draining' });
  });

  it('a small pool names hosts granted earlier in the pass, and an allocated host without a lease', () => {
    const a = req();
    const b = req();
    const hosts = [
      host('spark-2', { homeService: null }),
      host('spark-3', { phase: 'allocated', homeService: null }),
      host('spark-4', { phase: 'allocated', homeService: null }),
    ];
    const cfg = config({ preferHosts: ['spark-4'], budgets: { maxPrs: 10, maxGpusPerPr: 10, maxGpus: 10 } });
    const plan = planAdmission(input(hosts, [a, b], [], cfg));
    expect(plan.grants.map((g) => [g.reservationId, g.hostIds, g.lend])).toEqual([[a.id, ['spark-2'], []]]);
    expect(waits(plan)).toEqual([
      [
        b.id,
        'hosts-busy',
        `waiting for a host in pool spark: spark-2 allocated to ${a.id}; spark-3 allocated; spark-4 draining for ${b.id}`,
      ],
    ]);
  });

  it('notes only hosts that look free but are kept out for their GPU', () => {
    const hosts = [
      host('spark-2', { facts: facts({ gpuProcesses: null, gpuError: 'nvidia-smi not found' }) }),
      host('spark-3', { facts: facts({ gpuProcesses: [{ pid: 7, name: 'python', usedMemoryMiB: 1 }] }) }),
      host('spark-4', { managed: false }),
      host('spark-5', { lastHeartbeatAt: NOW - 3_600_000 }),
      host('spark-6', { phase: 'quarantined' }),
      host('spark-7', { phase: 'release-required' }),
    ];
    expect(planAdmission(input(hosts, [])).hostNotes).toEqual({
      'spark-2': 'spark-2 GPU state unknown (nvidia-smi not found)',
      'spark-3': 'spark-3 has 1 GPU process(es) outside any lease',
    });
  });

  it('a pair that finds no free host holds nothing and waits as hosts-busy, naming the pool', () => {
    const a = req({ status: 'running' });
    const b = req({ status: 'running' });
    const pair = req({ topology: 'pair' });
    const hosts = [
      host('spark-2', { phase: 'allocated', homeService: null }),
      host('spark-3', { phase: 'allocated', homeService: null }),
    ];
    const plan = planAdmission(
      input(hosts, [a, b, pair], [lease(a.id, 'spark-2', 1), lease(b.id, 'spark-3', 1)], budgets(10)),
    );
    expect(plan.holds).toEqual([]);
    expect(plan.grants).toEqual([]);
    expect(waits(plan)).toEqual([
      [
        pair.id,
        'hosts-busy',
        `waiting for a host in pool spark: spark-2 draining for ${pair.id}; spark-3 draining for ${pair.id}`,
      ],
    ]);
  });

  it('a PR that already holds GPUs may add work after the PR limit was lowered below what runs', () => {
    const a = req({ status: 'running', pr: 1 });
    const b = req({ status: 'running', pr: 2 });
    const more = req({ pr: 1 });
    const other = req({ pr: 3 });
    const hosts = [
      host('spark-2', { phase: 'allocated', homeService: null }),
      host('spark-3', { phase: 'allocated', homeService: null }),
      host('spark-4', { homeService: null }),
      host('spark-5', { homeService: null }),
    ];
    const plan = planAdmission(
      input(
        hosts,
        [a, b, more, other],
        [lease(a.id, 'spark-2', 1), lease(b.id, 'spark-3', 1)],
        config({ budgets: { maxPrs: 1, maxGpusPerPr: 10, maxGpus: 10 } }),
      ),
    );
    // PR 1 is admitted already, so its new work takes no PR slot; PR 3 would be a third PR
    expect(plan.grants.map((g) => [g.reservationId, g.hostIds])).toEqual([[more.id, ['spark-4']]]);
    expect(waits(plan)).toEqual([[other.id, 'budget-prs', 'budget: 2 PRs admitted (limit 1)']]);
  });
});
