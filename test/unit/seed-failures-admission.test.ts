import { beforeEach, describe, expect, it } from 'vitest';
import { budgetSlot, planAdmission } from '../../core/admission.ts';
import { config, facts, host, input, lease, NOW, req, resetSeq } from './admission-fixtures.ts';

/** the seed's failure semantics and budget rules, one rule test each (pure planner). */

beforeEach(resetSeq);

describe('item 1: a pair node goes dark → the pair fails as a unit', () => {
  it('a stale heartbeat on one node of an active pair fails the pair, naming both sides', () => {
    const pair = req({ topology: 'pair', status: 'running' });
    const hosts = [
      host('spark-1', { phase: 'allocated', lastHeartbeatAt: NOW - 41_000 }),
      host('spark-2', { phase: 'allocated' }),
    ];
    const plan = planAdmission(
      input(hosts, [pair], [lease(pair.id, 'spark-1', 3), lease(pair.id, 'spark-2', 4)]),
    );
    expect(plan.pairLosses).toEqual([
      { reservationId: pair.id, lostHosts: ['spark-1'], healthyHosts: ['spark-2'] },
    ]);
  });

  it('within the offline threshold nothing happens (one missed heartbeat is not a loss)', () => {
    const pair = req({ topology: 'pair', status: 'running' });
    const hosts = [
      host('spark-1', { phase: 'allocated', lastHeartbeatAt: NOW - 39_000 }),
      host('spark-2', { phase: 'allocated' }),
    ];
    const plan = planAdmission(
      input(hosts, [pair], [lease(pair.id, 'spark-1', 3), lease(pair.id, 'spark-2', 4)]),
    );
    expect(plan.pairLosses).toEqual([]);
  });

  it('a lost pair whose lease also ran out is released as a unit, not expired node by node', () => {
    const pair = req({ topology: 'pair', status: 'running' });
    const hosts = [
      host('spark-1', { phase: 'allocated', lastHeartbeatAt: NOW - 400_000 }),
      host('spark-2', { phase: 'allocated' }),
    ];
    const plan = planAdmission(
      input(
        hosts,
        [pair],
        [
          lease(pair.id, 'spark-1', 3, { expiresAt: NOW - 1 }),
          lease(pair.id, 'spark-2', 4, { expiresAt: NOW - 1 }),
        ],
      ),
    );
    expect(plan.pairLosses.map((x) => x.reservationId)).toEqual([pair.id]);
    expect(plan.expiries).toEqual([]);
  });

  it('a single on an offline host is not a pair loss (its lease expiry handles it, rule 7)', () => {
    const single = req({ status: 'running' });
    const hosts = [host('spark-2', { phase: 'allocated', lastHeartbeatAt: NOW - 41_000 })];
    const plan = planAdmission(input(hosts, [single], [lease(single.id, 'spark-2', 3)]));
    expect(plan.pairLosses).toEqual([]);
  });
});

describe('item 2: an explicit Deckard start drives the restore path', () => {
  it('on an idle spark-1 the host goes restoring at once and the request waits for the health gate', () => {
    const start = req({ kind: 'deckard', targetHost: 'spark-1', repo: null, pr: null });
    const idle = host('spark-1', { phase: 'idle', facts: facts({ serviceState: 'stopped' }) });
    const plan = planAdmission(input([idle, host('spark-2')], [start]));
    expect(plan.grants).toEqual([]);
    expect(plan.restores).toEqual([{ hostId: 'spark-1', reservationId: start.id }]);
    expect(plan.hostStates['spark-1']).toBe('restoring');
    expect(plan.waits).toEqual([
      {
        reservationId: start.id,
        position: 1,
        code: 'restoring',
        reason: 'spark-1 restoring deckard: waiting for its model-ready health check',
      },
    ]);
  });

  it('with active work on spark-1 it runs next after it (non-preemptive): the host drains for it', () => {
    const running = req({ status: 'running' });
    const start = req({ kind: 'deckard', targetHost: 'spark-1', repo: null, pr: null });
    const later = req();
    const hosts = [host('spark-1', { phase: 'allocated' })];
    const plan = planAdmission(input(hosts, [running, start, later], [lease(running.id, 'spark-1', 5)]));
    expect(plan.grants).toEqual([]);
    expect(plan.restores).toEqual([]);
    expect(plan.draining).toEqual([{ hostId: 'spark-1', reservationId: start.id }]);
    expect(plan.hostStates['spark-1']).toBe('draining');
  });

  it('while its host restores, the request keeps waiting with the reason', () => {
    const start = req({ kind: 'deckard', targetHost: 'spark-1', repo: null, pr: null });
    const plan = planAdmission(input([host('spark-1', { phase: 'restoring' })], [start]));
    expect(plan.waits[0]).toMatchObject({ code: 'restoring' });
    expect(plan.satisfied).toEqual([]);
  });
});

