import { beforeEach, describe, expect, it } from 'vitest';
import { type AdmissionPlan, planAdmission } from '../../core/admission.ts';
import { config, host, input, lease, NOW, req, resetSeq } from './admission-fixtures.ts';

/**
 * Why a request waits, in the words `sparkctl status`, the dashboard and the check run show
 * ("Spark test queued — position 2: …"). Every wait code with its exact reason.
 */

beforeEach(resetSeq);

const waits = (p: AdmissionPlan) => p.waits.map((w) => [w.reservationId, w.position, w.code, w.reason]);

describe('wait reasons', () => {
  it('names each host of a small pool: held, draining, free, or why it is out', () => {
    const running = req({ status: 'running' });
    const dev = req({ kind: 'development', targetHost: 'spark-2', repo: null, pr: null });
    const pair = req({ topology: 'pair' });
    const ci = req({ kind: 'benchmark' });
    const hosts = [
      host('spark-1'),
      host('spark-2', { phase: 'allocated' }),
      host('spark-3', { managed: false }),
      host('spark-4', { lastHeartbeatAt: NOW - 41_000 }),
    ];
    const plan = planAdmission(input(hosts, [running, dev, pair, ci], [lease(running.id, 'spark-2', 1)]));
    const pool = `spark-1 held for ${pair.id}; spark-2 draining for ${dev.id}; spark-3 is not adopted; spark-4 offline (no recent heartbeat)`;
    expect(waits(plan)).toEqual([
      [dev.id, 1, 'hosts-busy', `spark-2 draining: spark-2 allocated to ${running.id}; active job finishing`],
      [pair.id, 2, 'held-for-pair', `holding spark-1; waiting for a second host in pool spark: ${pool}`],
      [ci.id, 3, 'hosts-busy', `waiting for a host in pool spark: ${pool}`],
    ]);
    expect(plan.hostStates).toEqual({
      'spark-1': 'held',
      'spark-2': 'draining',
      'spark-3': 'unknown',
      'spark-4': 'offline',
    });
  });

  it('counts the hosts of a large pool instead of naming them', () => {
    const a = req({ status: 'running' });
    const pair = req({ topology: 'pair' });
    const ci = req();
    const hosts = [
      host('spark-1', { phase: 'allocated' }),
      host('spark-2'),
      host('spark-3', { phase: 'quarantined' }),
      host('spark-4', { phase: 'cleaning' }),
      host('spark-5', { phase: 'restoring', homeService: null }),
    ];
    const plan = planAdmission(input(hosts, [a, pair, ci], [lease(a.id, 'spark-1', 1)]));
    const pool = '3 busy, 1 held, 1 unavailable of 5 hosts';
    expect(waits(plan)).toEqual([
      [pair.id, 1, 'held-for-pair', `holding spark-2; waiting for a second host in pool spark: ${pool}`],
      [ci.id, 2, 'hosts-busy', `waiting for a host in pool spark: ${pool}`],
    ]);
  });

  it('says why a named host cannot be had', () => {
    const quarantined = req({ kind: 'development', targetHost: 'spark-3', repo: null, pr: null });
    const rr = req({ kind: 'development', targetHost: 'spark-4', repo: null, pr: null });
    const elsewhere = req({ kind: 'development', targetHost: 'gpu-1', repo: null, pr: null });
    const unknownGpu = req({ kind: 'development', targetHost: 'spark-5', repo: null, pr: null });
    const cleaning = req({ kind: 'development', targetHost: 'spark-6', repo: null, pr: null });
    const restoring = req({ kind: 'development', targetHost: 'spark-7', repo: null, pr: null });
    const restoringHome = req({ kind: 'development', targetHost: 'spark-1', repo: null, pr: null });
    const hosts = [
      host('spark-1', { phase: 'restoring' }),
      host('spark-3', { phase: 'quarantined' }),
      host('spark-4', { phase: 'release-required' }),
      host('gpu-1', { pool: 'gpu' }),
      host('spark-5', { facts: null }),
      host('spark-6', { phase: 'cleaning' }),
      host('spark-7', { phase: 'restoring' }),
    ];
    const plan = planAdmission(
      input(hosts, [quarantined, rr, elsewhere, unknownGpu, cleaning, restoring, restoringHome]),
    );
    expect(waits(plan)).toEqual([
      [
        quarantined.id,
        1,
        'target-unavailable',
        'waiting for spark-3 quarantined until an operator clears it',
      ],
      [rr.id, 2, 'target-unavailable', 'waiting for spark-4 needs release: processes outlived the lease'],
      [elsewhere.id, 3, 'target-unavailable', 'gpu-1 is not a host of pool spark'],
      [unknownGpu.id, 4, 'target-unavailable', 'waiting for spark-5 GPU state unknown (no report)'],
      [cleaning.id, 5, 'hosts-busy', 'spark-6 draining: spark-6 cleaning up; active job finishing'],
      [restoring.id, 6, 'hosts-busy', 'spark-7 draining: spark-7 restoring service; active job finishing'],
      [
        restoringHome.id,
        7,
        'hosts-busy',
        'spark-1 draining: spark-1 restoring deckard; active job finishing',
      ],
    ]);
    expect(plan.hostNotes).toEqual({ 'spark-5': 'spark-5 GPU state unknown (no report)' });
    // busy hosts still drain for the named development request, but keep showing what they do
    expect(plan.draining).toEqual([
      { hostId: 'spark-6', reservationId: cleaning.id },
      { hostId: 'spark-7', reservationId: restoring.id },
      { hostId: 'spark-1', reservationId: restoringHome.id },
    ]);
    expect([plan.hostStates['spark-6'], plan.hostStates['spark-1']]).toEqual(['cleaning', 'restoring']);
  });

  it('a named host held for a pair says so', () => {
    const running = req({ status: 'running' });
    const pair = req({ topology: 'pair' });
    const named = req({ kind: 'benchmark', targetHost: 'spark-2' });
    const plan = planAdmission(
      input([host('spark-2'), host('spark-3')], [running, pair, named], [lease(running.id, 'spark-3', 1)]),
    );
    expect(waits(plan)[1]).toEqual([named.id, 2, 'held-for-pair', `spark-2 held for ${pair.id}`]);
  });

  it('budgets, each in words', () => {
    const hosts = ['a', 'b', 'c', 'd'].map((x) => host(`spark-${x}`));
    const mine = req({ pr: 1, status: 'running' });
    const other = req({ pr: 2, status: 'running' });
    const morePr1 = req({ pr: 1 });
    const third = req({ pr: 3 });
    const dev = req({ kind: 'development', repo: null, pr: null, topology: 'pair' });
    const plan = planAdmission(
      input(
        hosts,
        [mine, other, dev, morePr1, third],
        [lease(mine.id, 'spark-a', 1), lease(other.id, 'spark-b', 1)],
        config({ budgets: { maxPrs: 2, maxGpusPerPr: 1, maxGpus: 3 } }),
      ),
    );
    expect(waits(plan)).toEqual([
      [dev.id, 1, 'budget-gpus', 'budget: 2 of 3 GPUs in use'],
      [morePr1.id, 2, 'budget-pr-gpus', 'budget: acme/butter#1 holds 1 of 1 GPUs per PR'],
      [third.id, 3, 'budget-prs', 'budget: 2 PRs admitted (limit 2)'],
    ]);
  });

  it('pool too small, and the budgets, each in words', () => {
    const pair = req({ topology: 'pair', pool: 'gpu' });
    const single = req({ pool: 'none' });
    const plan = planAdmission(input([host('gpu-1', { pool: 'gpu' })], [pair, single]));
    expect(waits(plan)).toEqual([
      [pair.id, 1, 'pool-too-small', 'needs 2 hosts in pool gpu; 1 schedulable now'],
      [single.id, 2, 'pool-too-small', 'needs 1 host in pool none; 0 schedulable now'],
    ]);
  });

  it('a large pool counts only its own held hosts', () => {
    const running = req({ status: 'running' });
    const pair = req({ topology: 'pair', pool: 'gpu' });
    const ci = req();
    const hosts = [
      host('gpu-1', { pool: 'gpu' }),
      host('gpu-2', { pool: 'gpu', managed: true, phase: 'cleaning' }),
      ...[1, 2, 3, 4, 5].map((n) => host(`spark-${n}`, { phase: 'cleaning', homeService: null })),
    ];
    const plan = planAdmission(input(hosts, [running, pair, ci]));
    expect(plan.holds).toEqual([{ hostId: 'gpu-1', reservationId: pair.id }]);
    expect(waits(plan)[1]).toEqual([
      ci.id,
      2,
      'hosts-busy',
      'waiting for a host in pool spark: 5 busy, 0 held, 0 unavailable of 5 hosts',
    ]);
  });

  it('reasons name the drains that later requests in the same pass add', () => {
    const a = req({ status: 'running', pr: 1 });
    const b = req({ status: 'running', pr: 2 });
    const c = req({ status: 'running', pr: 3 });
    // an operator-raised manual request ahead of development work sees the pool first; each
    // waiting request claims the best busy host no earlier one claimed (ADR 0050)
    const urgent = req({ kind: 'manual', priority: 100 });
    const devAny = req({ kind: 'development', repo: null, pr: null });
    const devC = req({ kind: 'development', targetHost: 'spark-c', repo: null, pr: null });
    const ci = req();
    const hosts = ['spark-a', 'spark-b', 'spark-c'].map((id) => host(id, { phase: 'allocated' }));
    const plan = planAdmission(
      input(
        hosts,
        [a, b, c, urgent, devAny, devC, ci],
        [lease(a.id, 'spark-a', 1), lease(b.id, 'spark-b', 1), lease(c.id, 'spark-c', 1)],
      ),
    );
    expect(waits(plan)).toEqual([
      [
        urgent.id,
        1,
        'hosts-busy',
        `waiting for a host in pool spark: spark-a draining for ${urgent.id}; spark-b allocated to ${b.id}; spark-c allocated to ${c.id}`,
      ],
      [
        devAny.id,
        2,
        'hosts-busy',
        `waiting for a host in pool spark running the dstack executor: spark-a draining for ${urgent.id}; spark-b draining for ${devAny.id}; spark-c allocated to ${c.id}`,
      ],
      [devC.id, 3, 'hosts-busy', `spark-c draining: spark-c allocated to ${c.id}; active job finishing`],
      [
        ci.id,
        4,
        'hosts-busy',
        `waiting for a host in pool spark: spark-a draining for ${urgent.id}; spark-b draining for ${devAny.id}; spark-c draining for ${devC.id}`,
      ],
    ]);
    expect(plan.draining).toEqual([
      { hostId: 'spark-a', reservationId: urgent.id },
      { hostId: 'spark-b', reservationId: devAny.id },
      { hostId: 'spark-c', reservationId: devC.id },
    ]);
    expect(plan.hostStates).toEqual({ 'spark-a': 'draining', 'spark-b': 'draining', 'spark-c': 'draining' });
  });
});
