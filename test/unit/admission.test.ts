import { beforeEach, describe, expect, it } from 'vitest';
import { planAdmission } from '../../core/admission.ts';
import { config, facts, host, input, lease, NOW, req, resetSeq } from './admission-fixtures.ts';

beforeEach(resetSeq);

describe('rule 1: priority desc, then FIFO; never preemptive', () => {
  it('grants the highest priority first and the earlier of equal priority', () => {
    const low = req({ kind: 'background' });
    const a = req({ kind: 'manual' });
    const b = req({ kind: 'manual' });
    const plan = planAdmission(input([host('spark-2')], [low, a, b]));
    expect(plan.grants.map((g) => g.reservationId)).toEqual([a.id]);
    expect(plan.waits.map((w) => [w.reservationId, w.position])).toEqual([
      [b.id, 1],
      [low.id, 2],
    ]);
  });

  it('a higher-priority request does not take a host from active work', () => {
    const running = req({ kind: 'background', status: 'running' });
    const dev = req({ kind: 'development', targetHost: 'spark-2', topology: 'single', repo: null, pr: null });
    const plan = planAdmission(
      input([host('spark-2')], [running, dev], [lease(running.id, 'spark-2', 3)], config()),
    );
    expect(plan.grants).toEqual([]);
    expect(plan.expiries).toEqual([]);
    expect(plan.waits[0]).toMatchObject({ reservationId: dev.id, code: 'hosts-busy' });
  });
});

describe('rule 2: one lease per host; unknown, unmanaged, offline … never granted', () => {
  it('never grants an unadopted host', () => {
    const plan = planAdmission(input([host('spark-2', { managed: false })], [req()]));
    expect(plan.grants).toEqual([]);
    expect(plan.hostStates['spark-2']).toBe('unknown');
  });

  it('stale heartbeat → offline, never idle, never granted', () => {
    const cfg = config();
    const stale = host('spark-2', { lastHeartbeatAt: NOW - (cfg.timings.offlineAfterS + 1) * 1000 });
    const plan = planAdmission(input([stale], [req()], [], cfg));
    expect(plan.hostStates['spark-2']).toBe('offline');
    expect(plan.grants).toEqual([]);
  });

  it('a host never heard from is offline', () => {
    const plan = planAdmission(input([host('spark-2', { lastHeartbeatAt: null })], [req()]));
    expect(plan.hostStates['spark-2']).toBe('offline');
    expect(plan.grants).toEqual([]);
  });

  it.each(['restoring', 'release-required', 'quarantined', 'cleaning'] as const)(
    'a %s host is not granted',
    (phase) => {
      const plan = planAdmission(input([host('spark-2', { phase })], [req()]));
      expect(plan.grants).toEqual([]);
      expect(plan.hostStates['spark-2']).toBe(phase);
    },
  );

  it('an idle host with a GPU process outside any lease is not granted', () => {
    const busy = host('spark-2', {
      facts: facts({ gpuProcesses: [{ pid: 7, name: 'python', usedMemoryMiB: 1000 }] }),
    });
    const plan = planAdmission(input([busy], [req()]));
    expect(plan.grants).toEqual([]);
    expect(plan.hostNotes['spark-2']).toMatch(/outside any lease/);
  });

  it('a host whose GPU cannot be queried is not granted (fail closed)', () => {
    const unknown = host('spark-2', {
      facts: facts({ gpuProcesses: null, gpuError: 'nvidia-smi not found' }),
    });
    const plan = planAdmission(input([unknown], [req()]));
    expect(plan.grants).toEqual([]);
    expect(plan.hostNotes['spark-2']).toMatch(/nvidia-smi not found/);
  });

  it('a host with a binding lease is not granted again', () => {
    const active = req({ status: 'running' });
    const next = req();
    const plan = planAdmission(input([host('spark-2')], [active, next], [lease(active.id, 'spark-2', 1)]));
    expect(plan.grants).toEqual([]);
  });
});

describe('spark-2 preference and Deckard lending order', () => {
  it('single work goes to spark-2 while spark-1 serves Deckard', () => {
    const plan = planAdmission(input([host('spark-1'), host('spark-2')], [req()]));
    expect(plan.grants).toEqual([expect.objectContaining({ hostIds: ['spark-2'], lend: [] })]);
    expect(plan.hostStates['spark-1']).toBe('service');
  });

  it('when only spark-1 is free, the grant lends Deckard', () => {
    const busy = req({ status: 'running' });
    const r = req();
    const plan = planAdmission(
      input([host('spark-1'), host('spark-2')], [busy, r], [lease(busy.id, 'spark-2', 4)]),
    );
    expect(plan.grants).toEqual([
      expect.objectContaining({ reservationId: r.id, hostIds: ['spark-1'], lend: ['spark-1'] }),
    ]);
  });

  it('an idle host beats a serving host even if the serving one is preferred', () => {
    const plan = planAdmission(
      input(
        [host('spark-1'), host('spark-2'), host('spark-3')],
        [req()],
        [],
        config({ preferHosts: ['spark-1'] }),
      ),
    );
    expect(plan.grants[0]!.hostIds).toEqual(['spark-2']);
  });

  it('an explicit Deckard start on a serving host is met without a grant', () => {
    const d = req({ kind: 'deckard', targetHost: 'spark-1', repo: null, pr: null });
    const plan = planAdmission(input([host('spark-1'), host('spark-2')], [d]));
    expect(plan.satisfied).toEqual([d.id]);
    expect(plan.grants).toEqual([]);
  });
});

