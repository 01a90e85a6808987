import { afterEach, describe, expect, it } from 'vitest';
import { ApiError } from '../../functions/errors.ts';
import { applyReport } from '../../functions/ledger/agent-reports.ts';
import { computeDesiredState } from '../../functions/ledger/desired-state.ts';
import { adoptAll, idleFacts, makeTestLedger, type TestLedger, testClock } from '../../scripts/sim/ledger.ts';

/**
 * A home service that stops by itself outside any lease (ADR 0175), through the real ledger: the
 * agent's `service_down` report puts the host on the restore path at once, the restore policy
 * (bounded retries, then quarantine with the reason) decides the rest, and work that needs the
 * host is not admitted meanwhile. A report that does not fit changes nothing.
 */

const HOSTS = [{ id: 'spark-1', homeService: 'deckard' }, { id: 'spark-2' }];
const REASON = 'deckard is not running: nothing answers its model-ready health check (connection refused)';

let tl: TestLedger | null = null;
afterEach(() => {
  tl?.close();
  tl = null;
});

async function serving(restoreRetries = 1) {
  const clock = testClock();
  tl = await makeTestLedger({ config: { hosts: HOSTS, timings: { restoreRetries } }, clock });
  const { ledger } = tl;
  await adoptAll(ledger);
  expect((await ledger.getHost(undefined, 'spark-1'))!.phase).toBe('service');
  return { ledger, clock };
}

async function snapshot(ledger: TestLedger['ledger']) {
  return {
    host: await ledger.getHost(undefined, 'spark-1'),
    events: (await ledger.history('host', 'spark-1')).length,
  };
}

