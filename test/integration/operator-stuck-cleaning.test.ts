import { afterEach, describe, expect, it } from 'vitest';
import { applyReport } from '../../functions/ledger/agent-reports.ts';
import { agentPrepared, bringOnline, startApiController, until } from './cli-harness.ts';

/**
 * A host stuck in `cleaning` (ADR 0156), through the operator API and the agent API's report:
 * recovery answers an error that says why and changes nothing; the emergency terminate ends the
 * work and quarantines the host; the agent's `cleanup_failed` does the same on its own with an
 * alert; stale or early reports change nothing.
 */

type Ctl = Awaited<ReturnType<typeof startApiController>>;
let ctl: Ctl | null = null;
afterEach(async () => {
  await ctl?.c.close();
  ctl = null;
});

/** A development lease on spark-2, prepared, then released by its owner: the host is cleaning. */
async function releasing(c: Ctl) {
  const { call, tokens } = c;
  await bringOnline(c.c.ledger, ['spark-2']);
  const id = (await call(tokens.dev, 'POST', '/api/v1/reservations', { host: 'spark-2', ttlS: 600 })).body
    .reservation.id as string;
  await until('grant', async () => (await c.c.ledger.getReservation(undefined, id))?.status === 'allocated');
  await agentPrepared(c.c.ledger, id);
  expect((await call(tokens.dev, 'POST', `/api/v1/reservations/${id}/release`)).status).toBe(200);
  expect((await c.c.ledger.getHost(undefined, 'spark-2'))?.phase).toBe('cleaning');
  const [lease] = await c.c.ledger.leasesOf(undefined, id);
  return { id, lease: lease! };
}

const historyLength = async (c: Ctl, id: string) => (await c.c.ledger.history('reservation', id)).length;

