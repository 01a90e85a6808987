import { eq } from 'drizzle-orm';
import { afterEach, describe, expect, it } from 'vitest';
import { parseStoredReceipts, type Receipt } from '../../core/protocol/receipt.ts';
import { recordHostEvidence } from '../../functions/ledger/host-evidence.ts';
import * as t from '../../functions/ledger/schema.ts';
import { hostEvidence } from '../helpers/host-evidence.ts';
import { HEAD_SHA, type LeaseFixture, startWithGrantedLease } from './actions-lease-fixture.ts';

let f: LeaseFixture | null = null;
afterEach(async () => {
  await f?.controller.close();
  f = null;
});

function receiptFor(fx: LeaseFixture, hostId: string, over: Partial<Receipt> = {}): Receipt {
  const lease = fx.leases.find((l) => l.hostId === hostId)!;
  return {
    version: 1,
    reservationId: fx.reservation.id,
    hostId,
    fencingToken: lease.fencingToken,
    headSha: HEAD_SHA,
    repo: 'acme/butter',
    suite: fx.reservation.suite as Receipt['suite'],
    topology: fx.reservation.topology as Receipt['topology'],
    phases: [{ suite: 'smoke', exitCode: 0, durationMs: 1200 }],
    startedAt: '2026-11-30T08:00:00.000Z',
    endedAt: '2026-11-30T08:00:01.200Z',
    result: 'passed',
    exitCode: 0,
    log: { sha256: 'a'.repeat(64), bytes: 2048, lines: 40 },
    toolchain: { node: 'v20.20.2', source: HEAD_SHA },
    ...over,
  };
}