describe('rule 3: pairs are atomic and hold the first free host', () => {
  it('grants both hosts at once, lending spark-1', () => {
    const p = req({ topology: 'pair' });
    const plan = planAdmission(input([host('spark-1'), host('spark-2')], [p]));
    expect(plan.grants).toEqual([
      expect.objectContaining({
        reservationId: p.id,
        hostIds: ['spark-2', 'spark-1'],
        lend: ['spark-1'],
        gpus: 2,
      }),
    ]);
  });

  it('pair hold: the host that frees first is held, not given to smaller work', () => {
    const running = req({ status: 'running' });
    const pair = req({ topology: 'pair' });
    const small = req({ kind: 'benchmark' });
    const plan = planAdmission(
      input([host('spark-1'), host('spark-2')], [running, pair, small], [lease(running.id, 'spark-2', 9)]),
    );
    expect(plan.grants).toEqual([]);
    expect(plan.holds).toEqual([{ hostId: 'spark-1', reservationId: pair.id }]);
    expect(plan.hostStates['spark-1']).toBe('held');
    expect(plan.waits.find((w) => w.reservationId === pair.id)).toMatchObject({
      code: 'held-for-pair',
      reason: expect.stringContaining('holding spark-1'),
    });
    expect(plan.waits.find((w) => w.reservationId === small.id)!.reason).toContain(
      `spark-1 held for ${pair.id}`,
    );
  });

  it('a pair never gets only one host, even across pools', () => {
    const p = req({ topology: 'pair' });
    const other = host('gpu-9', { pool: 'other' });
    const plan = planAdmission(input([host('spark-2'), other], [p]));
    expect(plan.grants).toEqual([]);
    expect(plan.waits[0]).toMatchObject({ code: 'pool-too-small' });
  });
});

describe('rule 4: development drains its target', () => {
  it('marks the target draining and keeps later CI off it', () => {
    const running = req({ status: 'running' });
    const dev = req({ kind: 'development', targetHost: 'spark-2', repo: null, pr: null });
    const ci = req({ kind: 'manual' });
    const plan = planAdmission(
      input([host('spark-2')], [running, dev, ci], [lease(running.id, 'spark-2', 2)]),
    );
    expect(plan.draining).toEqual([{ hostId: 'spark-2', reservationId: dev.id }]);
    expect(plan.hostStates['spark-2']).toBe('draining');
    expect(plan.waits.find((w) => w.reservationId === dev.id)!.reason).toMatch(
      /spark-2 draining.*active job finishing/,
    );
    expect(plan.waits.find((w) => w.reservationId === ci.id)!.reason).toContain(
      `spark-2 draining for ${dev.id}`,
    );
  });

  it('an untargeted development request drains the preferred busy host', () => {
    const a = req({ status: 'running' });
    const b = req({ status: 'running' });
    const dev = req({ kind: 'development', repo: null, pr: null });
    const plan = planAdmission(
      input(
        [host('spark-1', { phase: 'allocated' }), host('spark-2')],
        [a, b, dev],
        [lease(a.id, 'spark-1', 1), lease(b.id, 'spark-2', 1)],
      ),
    );
    expect(plan.draining).toEqual([{ hostId: 'spark-2', reservationId: dev.id }]);
  });
});

