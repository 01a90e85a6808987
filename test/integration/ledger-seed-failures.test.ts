import { afterEach, describe, expect, it } from 'vitest';
import { renderCheckRun } from '../../functions/github/check-run.ts';
import { computeDesiredState } from '../../functions/ledger/desired-state.ts';
import { requestServiceStart } from '../../functions/ledger/reservations.ts';
import {
  adoptAll,
  idleFacts,
  makeTestLedger,
  servingFacts,
  type TestLedger,
  testClock,
} from '../../scripts/sim/ledger.ts';

/**
 * through the real ledger (a libSQL file): the admission pass applies the
 * plan, the agent's desired state follows, and the reservation ends the way the seed says.
 */

const PAIR_CONFIG = {
  hosts: [{ id: 'spark-1', homeService: 'deckard' }, { id: 'spark-2' }],
} as const;

let tl: TestLedger | null = null;
afterEach(() => {
  tl?.close();
  tl = null;
});

describe('item 1: a pair node goes dark', () => {
  it('fails the pair as a unit within the offline threshold plus one pass; the dark node needs release until its agent confirms', async () => {
    const clock = testClock();
    tl = await makeTestLedger({ config: { hosts: [...PAIR_CONFIG.hosts] }, clock });
    const { ledger } = tl;
    await adoptAll(ledger);
    const r = await ledger.createReservation(
      {
        kind: 'manual',
        topology: 'pair',
        repo: 'acme/butter',
        pr: 4,
        headSha: 'a'.repeat(40),
        requester: 'm',
      },
      'test',
    );
    const granted = await ledger.admissionPass();
    expect(granted.granted.map((g) => g.reservationId)).toEqual([r.id]);
    await ledger.advanceReservation(r.id, 'preparing', 'prepared', 'test');
    await ledger.advanceReservation(r.id, 'running', 'job started', 'test');

    // spark-2 keeps heartbeating; spark-1 goes dark
    const offlineAfterMs = ledger.config.timings.offlineAfterS * 1000;
    clock.advance(offlineAfterMs / 2);
    await ledger.recordHeartbeat('spark-2', idleFacts({ runnerState: 'running' }));
    await ledger.admissionPass();
    expect((await ledger.getReservation(undefined, r.id))!.status).toBe('running');
    clock.advance(offlineAfterMs / 2 + 1000);
    await ledger.recordHeartbeat('spark-2', idleFacts({ runnerState: 'running' }));
    await ledger.admissionPass();

    const failed = (await ledger.getReservation(undefined, r.id))!;
    expect(failed.status).toBe('releasing');
    expect(failed.outcome).toBe('pair_node_lost');
    expect(failed.reason).toBe('spark-1 lost contact during a pair run — pair failed as a unit');
    const check = renderCheckRun(failed, { hosts: ['spark-1', 'spark-2'], keptHost: null });
    expect(check).toMatchObject({
      status: 'completed',
      conclusion: 'failure',
      title: 'Spark 1 lost contact during a pair run — pair failed as a unit',
    });
    expect((await ledger.getHost(undefined, 'spark-1'))!.phase).toBe('release-required');
    expect((await ledger.getHost(undefined, 'spark-2'))!.phase).toBe('cleaning');
    // the healthy node is told to stop its runner (clean keeps the evidence it reported)
    const healthy = await computeDesiredState(ledger, ledger.db, 'spark-2', clock());
    expect(healthy.desired.state).toBe('clean');
    const leases = await ledger.leasesOf(undefined, r.id);
    const tokenOf = (h: string) => leases.find((l) => l.hostId === h)!.fencingToken;
    await ledger.confirmReleased('spark-2', tokenOf('spark-2'), 'agent:spark-2');
    expect((await ledger.getReservation(undefined, r.id))!.status).toBe('releasing');
    // nothing is granted on the dark node while it needs release
    await ledger.createReservation(
      {
        kind: 'manual',
        topology: 'single',
        repo: 'acme/butter',
        pr: 5,
        headSha: 'b'.repeat(40),
        requester: 'm',
      },
      'test',
    );
    await ledger.recordHeartbeat('spark-2', idleFacts());
    const pass = await ledger.admissionPass();
    expect(pass.granted.flatMap((g) => g.leases.map((l) => l.hostId))).not.toContain('spark-1');
    expect(pass.plan.hostStates['spark-1']).toBe('offline');

    // the dark agent returns: it is asked to clean (stop what it started), confirms, host freed
    await ledger.recordHeartbeat('spark-1', idleFacts({ runnerState: 'exited' }));
    const back = await computeDesiredState(ledger, ledger.db, 'spark-1', clock());
    expect(back.desired.state).toBe('clean');
    await ledger.confirmReleased('spark-1', tokenOf('spark-1'), 'agent:spark-1');
    const ended = (await ledger.getReservation(undefined, r.id))!;
    expect(ended.status).toBe('failed');
    expect(ended.outcome).toBe('pair_node_lost');
    // the final check run still names the node that lost contact
    expect(ended.reason).toBe('spark-1 lost contact during a pair run — pair failed as a unit');
    expect(renderCheckRun(ended, { hosts: ['spark-1', 'spark-2'], keptHost: null }).title).toBe(
      'Spark 1 lost contact during a pair run — pair failed as a unit',
    );
    expect((await ledger.getHost(undefined, 'spark-1'))!.phase).toBe('restoring');
    const events = await ledger.history('reservation', r.id);
    expect(events.map((e) => e.type)).toContain('alert.pair_node_lost');
  });
});