describe('service_down report', () => {
  it('puts a serving host on the restore path at once, recorded once, and the restore policy quarantines it with the reason', async () => {
    const { ledger, clock } = await serving(1);
    const token = (await ledger.getHost(undefined, 'spark-1'))!.fencingToken;
    expect(
      await applyReport(ledger, 'spark-1', { type: 'service_down', fencingToken: token, reason: REASON }),
    ).toBe('spark-1 restoring deckard');
    const host = (await ledger.getHost(undefined, 'spark-1'))!;
    expect(host).toMatchObject({ phase: 'restoring', restoreAttempts: 0, restoreNotBefore: null });
    expect(host.note).toBe(`deckard stopped outside any lease: ${REASON}`);
    const d = await computeDesiredState(ledger, ledger.db, 'spark-1', clock());
    expect(d.desired).toEqual({
      state: 'restore',
      fencingToken: token,
      attempt: 0,
      waitMs: 0,
      healthTimeoutS: ledger.config.timings.restoreHealthTimeoutS,
    });
    // the agent's repeat (its report crossed the answer) changes nothing and records nothing
    const before = await snapshot(ledger);
    expect(
      await applyReport(ledger, 'spark-1', { type: 'service_down', fencingToken: token, reason: REASON }),
    ).toBe('spark-1 is restoring: nothing to do');
    expect(await snapshot(ledger)).toEqual(before);
    const history = await ledger.history('host', 'spark-1');
    const down = history.filter((e) => e.type === 'alert.service_down');
    expect(down).toHaveLength(1);
    expect(down[0]!.cause).toBe(
      `deckard on spark-1 stopped outside any lease (${REASON}); restarting it under the restore policy`,
    );
    expect(history.at(-2)).toMatchObject({ type: 'host.phase', fromState: 'service', toState: 'restoring' });

    // work that needs spark-1 waits while it restores; work that fits spark-2 still goes there
    const targeted = await ledger.createReservation(
      {
        kind: 'manual',
        topology: 'single',
        targetHost: 'spark-1',
        repo: 'acme/butter',
        pr: 1,
        headSha: 'a'.repeat(40),
        requester: 'm',
      },
      'test',
    );
    const pair = await ledger.createReservation(
      {
        kind: 'manual',
        topology: 'pair',
        repo: 'acme/butter',
        pr: 2,
        headSha: 'b'.repeat(40),
        requester: 'm',
      },
      'test',
    );
    await ledger.admissionPass();
    expect((await ledger.getReservation(undefined, targeted.id))!.status).toBe('queued');
    expect((await ledger.getReservation(undefined, pair.id))!.status).toBe('queued');

    // the restore policy: one retry with backoff, then quarantined with the reason
    await applyReport(ledger, 'spark-1', {
      type: 'restored',
      fencingToken: token,
      ok: false,
      detail: 'deckard model-ready check did not pass within 600 s: HTTP 503 model load failed',
    });
    expect((await ledger.getHost(undefined, 'spark-1'))!.phase).toBe('restoring');
    await applyReport(ledger, 'spark-1', {
      type: 'restored',
      fencingToken: token,
      ok: false,
      detail: 'deckard model-ready check did not pass within 600 s: HTTP 503 model load failed',
    });
    const q = (await ledger.getHost(undefined, 'spark-1'))!;
    expect(q.phase).toBe('quarantined');
    expect(q.note).toBe(
      'deckard restore failed 2 times: deckard model-ready check did not pass within 600 s: HTTP 503 model load failed',
    );
    const types = (await ledger.history('host', 'spark-1')).map((e) => e.type);
    expect(types.filter((t) => t === 'alert.service_down')).toHaveLength(1);
    expect(types.filter((t) => t === 'alert.restore_failed')).toHaveLength(1);
    // a down report while quarantined changes nothing
    expect(
      await applyReport(ledger, 'spark-1', { type: 'service_down', fencingToken: token, reason: REASON }),
    ).toBe('spark-1 is quarantined: nothing to do');

    clock.advance(60_000);
    await ledger.recordHeartbeat('spark-1', idleFacts({ serviceState: 'failed' }));
    await ledger.recordHeartbeat('spark-2', idleFacts());
    const pass = await ledger.admissionPass();
    expect(pass.granted).toEqual([]);
    const t = (await ledger.getReservation(undefined, targeted.id))!;
    expect(t).toMatchObject({ status: 'queued', waitCode: 'target-unavailable' });
    expect(t.reason).toBe('waiting for spark-1 quarantined until an operator clears it');
    const p = (await ledger.getReservation(undefined, pair.id))!;
    expect(p).toMatchObject({ status: 'queued', waitCode: 'pool-too-small' });
  });

  it('a restore that passes puts the host back in service and clears the note', async () => {
    const { ledger } = await serving(3);
    const token = (await ledger.getHost(undefined, 'spark-1'))!.fencingToken;
    await applyReport(ledger, 'spark-1', { type: 'service_down', fencingToken: token, reason: REASON });
    expect(
      await applyReport(ledger, 'spark-1', {
        type: 'restored',
        fencingToken: token,
        ok: true,
        detail: 'HTTP 200',
      }),
    ).toBe('spark-1 service');
    expect(await ledger.getHost(undefined, 'spark-1')).toMatchObject({
      phase: 'service',
      restoreAttempts: 0,
      note: null,
    });
  });

  it('an idle host (its heartbeat saw the service stop first) is restored the same way', async () => {
    const { ledger } = await serving(3);
    await ledger.recordHeartbeat('spark-1', idleFacts({ serviceState: 'stopped' }));
    expect((await ledger.getHost(undefined, 'spark-1'))!.phase).toBe('idle');
    const token = (await ledger.getHost(undefined, 'spark-1'))!.fencingToken;
    expect(
      await applyReport(ledger, 'spark-1', { type: 'service_down', fencingToken: token, reason: REASON }),
    ).toBe('spark-1 restoring deckard');
  });

  it('changes nothing for a report that does not fit: stale token, a lease binds the host, no home service, not adopted', async () => {
    const { ledger } = await serving(3);
    const token = (await ledger.getHost(undefined, 'spark-1'))!.fencingToken;
    const refused = async (hostId: string, fencingToken: number) => {
      const before = await snapshot(ledger);
      const e = await applyReport(ledger, hostId, {
        type: 'service_down',
        fencingToken,
        reason: REASON,
      }).catch((x: unknown) => x);
      expect(await snapshot(ledger)).toEqual(before);
      expect(e).toBeInstanceOf(ApiError);
      return e as ApiError;
    };
    expect((await refused('spark-1', token + 1)).code).toBe('stale_fencing_token');
    expect((await refused('spark-2', 0)).code).toBe('no_home_service');
    expect((await refused('spark-9', 0)).code).toBe('unknown_host');

    // a lease lent spark-1: its service is the lease's, never restarted under it
    const r = await ledger.createReservation(
      {
        kind: 'manual',
        topology: 'pair',
        repo: 'acme/butter',
        pr: 3,
        headSha: 'c'.repeat(40),
        requester: 'm',
      },
      'test',
    );
    expect((await ledger.admissionPass()).granted.map((g) => g.reservationId)).toEqual([r.id]);
    const leased = (await ledger.getHost(undefined, 'spark-1'))!.fencingToken;
    const bound = await refused('spark-1', leased);
    expect(bound).toMatchObject({ status: 409, code: 'lease_bound' });
    expect(bound.message).toMatch(
      /^spark-1 is bound to lease l-spark-1-\d+: its deckard is the lease's until the release restores it$/,
    );
  });

  it('an unadopted host (an operator took it out) is left alone', async () => {
    const { ledger } = await serving(3);
    await ledger.setManaged('spark-1', false, 'operator');
    const before = await snapshot(ledger);
    const token = (await ledger.getHost(undefined, 'spark-1'))!.fencingToken;
    expect(
      await applyReport(ledger, 'spark-1', { type: 'service_down', fencingToken: token, reason: REASON }),
    ).toBe('spark-1 is not adopted: deckard left alone');
    expect(await snapshot(ledger)).toEqual(before);
  });
});