describe('item 3: "Spark 2 draining — active job finishing" for the request next in line', () => {
  it('the head of the queue claims the busy host it is next in line for; the next request the next host', () => {
    const a = req({ status: 'running' });
    const b = req({ status: 'running' });
    const first = req();
    const second = req();
    const third = req();
    const hosts = [host('spark-1', { phase: 'allocated' }), host('spark-2', { phase: 'allocated' })];
    const plan = planAdmission(
      input(hosts, [a, b, first, second, third], [lease(a.id, 'spark-1', 2), lease(b.id, 'spark-2', 2)]),
    );
    // spark-2 first: spark-1 goes back to Deckard when freed
    expect(plan.draining).toEqual([
      { hostId: 'spark-2', reservationId: first.id },
      { hostId: 'spark-1', reservationId: second.id },
    ]);
    expect(plan.hostStates).toEqual({ 'spark-1': 'draining', 'spark-2': 'draining' });
    expect(plan.waits.map((w) => w.code)).toEqual(['hosts-busy', 'hosts-busy', 'hosts-busy']);
  });

  it('a request waiting on a budget claims nothing (only a host shortage drains)', () => {
    const a = req({ status: 'running', pr: 1 });
    const blocked = req({ pr: 2 });
    const plan = planAdmission(
      input(
        [host('spark-2', { phase: 'allocated' }), host('spark-3')],
        [a, blocked],
        [lease(a.id, 'spark-2', 1)],
        config({ budgets: { maxPrs: 1, maxGpusPerPr: 4, maxGpus: 8 } }),
      ),
    );
    expect(plan.waits[0]).toMatchObject({ code: 'budget-prs' });
    expect(plan.draining).toEqual([]);
  });
});

describe('item 4: background CI (class 20) is opportunistic', () => {
  it('yields to every other class waiting in its pool, with its reason, even when a host is free', () => {
    const running = req({ status: 'running', pr: 1 });
    const blocked = req({ pr: 2 });
    const background = req({ kind: 'background', pr: null, headSha: 'b'.repeat(40) });
    const plan = planAdmission(
      input(
        [host('spark-2', { phase: 'allocated' }), host('spark-3')],
        [running, blocked, background],
        [lease(running.id, 'spark-2', 1)],
        config({ budgets: { maxPrs: 3, maxGpusPerPr: 1, maxGpus: 1 } }),
      ),
    );
    expect(plan.grants).toEqual([]);
    expect(plan.waits.find((w) => w.reservationId === background.id)).toEqual({
      reservationId: background.id,
      position: 2,
      code: 'background-yields',
      reason: 'background CI yields: other work waits in pool spark',
    });
  });

  it('runs while the fleet would otherwise idle, and is never preempted by later work', () => {
    const background = req({ kind: 'background', pr: null });
    const idle = planAdmission(input([host('spark-2')], [background]));
    expect(idle.grants.map((g) => g.reservationId)).toEqual([background.id]);

    const running = req({ kind: 'background', pr: null, status: 'running' });
    const pr = req();
    const busy = planAdmission(
      input([host('spark-2', { phase: 'allocated' })], [running, pr], [lease(running.id, 'spark-2', 1)]),
    );
    expect(busy.grants).toEqual([]);
    expect(busy.expiries).toEqual([]);
    expect(busy.draining).toEqual([{ hostId: 'spark-2', reservationId: pr.id }]);
  });
});

describe('item 6: a PR keeps its slot between lanes; non-PR builds take their own slot', () => {
  it('a PR between its lanes keeps its slot: a third PR does not take it', () => {
    // PR 1's smoke lane finished; its long lane (same SHA) waits; PR 2 runs; PR 3 came earlier
    const pr2 = req({ pr: 2, status: 'running' });
    const pr3 = req({ pr: 3 });
    const lane2 = req({ pr: 1, suite: 'performance' });
    const plan = planAdmission({
      ...input(
        [host('spark-2', { phase: 'allocated' }), host('spark-3')],
        [pr2, pr3, lane2],
        [lease(pr2.id, 'spark-2', 1)],
        config({ budgets: { maxPrs: 2, maxGpusPerPr: 4, maxGpus: 8 } }),
      ),
      keptSlots: ['acme/butter#1'],
    });
    expect(plan.grants.map((g) => g.reservationId)).toEqual([lane2.id]);
    expect(plan.waits[0]).toMatchObject({ reservationId: pr3.id, code: 'budget-prs' });
  });

  it('without the kept slot the third PR would take it (the rule is what decides)', () => {
    const pr2 = req({ pr: 2, status: 'running' });
    const pr3 = req({ pr: 3 });
    const lane2 = req({ pr: 1, suite: 'performance' });
    const plan = planAdmission(
      input(
        [host('spark-2', { phase: 'allocated' }), host('spark-3')],
        [pr2, pr3, lane2],
        [lease(pr2.id, 'spark-2', 1)],
        config({ budgets: { maxPrs: 2, maxGpusPerPr: 4, maxGpus: 8 } }),
      ),
    );
    expect(plan.grants.map((g) => g.reservationId)).toEqual([pr3.id]);
  });

  it('a merge build consumes its own slot and the same GPU budget', () => {
    const merge = req({ kind: 'merge', pr: null, status: 'running', headSha: 'c'.repeat(40) });
    const pr = req({ pr: 7 });
    expect(budgetSlot(merge)).toBe(`acme/butter@${'c'.repeat(40)}`);
    const plan = planAdmission(
      input(
        [host('spark-2', { phase: 'allocated' }), host('spark-3')],
        [merge, pr],
        [lease(merge.id, 'spark-2', 1)],
        config({ budgets: { maxPrs: 1, maxGpusPerPr: 4, maxGpus: 8 } }),
      ),
    );
    expect(plan.grants).toEqual([]);
    expect(plan.waits[0]).toMatchObject({ code: 'budget-prs', reason: 'budget: 1 PRs admitted (limit 1)' });
  });

  it('development and Deckard work take no slot', () => {
    expect(budgetSlot(req({ kind: 'development', repo: null, pr: null }))).toBeNull();
    expect(budgetSlot(req({ kind: 'deckard', repo: null, pr: null }))).toBeNull();
  });
});