describe('operator recover and terminate on a host stuck cleaning (ADR 0156)', () => {
  it('recover answers 409 with why and changes nothing; terminate ends the work and quarantines the host', async () => {
    ctl = await startApiController();
    const c = ctl;
    const { id, lease } = await releasing(c);
    const before = await historyLength(c, id);

    const rec = await c.call(c.tokens.ops, 'POST', `/api/v1/reservations/${id}/recover`);
    expect(rec.status).toBe(409);
    expect(rec.body.error.code).toBe('awaiting_agent');
    expect(rec.body.error.message).toMatch(/spark-2 is cleaning: its agent is cleaning up/);
    expect(rec.body.error.message).toContain(`sparkctl emergency terminate ${id}`);
    expect(await historyLength(c, id)).toBe(before);
    expect((await c.c.ledger.getReservation(undefined, id))?.status).toBe('releasing');

    // an operate token cannot force it; the emergency scope can
    expect(
      (await c.call(c.tokens.ops, 'POST', `/api/v1/reservations/${id}/terminate`, { reason: 'stuck' }))
        .status,
    ).toBe(403);
    const term = await c.call(c.tokens.em, 'POST', `/api/v1/reservations/${id}/terminate`, {
      reason: 'cleanup stuck for an hour',
    });
    expect(term.status).toBe(200);
    expect(term.body.reservation).toMatchObject({ status: 'done' });
    const host = await c.c.ledger.getHost(undefined, 'spark-2');
    expect(host).toMatchObject({ phase: 'quarantined' });
    expect(host!.note).toMatch(
      /emergency terminate by api:oncall: cleanup stuck for an hour; not confirmed clean/,
    );
    const [after] = await c.c.ledger.leasesOf(undefined, id);
    expect(after!.status).toBe('released');
    const events = await c.c.ledger.history('reservation', id);
    expect(events.find((e) => e.type === 'alert.emergency_terminate')).toMatchObject({
      fromState: 'releasing',
      toState: 'done',
    });

    // the agent's late word about the ended lease changes nothing
    await expect(
      applyReport(c.c.ledger, 'spark-2', { type: 'cleaned', fencingToken: lease.fencingToken }),
    ).rejects.toMatchObject({ status: 409, code: 'stale_fencing_token' });
    expect((await c.c.ledger.getHost(undefined, 'spark-2'))?.phase).toBe('quarantined');
    // nothing is granted there until an operator clears it
    const clear = await c.call(c.tokens.ops, 'POST', '/api/v1/hosts/spark-2/clear-quarantine');
    expect(clear.body.host).toMatchObject({ phase: 'idle' });
    // and terminating ended work is an error, not a silent 200
    const again = await c.call(c.tokens.em, 'POST', `/api/v1/reservations/${id}/terminate`, {
      reason: 'ended already',
    });
    expect(again.status).toBe(409);
  });

  it("the agent's cleanup_failed ends the lease, quarantines the host with the reason and raises the alert", async () => {
    ctl = await startApiController();
    const c = ctl;
    const { id, lease } = await releasing(c);
    const reason =
      "the work area cannot be removed: rm: cannot remove '/srv/spark/work/x/f': Operation not permitted";

    // too early (a lease still current) or with a stale token: refused, nothing written
    await expect(
      applyReport(c.c.ledger, 'spark-2', {
        type: 'cleanup_failed',
        fencingToken: lease.fencingToken + 1,
        reason,
      }),
    ).rejects.toMatchObject({ status: 409, code: 'stale_fencing_token' });
    expect((await c.c.ledger.getHost(undefined, 'spark-2'))?.phase).toBe('cleaning');

    const result = await applyReport(c.c.ledger, 'spark-2', {
      type: 'cleanup_failed',
      fencingToken: lease.fencingToken,
      reason,
    });
    expect(result).toBe(`spark-2 quarantined (cleanup failed); reservation ${id} done`);
    const host = await c.c.ledger.getHost(undefined, 'spark-2');
    expect(host).toMatchObject({ phase: 'quarantined', note: `cleanup failed: ${reason}` });
    const alerts = (await c.c.ledger.history('host', 'spark-2')).filter(
      (e) => e.type === 'alert.cleanup_failed',
    );
    expect(alerts).toHaveLength(1);
    expect(JSON.parse(alerts[0]!.dataJson!)).toMatchObject({ leaseId: lease.id, reservationId: id, reason });
    const [after] = await c.c.ledger.leasesOf(undefined, id);
    expect(after!.status).toBe('released');
    expect(JSON.parse(after!.evidenceJson!).cleanupFailed).toBe(reason);
    // the public fleet view says why in a fixed template, never the stored reason (paths)
    const fleet = (await c.call(null, 'GET', '/api/v1/fleet')).body as {
      hosts: { id: string; note: string }[];
    };
    const view = fleet.hosts.find((h) => h.id === 'spark-2')!;
    expect(view.note).toBe('quarantined: cleanup after a lease failed; operator must clear');
    expect(JSON.stringify(fleet)).not.toContain('/srv/spark');
    const metrics = await (await fetch(`${c.c.url}/metrics`)).text();
    expect(metrics).toContain('spark_ledger_events_total{type="alert.cleanup_failed"} 1');
  });

  it('a cleanup_failed for a lease that is still current is refused and changes nothing', async () => {
    ctl = await startApiController();
    const c = ctl;
    await bringOnline(c.c.ledger, ['spark-2']);
    const id = (await c.call(c.tokens.dev, 'POST', '/api/v1/reservations', { host: 'spark-2', ttlS: 600 }))
      .body.reservation.id as string;
    await until(
      'grant',
      async () => (await c.c.ledger.getReservation(undefined, id))?.status === 'allocated',
    );
    const [lease] = await c.c.ledger.leasesOf(undefined, id);
    await expect(
      applyReport(c.c.ledger, 'spark-2', {
        type: 'cleanup_failed',
        fencingToken: lease!.fencingToken,
        reason: 'x',
      }),
    ).rejects.toMatchObject({ status: 409, code: 'not_releasing' });
    expect((await c.c.ledger.getHost(undefined, 'spark-2'))?.phase).toBe('allocated');
  });
});