describe('rule 6: budgets', () => {
  it('at most N distinct PRs with admitted work', () => {
    const hosts = ['a', 'b', 'c'].map((x) => host(`spark-${x}`));
    const r1 = req({ pr: 1 });
    const r2 = req({ pr: 2 });
    const r3 = req({ pr: 3 });
    const plan = planAdmission(
      input(hosts, [r1, r2, r3], [], config({ budgets: { maxPrs: 2, maxGpusPerPr: 4, maxGpus: 8 } })),
    );
    expect(plan.grants.map((g) => g.reservationId)).toEqual([r1.id, r2.id]);
    expect(plan.waits[0]).toMatchObject({
      reservationId: r3.id,
      code: 'budget-prs',
      reason: 'budget: 2 PRs admitted (limit 2)',
    });
  });

  it('a PR already admitted may add work within its GPU budget', () => {
    const hosts = ['a', 'b', 'c'].map((x) => host(`spark-${x}`));
    const r1 = req({ pr: 1 });
    const r1b = req({ pr: 1 });
    const r1c = req({ pr: 1 });
    const plan = planAdmission(
      input(hosts, [r1, r1b, r1c], [], config({ budgets: { maxPrs: 1, maxGpusPerPr: 2, maxGpus: 8 } })),
    );
    expect(plan.grants.map((g) => g.reservationId)).toEqual([r1.id, r1b.id]);
    expect(plan.waits[0]).toMatchObject({ code: 'budget-pr-gpus' });
  });

  it('at most K GPUs in all, counting active work until termination is confirmed', () => {
    const hosts = ['a', 'b', 'c'].map((x) => host(`spark-${x}`));
    const releasing = req({ status: 'releasing', repo: null, pr: null, kind: 'development' });
    const r = req();
    const plan = planAdmission(
      input(
        hosts,
        [releasing, r],
        [lease(releasing.id, 'spark-a', 1, { status: 'releasing' })],
        config({ budgets: { maxPrs: 5, maxGpusPerPr: 5, maxGpus: 1 } }),
      ),
    );
    expect(plan.grants).toEqual([]);
    expect(plan.waits[0]).toMatchObject({ code: 'budget-gpus', reason: 'budget: 1 of 1 GPUs in use' });
  });

  it('a budget-blocked request does not hold hosts; smaller work from another PR proceeds', () => {
    const hosts = [host('spark-a'), host('spark-b')];
    const running = req({ pr: 1, status: 'running' });
    const blocked = req({ pr: 2 });
    const sameAsRunning = req({ pr: 1, kind: 'benchmark' });
    const plan = planAdmission(
      input(
        hosts,
        [running, blocked, sameAsRunning],
        [lease(running.id, 'spark-a', 1)],
        config({ budgets: { maxPrs: 1, maxGpusPerPr: 4, maxGpus: 8 } }),
      ),
    );
    expect(plan.grants.map((g) => g.reservationId)).toEqual([sameAsRunning.id]);
  });
});

describe('rule 7: expiry never silently frees a host', () => {
  it('expired lease with processes present → release-required', () => {
    const r = req({ status: 'running' });
    const busy = host('spark-2', {
      phase: 'allocated',
      facts: facts({ gpuProcesses: [{ pid: 5, name: 'python', usedMemoryMiB: 10 }] }),
    });
    const plan = planAdmission(input([busy], [r], [lease(r.id, 'spark-2', 1, { expiresAt: NOW - 1 })]));
    expect(plan.expiries).toEqual([
      expect.objectContaining({ reservationId: r.id, outcome: 'release-required' }),
    ]);
    expect(plan.grants).toEqual([]);
  });

  it('expired lease on an offline host → release-required (processes unknown)', () => {
    const r = req({ status: 'running' });
    const off = host('spark-2', { phase: 'allocated', lastHeartbeatAt: NOW - 3600_000 });
    const plan = planAdmission(input([off], [r], [lease(r.id, 'spark-2', 1, { expiresAt: NOW - 1 })]));
    expect(plan.expiries[0]!.outcome).toBe('release-required');
  });

  it('expired lease with a clean GPU → release (the agent still confirms)', () => {
    const r = req({ status: 'running' });
    const plan = planAdmission(
      input(
        [host('spark-2', { phase: 'allocated' })],
        [r],
        [lease(r.id, 'spark-2', 1, { expiresAt: NOW - 1 })],
      ),
    );
    expect(plan.expiries[0]!.outcome).toBe('release');
    // still bound until the agent confirms: nothing else granted on it in this pass
    expect(plan.grants).toEqual([]);
  });

  it('a queued request past its deadline times out with a reason', () => {
    const old = req({ queueDeadline: NOW - 1 });
    const plan = planAdmission(input([], [old]));
    expect(plan.queueTimeouts).toEqual([old.id]);
  });
});

describe('why it waits', () => {
  it('every queued request gets a position and a reason', () => {
    const running = req({ status: 'running' });
    const queued = [req(), req({ kind: 'benchmark' }), req({ kind: 'merge' })];
    const plan = planAdmission(
      input([host('spark-2')], [running, ...queued], [lease(running.id, 'spark-2', 1)]),
    );
    expect(plan.waits.map((w) => w.position)).toEqual([1, 2, 3]);
    // the head of the queue is next in line for spark-2; everyone sees it
    for (const w of plan.waits) expect(w.reason).toMatch(/spark-2 draining for r-2/);
    expect(plan.draining).toEqual([{ hostId: 'spark-2', reservationId: 'r-2' }]);
  });
});
