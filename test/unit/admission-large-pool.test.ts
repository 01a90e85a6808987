import { beforeEach, describe, expect, it } from 'vitest';
import { planAdmission } from '../../core/admission.ts';
import type { HostRecord } from '../../core/model.ts';
import { config, facts, host, input, lease, NOW, req, resetSeq } from './admission-fixtures.ts';

/**
 * Fleets of ten and more hosts (the model test generates at most four per pool): host order is
 * natural (`spark-2` before `spark-10`) wherever a choice is made, whatever order the ledger lists
 * hosts in, and a long queue behind a large busy pool drains each busy host for one request.
 */

beforeEach(resetSeq);

const ids = (n: number) => Array.from({ length: n }, (_, i) => `spark-${i + 1}`);
/** Budgets that never bind here: these tests are about host choice. */
const roomy = (preferHosts: string[]) =>
  config({ preferHosts, budgets: { maxPrs: 100, maxGpusPerPr: 100, maxGpus: 100 } });
/** The ledger's order is not the host order: reversed, so every tie-break on the id shows. */
const listed = <T>(xs: T[]) => [...xs].reverse();

describe('large pools', () => {
  it('grants free hosts in natural id order after preferHosts, service hosts last', () => {
    const hosts = listed(ids(12).map((id) => host(id)));
    const rs = ids(12).map(() => req());
    const plan = planAdmission(input(hosts, rs, [], roomy(['spark-11'])));
    expect(plan.grants.map((g) => g.hostIds.join())).toEqual([
      'spark-11',
      'spark-2',
      'spark-3',
      'spark-4',
      'spark-5',
      'spark-6',
      'spark-7',
      'spark-8',
      'spark-9',
      'spark-10',
      'spark-12',
      'spark-1',
    ]);
    // only the service host is lent
    expect(plan.grants.map((g) => g.lend.join()).filter(Boolean)).toEqual(['spark-1']);
  });

  it('a long queue claims each busy host once, in drain order, and counts the pool in its reason', () => {
    const running = ids(12).map(() => req({ status: 'running' }));
    const hosts = listed(ids(12).map((id) => host(id, { phase: 'allocated' })));
    const leases = ids(12).map((id, i) => lease(running[i]!.id, id, i + 1));
    const queue = [req({ topology: 'pair' }), ...ids(12).map(() => req())];
    const plan = planAdmission(input(hosts, [...running, ...queue], leases, roomy(['spark-12', 'spark-3'])));
    // home-service host (spark-1) last, then preferHosts in their order, then natural order
    const order = ['spark-12', 'spark-3', 'spark-2', ...ids(11).slice(3), 'spark-1'];
    expect(order).toHaveLength(12);
    const claimedBy = queue.flatMap((r) => (r.topology === 'pair' ? [r.id, r.id] : [r.id])).slice(0, 12);
    expect(plan.draining).toEqual(order.map((hostId, i) => ({ hostId, reservationId: claimedBy[i] })));
    const reason = 'waiting for a host in pool spark: 12 busy, 0 held, 0 unavailable of 12 hosts';
    expect(plan.waits.map((w) => [w.reservationId, w.position, w.code, w.reason])).toEqual(
      queue.map((r, i) => [r.id, i + 1, 'hosts-busy', reason]),
    );
    expect(Object.values(plan.hostStates)).toEqual(Array(12).fill('draining'));
  });

  it('drains the best busy host not yet claimed after grants made earlier hosts busy', () => {
    // 11 busy, spark-7 and spark-10 free: two grants, then the queue claims in drain order
    const running = ids(12).map(() => req({ status: 'running' }));
    const free = new Set(['spark-7', 'spark-10']);
    const hosts: HostRecord[] = listed(
      ids(12).map((id) =>
        host(id, free.has(id) ? { homeService: null, phase: 'idle' } : { phase: 'allocated' }),
      ),
    );
    const leases = ids(12)
      .map((id, i) => (free.has(id) ? null : lease(running[i]!.id, id, i + 1)))
      .filter((l) => l !== null);
    const queue = ids(14).map(() => req());
    const plan = planAdmission(input(hosts, [...running, ...queue], leases, roomy([])));
    expect(plan.grants.map((g) => [g.reservationId, g.hostIds.join()])).toEqual([
      [queue[0]!.id, 'spark-7'],
      [queue[1]!.id, 'spark-10'],
    ]);
    // hosts granted in this pass drain too, in the same order as the others
    expect(plan.draining.map((d) => d.hostId)).toEqual([...ids(12).slice(1), 'spark-1']);
    expect(plan.draining.map((d) => d.reservationId)).toEqual(queue.slice(2).map((r) => r.id));
    expect(plan.hostStates['spark-7']).toBe('draining');
  });

  it('a pair that lost both nodes names them in natural order', () => {
    const pair = req({ topology: 'pair', status: 'running' });
    const hosts = listed(
      ids(10).map((id) => host(id, { phase: 'allocated', lastHeartbeatAt: NOW - 600_000 })),
    );
    const plan = planAdmission(
      input(hosts, [pair], [lease(pair.id, 'spark-10', 1), lease(pair.id, 'spark-9', 2)]),
    );
    expect(plan.pairLosses).toEqual([
      { reservationId: pair.id, lostHosts: ['spark-9', 'spark-10'], healthyHosts: [] },
    ]);
  });

  it('lists a four-host pool host by host, and each new claim shows in the next reason', () => {
    const running = ids(4).map(() => req({ status: 'running' }));
    const hosts = ids(4).map((id) => host(id, { phase: 'allocated', homeService: null }));
    const leases = ids(4).map((id, i) => lease(running[i]!.id, id, i + 1));
    const [a, b] = [req(), req()];
    const plan = planAdmission(input(hosts, [...running, a, b], leases, roomy([])));
    const busy = (i: number) => `spark-${i} allocated to ${running[i - 1]!.id}`;
    expect(plan.waits.map((w) => w.reason)).toEqual([
      `waiting for a host in pool spark: spark-1 draining for ${a.id}; ${busy(2)}; ${busy(3)}; ${busy(4)}`,
      `waiting for a host in pool spark: spark-1 draining for ${a.id}; spark-2 draining for ${b.id}; ${busy(3)}; ${busy(4)}`,
    ]);
  });

  it('keeps the first position of a host named twice in preferHosts', () => {
    const hosts = listed(ids(4).map((id) => host(id, { homeService: null, phase: 'idle', facts: facts() })));
    const rs = ids(4).map(() => req());
    const plan = planAdmission(input(hosts, rs, [], roomy(['spark-3', 'spark-4', 'spark-2', 'spark-3'])));
    expect(plan.grants.map((g) => g.hostIds.join())).toEqual(['spark-3', 'spark-4', 'spark-2', 'spark-1']);
  });
});
