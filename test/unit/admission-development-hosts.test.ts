import { beforeEach, describe, expect, it } from 'vitest';
import { planAdmission } from '../../core/admission.ts';
import { servesDevelopment } from '../../core/model.ts';
import { config, facts, host, input, lease, req, resetSeq } from './admission-fixtures.ts';

/**
 * Development leases go only where they can be used (ADR 0176): a host whose agent runs the dstack
 * executor gives the lease its dev environment; a host of another backend, or one whose agent never
 * said, is never granted one — in a mixed pool a request for any host waits for (and drains) a
 * dstack host while other work takes the rest.
 */

beforeEach(resetSeq);

const jit = (id: string, over = {}) => host(id, { facts: facts({ executor: 'jit-runner' }), ...over });
const dev = (over = {}) => req({ kind: 'development', repo: null, pr: null, suite: null, ...over });

describe('development leases and the hosts that serve them', () => {
  it('only a host whose agent says dstack serves development', () => {
    expect(servesDevelopment({ facts: facts({ executor: 'dstack' }) })).toBe(true);
    expect(servesDevelopment({ facts: facts({ executor: 'jit-runner' }) })).toBe(false);
    expect(servesDevelopment({ facts: facts({ executor: 'slurm' }) })).toBe(false);
    // never heard from, or an agent too old to say
    expect(servesDevelopment({ facts: null })).toBe(false);
    expect(servesDevelopment({ facts: facts({ executor: undefined }) })).toBe(false);
  });

  it('a request for any host takes the free dstack host, whatever the preferred order says', () => {
    const r = dev();
    const plan = planAdmission(
      input([jit('spark-2'), host('spark-3')], [r], [], config({ preferHosts: ['spark-2'] })),
    );
    expect(plan.grants).toEqual([{ reservationId: r.id, hostIds: ['spark-3'], lend: [], gpus: 1 }]);
  });

  it('with the dstack host busy it waits for it and drains it, while CI takes the free jit-runner host', () => {
    const running = req({ status: 'running' });
    const r = dev();
    const ci = req();
    const plan = planAdmission(
      input(
        [jit('spark-2'), host('spark-3', { phase: 'allocated' })],
        [running, r, ci],
        [lease(running.id, 'spark-3', 4)],
      ),
    );
    expect(plan.grants.map((g) => [g.reservationId, g.hostIds])).toEqual([[ci.id, ['spark-2']]]);
    expect(plan.waits).toEqual([
      {
        reservationId: r.id,
        position: 1,
        code: 'hosts-busy',
        reason: `waiting for a host in pool spark running the dstack executor: spark-2 free; spark-3 draining for ${r.id}`,
      },
    ]);
    expect(plan.draining).toEqual([{ hostId: 'spark-3', reservationId: r.id }]);
  });

  it('a pair needs two dstack hosts; with one it says so and holds nothing', () => {
    const r = dev({ topology: 'pair' });
    const plan = planAdmission(input([jit('spark-2'), host('spark-3')], [r]));
    expect(plan.grants).toEqual([]);
    expect(plan.holds).toEqual([]);
    expect(plan.waits[0]).toMatchObject({
      code: 'pool-too-small',
      reason: 'needs 2 hosts in pool spark running the dstack executor (development); 1 schedulable now',
    });
  });

  it('a request naming a host whose backend changed since waits, naming why', () => {
    const named = dev({ targetHost: 'spark-2' });
    const old = dev({ targetHost: 'spark-4' });
    const plan = planAdmission(
      input([jit('spark-2'), host('spark-4', { facts: facts({ executor: undefined }) })], [named, old]),
    );
    expect(plan.grants).toEqual([]);
    expect(plan.waits.map((w) => [w.code, w.reason])).toEqual([
      ['target-unavailable', 'spark-2 runs jit-runner: a development lease needs the dstack executor'],
      [
        'target-unavailable',
        "spark-4's agent does not say which executor it runs (it predates ADR 0176): a development lease needs the dstack executor",
      ],
    ]);
  });

  it('CI is indifferent to the backend: it runs on any host', () => {
    const ci = req();
    const plan = planAdmission(input([jit('spark-2')], [ci]));
    expect(plan.grants.map((g) => g.reservationId)).toEqual([ci.id]);
  });
});