describe('item 2: an explicit Deckard start', () => {
  async function idleSpark1(restoreRetries: number) {
    const clock = testClock();
    tl = await makeTestLedger({
      config: { hosts: [...PAIR_CONFIG.hosts], timings: { restoreRetries } },
      clock,
    });
    const { ledger } = tl;
    await adoptAll(ledger);
    // Deckard stopped by hand: spark-1 reports it, and the ledger makes the host idle
    await ledger.recordHeartbeat('spark-1', idleFacts({ serviceState: 'stopped' }));
    expect((await ledger.getHost(undefined, 'spark-1'))!.phase).toBe('idle');
    return { ledger, clock };
  }

  it('drives the restore at once (no lease) and ends done when the model-ready gate passes', async () => {
    const { ledger, clock } = await idleSpark1(3);
    const start = await requestServiceStart(ledger, 'spark-1', 'operator:alice', {});
    const pass = await ledger.admissionPass();
    expect(pass.granted).toEqual([]);
    expect((await ledger.leasesOf(undefined, start.id)).length).toBe(0);
    expect((await ledger.getHost(undefined, 'spark-1'))!.phase).toBe('restoring');
    const d = await computeDesiredState(ledger, ledger.db, 'spark-1', clock());
    expect(d.desired).toMatchObject({ state: 'restore', attempt: 0, waitMs: 0 });
    const waiting = (await ledger.getReservation(undefined, start.id))!;
    expect(waiting).toMatchObject({ status: 'queued', waitCode: 'restoring' });

    await ledger.recordRestore('spark-1', true, 'model-ready', 'agent:spark-1');
    await ledger.recordHeartbeat('spark-1', servingFacts());
    await ledger.admissionPass();
    const done = (await ledger.getReservation(undefined, start.id))!;
    expect(done).toMatchObject({ status: 'done', outcome: 'restored' });
  });

  it('a restore that keeps failing quarantines spark-1 and ends the start failed with the reason', async () => {
    const { ledger } = await idleSpark1(1);
    const start = await requestServiceStart(ledger, 'spark-1', 'operator:alice', {});
    await ledger.admissionPass();
    await ledger.recordRestore('spark-1', false, 'health check timed out', 'agent:spark-1');
    expect((await ledger.getHost(undefined, 'spark-1'))!.phase).toBe('restoring');
    await ledger.recordRestore('spark-1', false, 'health check timed out', 'agent:spark-1');
    expect((await ledger.getHost(undefined, 'spark-1'))!.phase).toBe('quarantined');
    const failed = (await ledger.getReservation(undefined, start.id))!;
    expect(failed).toMatchObject({ status: 'failed', outcome: 'restore_failed' });
    expect(failed.reason).toBe(
      'deckard restore failed 2 times; spark-1 quarantined until an operator clears it',
    );
  });
});