async function post(
  fx: LeaseFixture,
  body: unknown,
  token: string | null,
  reservationId = fx.reservation.id,
) {
  const res = await fetch(`${fx.controller.url}/api/v1/leases/${reservationId}/receipt`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(token ? { authorization: `Bearer ${token}` } : {}),
    },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

async function receiptEvents(fx: LeaseFixture) {
  return (await fx.ledger.history('reservation', fx.reservation.id)).filter(
    (e) => e.type === 'reservation.receipt',
  );
}

describe('POST /api/v1/leases/:reservationId/receipt', () => {
  it('stores the receipt and records reservation.receipt without log lines or tokens', async () => {
    f = await startWithGrantedLease();
    const lease = f.leases[0]!;
    const receipt = receiptFor(f, lease.hostId, {
      result: 'failed',
      exitCode: 1,
      phases: [{ suite: 'smoke', exitCode: 1, durationMs: 900 }],
      lastLines: ['FAILED tests/cuda/test_smoke.py::test_add - AssertionError: secret-log-line'],
    });
    const r = await post(f, receipt, lease.jobToken);
    expect(r.status).toBe(201);
    expect(r.json).toEqual({
      ok: true,
      reportedBy: 'job',
      duplicate: false,
      hostsReported: 1,
      hostsExpected: 1,
      overall: 'failed',
    });
    const stored = parseStoredReceipts((await f.reservationRow()).receiptJson);
    expect(stored?.byHost[lease.hostId]).toEqual(receipt);
    const events = await receiptEvents(f);
    expect(events).toHaveLength(1);
    const data = JSON.parse(events[0]!.dataJson!) as Record<string, unknown>;
    expect(data).toMatchObject({ result: 'failed', headSha: HEAD_SHA, hostId: 'spark-2' });
    const row = JSON.stringify(events[0]);
    expect(row).not.toContain('secret-log-line');
    expect(row).not.toContain(lease.jobToken);
    expect(row).not.toContain('fencingToken');
  });

  it('accepts a retried identical receipt once and refuses a different second one', async () => {
    f = await startWithGrantedLease();
    const lease = f.leases[0]!;
    const receipt = receiptFor(f, lease.hostId);
    expect((await post(f, receipt, lease.jobToken)).status).toBe(201);
    const again = await post(f, receipt, lease.jobToken);
    expect(again.status).toBe(200);
    expect(again.json).toMatchObject({ duplicate: true, overall: 'passed' });
    const different = await post(f, { ...receipt, endedAt: '2026-11-30T08:00:05.000Z' }, lease.jobToken);
    expect(different.status).toBe(409);
    expect(different.json).toMatchObject({ error: { code: 'receipt_already_recorded' } });
    expect(await receiptEvents(f)).toHaveLength(1);
  });

  it('refuses a stale fencing token, a wrong SHA and a wrong suite, writing nothing', async () => {
    f = await startWithGrantedLease();
    const lease = f.leases[0]!;
    const before = await f.eventCount();
    const stale = await post(
      f,
      receiptFor(f, lease.hostId, { fencingToken: lease.fencingToken + 1 }),
      lease.jobToken,
    );
    expect(stale.status).toBe(409);
    expect(stale.json).toMatchObject({ error: { code: 'stale_fencing_token' } });
    const sha = await post(f, receiptFor(f, lease.hostId, { headSha: 'b'.repeat(40) }), lease.jobToken);
    expect(sha.status).toBe(409);
    expect(sha.json).toMatchObject({ error: { code: 'receipt_mismatch' } });
    expect((sha.json.error as { message: string }).message).toContain(`admitted ${HEAD_SHA}`);
    const suite = await post(f, receiptFor(f, lease.hostId, { suite: 'performance' }), lease.jobToken);
    expect(suite.status).toBe(409);
    expect(await f.eventCount()).toBe(before);
    expect((await f.reservationRow()).receiptJson).toBeNull();
  });

  it('validates the body: log lines on a passed run, bad SHA, wrong reservation, oversize', async () => {
    f = await startWithGrantedLease();
    const lease = f.leases[0]!;
    const passedWithLines = await post(f, receiptFor(f, lease.hostId, { lastLines: ['x'] }), lease.jobToken);
    expect(passedWithLines.status).toBe(400);
    expect((passedWithLines.json.error as { message: string }).message).toContain('lastLines');
    const shortSha = await post(f, receiptFor(f, lease.hostId, { headSha: '7fc2a91' }), lease.jobToken);
    expect(shortSha.status).toBe(400);
    expect((shortSha.json.error as { message: string }).message).toContain('40-character');
    const elsewhere = await post(f, receiptFor(f, lease.hostId), lease.jobToken, 'r-42');
    expect(elsewhere.status).toBe(400);
    expect(elsewhere.json).toMatchObject({ error: { code: 'reservation_mismatch' } });
    const huge = await post(
      f,
      receiptFor(f, lease.hostId, { toolchain: { big: 'y'.repeat(40_000) } }),
      lease.jobToken,
    );
    expect(huge.status).toBe(413);
    const noToken = await post(f, receiptFor(f, lease.hostId), null);
    expect(noToken.status).toBe(401);
    expect(await receiptEvents(f)).toHaveLength(0);
  });

  it('reports a pair overall only when both hosts have posted', async () => {
    f = await startWithGrantedLease({ topology: 'pair' });
    const [a, b] = f.leases as [(typeof f.leases)[0], (typeof f.leases)[0]];
    const first = await post(f, receiptFor(f, a.hostId), a.jobToken);
    expect(first.json).toMatchObject({ hostsReported: 1, hostsExpected: 2, overall: null });
    const second = await post(
      f,
      receiptFor(f, b.hostId, {
        result: 'failed',
        exitCode: 2,
        lastLines: ['rank 1: allreduce mismatch'],
      }),
      b.jobToken,
    );
    expect(second.json).toMatchObject({ hostsReported: 2, hostsExpected: 2, overall: 'failed' });
    const stored = parseStoredReceipts((await f.reservationRow()).receiptJson)!;
    expect(Object.keys(stored.byHost).sort()).toEqual(['spark-1', 'spark-2']);
  });

  it('still accepts the receipt while the release is under way, not after it ended', async () => {
    f = await startWithGrantedLease();
    const lease = f.leases[0]!;
    await f.ledger.beginRelease(f.reservation.id, 'passed', 'workflow_job completed', 'test');
    expect((await post(f, receiptFor(f, lease.hostId), lease.jobToken)).status).toBe(201);
    await f.ledger.confirmReleased(lease.hostId, lease.fencingToken, 'test');
    const late = await post(
      f,
      receiptFor(f, lease.hostId, { endedAt: '2026-11-30T08:00:09.000Z' }),
      lease.jobToken,
    );
    expect(late.status).toBe(409);
  });

  it('refuses what only the agent can report: a CI task mode, a revoked clone token, another backend (ADR 0160)', async () => {
    f = await startWithGrantedLease();
    const lease = f.leases[0]!;
    // the agent reported the backend with runner_started
    await f.ledger.write(async (tx) => {
      await tx
        .update(t.leases)
        .set({ evidenceJson: JSON.stringify({ executor: 'jit-runner' }) })
        .where(eq(t.leases.id, lease.leaseId));
    });
    const before = await f.eventCount();
    const claims: [Partial<Receipt>, string][] = [
      [{ mode: 'task' }, 'mode task'],
      [
        { toolchain: { cloneToken: 'revoked: HTTP 204 from https://api.github.com' } },
        'toolchain.cloneToken',
      ],
      [{ executor: 'dstack' }, 'executor dstack ≠ jit-runner'],
    ];
    for (const [over, words] of claims) {
      const r = await post(f, receiptFor(f, lease.hostId, over), lease.jobToken);
      expect(r.status, words).toBe(409);
      expect(r.json).toMatchObject({ error: { code: 'receipt_mismatch' } });
      expect((r.json.error as { message: string }).message).toContain(words);
    }
    expect(await f.eventCount()).toBe(before);
    expect((await f.reservationRow()).receiptJson).toBeNull();
    // the same receipt without the agent's words is the job's to post
    const own = await post(
      f,
      receiptFor(f, lease.hostId, { mode: 'runner', executor: 'jit-runner' }),
      lease.jobToken,
    );
    expect(own.status).toBe(201);
    expect(own.json).toMatchObject({ reportedBy: 'job' });
    const [event] = await receiptEvents(f);
    expect(event!.cause).toContain('receipt reported by the job on spark-2');
    expect(JSON.parse(event!.dataJson!)).toMatchObject({ reportedBy: 'job' });
  });

  it('refuses a receipt once the runner exited and the host evidence is recorded, writing nothing', async () => {
    f = await startWithGrantedLease();
    const lease = f.leases[0]!;
    const row = (await f.ledger.leasesOf(undefined, f.reservation.id))[0]!;
    await f.ledger.write((tx, now) => recordHostEvidence(tx, now, row, hostEvidence(HEAD_SHA)));
    const before = await f.eventCount();
    const late = await post(f, receiptFor(f, lease.hostId), lease.jobToken);
    expect(late.status).toBe(409);
    expect(late.json).toMatchObject({ error: { code: 'runner_exited' } });
    expect(await f.eventCount()).toBe(before);
    expect((await f.reservationRow()).receiptJson).toBeNull();
  });
});
