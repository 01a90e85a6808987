import { beforeEach, describe, expect, it } from 'vitest';
import { planAdmission } from '../../core/admission.ts';
import { facts, host, input, lease, NOW, req, resetSeq } from './admission-fixtures.ts';

/**
 * Development work and the hosts that serve it (ADR 0176), beyond the basic cases of
 * `admission-development-hosts.test.ts`: which requests the backend matters for (not CI, not a
 * restore drill), how a named host without facts waits, and how an untargeted request counts,
 * holds and drains only the hosts running the dstack executor.
 */

beforeEach(resetSeq);

const jit = (id: string, over = {}) => host(id, { facts: facts({ executor: 'jit-runner' }), ...over });
const dev = (over = {}) => req({ kind: 'development', repo: null, pr: null, suite: null, ...over });

describe('a named host', () => {
  it('a restore drill takes any backend: nobody attaches to it', () => {
    const r = dev({ drill: true, targetHost: 'spark-2' });
    const plan = planAdmission(input([jit('spark-2')], [r]));
    expect(plan.grants).toEqual([{ reservationId: r.id, hostIds: ['spark-2'], lend: [], gpus: 1 }]);
  });

  it('other work naming a jit-runner host is granted it', () => {
    const r = req({ targetHost: 'spark-2' });
    const plan = planAdmission(input([jit('spark-2')], [r]));
    expect(plan.grants).toEqual([{ reservationId: r.id, hostIds: ['spark-2'], lend: [], gpus: 1 }]);
  });

  it('a host that never reported waits as out (GPU state unknown), not as the wrong backend', () => {
    const r = dev({ targetHost: 'spark-2' });
    const plan = planAdmission(input([host('spark-2', { facts: null })], [r]));
    expect(plan.waits).toEqual([
      {
        reservationId: r.id,
        position: 1,
        code: 'target-unavailable',
        reason: 'waiting for spark-2 GPU state unknown (no report)',
      },
    ]);
  });
});

describe('any host of the pool', () => {
  it('counts only dstack hosts that are not out: an offline one does not', () => {
    const r = dev();
    const plan = planAdmission(
      input([jit('spark-2'), host('spark-3', { lastHeartbeatAt: NOW - 3600_000 })], [r]),
    );
    expect(plan.grants).toEqual([]);
    expect(plan.waits).toEqual([
      {
        reservationId: r.id,
        position: 1,
        code: 'pool-too-small',
        reason: 'needs 1 host in pool spark running the dstack executor (development); 0 schedulable now',
      },
    ]);
  });

  it('a pool with no hosts at all is too small', () => {
    const r = dev({ pool: 'gb300' });
    const plan = planAdmission(input([host('spark-2')], [r]));
    expect(plan.waits).toEqual([
      {
        reservationId: r.id,
        position: 1,
        code: 'pool-too-small',
        reason: 'needs 1 host in pool gb300 running the dstack executor (development); 0 schedulable now',
      },
    ]);
  });

  it('a pair takes two free dstack hosts, never the jit-runner one', () => {
    const r = dev({ topology: 'pair' });
    const plan = planAdmission(input([jit('spark-4'), host('spark-2'), host('spark-3')], [r]));
    expect(plan.grants).toEqual([
      { reservationId: r.id, hostIds: ['spark-2', 'spark-3'], lend: [], gpus: 2 },
    ]);
    expect(plan.holds).toEqual([]);
  });

  it('a pair short of one holds the free dstack host and drains a busy one', () => {
    const running = req({ status: 'running' });
    const r = dev({ topology: 'pair' });
    const plan = planAdmission(
      input(
        [host('spark-2'), host('spark-3', { phase: 'allocated' }), jit('spark-4')],
        [running, r],
        [lease(running.id, 'spark-3', 4)],
      ),
    );
    expect(plan.grants).toEqual([]);
    expect(plan.holds).toEqual([{ hostId: 'spark-2', reservationId: r.id }]);
    expect(plan.draining).toEqual([{ hostId: 'spark-3', reservationId: r.id }]);
    expect(plan.waits).toEqual([
      {
        reservationId: r.id,
        position: 1,
        code: 'held-for-pair',
        reason: 'holding spark-2; waiting for a second host in pool spark running the dstack executor',
      },
    ]);
    expect(plan.hostStates).toEqual({ 'spark-2': 'held', 'spark-3': 'draining', 'spark-4': 'idle' });
  });

  it('each waiting request drains one busy dstack host of its own, never a jit-runner one', () => {
    const running = [req({ status: 'running' }), req({ status: 'running' }), req({ status: 'running' })];
    const d = [dev(), dev(), dev()];
    const plan = planAdmission(
      input(
        [
          host('spark-2', { phase: 'allocated' }),
          host('spark-3', { phase: 'allocated' }),
          jit('spark-4', { phase: 'allocated' }),
        ],
        [...running, ...d],
        [
          lease(running[0]!.id, 'spark-2', 4),
          lease(running[1]!.id, 'spark-3', 5),
          lease(running[2]!.id, 'spark-4', 6),
        ],
      ),
    );
    expect(plan.grants).toEqual([]);
    expect(plan.draining).toEqual([
      { hostId: 'spark-2', reservationId: d[0]!.id },
      { hostId: 'spark-3', reservationId: d[1]!.id },
    ]);
    expect(plan.waits.map((w) => [w.reservationId, w.code, w.reason])).toEqual([
      [
        d[0]!.id,
        'hosts-busy',
        `waiting for a host in pool spark running the dstack executor: spark-2 draining for ${d[0]!.id}; spark-3 allocated to ${running[1]!.id}; spark-4 allocated to ${running[2]!.id}`,
      ],
      [
        d[1]!.id,
        'hosts-busy',
        `waiting for a host in pool spark running the dstack executor: spark-2 draining for ${d[0]!.id}; spark-3 draining for ${d[1]!.id}; spark-4 allocated to ${running[2]!.id}`,
      ],
      [
        d[2]!.id,
        'hosts-busy',
        `waiting for a host in pool spark running the dstack executor: spark-2 draining for ${d[0]!.id}; spark-3 draining for ${d[1]!.id}; spark-4 allocated to ${running[2]!.id}`,
      ],
    ]);
    expect(plan.hostStates['spark-4']).toBe('allocated');
  });
});
