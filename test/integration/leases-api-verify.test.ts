import { afterEach, describe, expect, it } from 'vitest';
import { LeaseVerifyResponseSchema } from '../../core/protocol/receipt.ts';
import { HEAD_SHA, type LeaseFixture, startWithGrantedLease } from './actions-lease-fixture.ts';

let f: LeaseFixture | null = null;
afterEach(async () => {
  await f?.controller.close();
  f = null;
});

async function verify(
  fx: LeaseFixture,
  body: unknown,
  token: string | null,
  reservationId = fx.reservation.id,
): Promise<{ status: number; json: Record<string, unknown>; text: string }> {
  const res = await fetch(`${fx.controller.url}/api/v1/leases/${reservationId}/verify`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(token ? { authorization: `Bearer ${token}` } : {}),
    },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: JSON.parse(text) as Record<string, unknown>, text };
}

describe('POST /api/v1/leases/:reservationId/verify', () => {
  it('confirms the current lease of a single reservation and never echoes the job token', async () => {
    f = await startWithGrantedLease();
    const lease = f.leases[0]!;
    expect(lease.hostId).toBe('spark-2');
    const r = await verify(f, { hostId: lease.hostId, fencingToken: lease.fencingToken }, lease.jobToken);
    expect(r.status).toBe(200);
    const body = LeaseVerifyResponseSchema.parse(r.json);
    expect(body.reservation).toEqual({
      id: f.reservation.id,
      headSha: HEAD_SHA,
      topology: 'single',
      suite: 'smoke',
      kind: 'manual',
    });
    expect(body.lease.hostId).toBe('spark-2');
    expect(body.lease.fencingToken).toBe(lease.fencingToken);
    expect(body.lease.lend).toBe(false);
    expect(body.lease.expiresAt).toBeGreaterThan(Date.now());
    expect(r.text).not.toContain(lease.jobToken);
  });

  it('marks the lent spark-1 lease of a pair as lend=true', async () => {
    f = await startWithGrantedLease({ topology: 'pair' });
    const spark1 = f.leases.find((l) => l.hostId === 'spark-1')!;
    const r = await verify(f, { hostId: 'spark-1', fencingToken: spark1.fencingToken }, spark1.jobToken);
    expect(r.status).toBe(200);
    expect(LeaseVerifyResponseSchema.parse(r.json).lease.lend).toBe(true);
  });

  it('answers 401 without a token or with an unknown one, writing nothing', async () => {
    f = await startWithGrantedLease();
    const lease = f.leases[0]!;
    const before = await f.eventCount();
    const none = await verify(f, { hostId: lease.hostId, fencingToken: lease.fencingToken }, null);
    expect(none.status).toBe(401);
    expect(none.json).toMatchObject({ error: { code: 'unauthorized' } });
    const unknown = await verify(
      f,
      { hostId: lease.hostId, fencingToken: lease.fencingToken },
      'spk_job_not-a-real-token',
    );
    expect(unknown.status).toBe(401);
    expect(String((unknown.json.error as { message: string }).message)).toMatch(/unknown job token/);
    expect(await f.eventCount()).toBe(before);
  });

  it('answers 409 stale_fencing_token for any token but the current one', async () => {
    f = await startWithGrantedLease();
    const lease = f.leases[0]!;
    for (const stale of [lease.fencingToken - 1, lease.fencingToken + 1]) {
      if (stale < 1) continue;
      const r = await verify(f, { hostId: lease.hostId, fencingToken: stale }, lease.jobToken);
      expect(r.status).toBe(409);
      expect(r.json).toMatchObject({ error: { code: 'stale_fencing_token' } });
    }
  });

  it('refuses a job token used for another host or another reservation (403)', async () => {
    f = await startWithGrantedLease({ topology: 'pair' });
    const spark1 = f.leases.find((l) => l.hostId === 'spark-1')!;
    const spark2 = f.leases.find((l) => l.hostId === 'spark-2')!;
    const otherHost = await verify(
      f,
      { hostId: 'spark-2', fencingToken: spark2.fencingToken },
      spark1.jobToken,
    );
    expect(otherHost.status).toBe(403);
    const otherRes = await verify(
      f,
      { hostId: 'spark-1', fencingToken: spark1.fencingToken },
      spark1.jobToken,
      'r-999',
    );
    expect(otherRes.status).toBe(403);
    expect((otherRes.json.error as { message: string }).message).toContain('r-999');
  });

  it('fails closed once the release has begun (409 lease_not_active)', async () => {
    f = await startWithGrantedLease();
    const lease = f.leases[0]!;
    await f.ledger.beginRelease(f.reservation.id, 'released', 'operator released', 'test');
    const r = await verify(f, { hostId: lease.hostId, fencingToken: lease.fencingToken }, lease.jobToken);
    expect(r.status).toBe(409);
    expect(r.json).toMatchObject({ error: { code: 'lease_not_active' } });
  });

  it('rejects malformed and oversized bodies with a message saying what to fix', async () => {
    f = await startWithGrantedLease();
    const lease = f.leases[0]!;
    const notJson = await verify(f, '{"hostId":', lease.jobToken);
    expect(notJson.status).toBe(400);
    expect(notJson.json).toMatchObject({ error: { code: 'invalid_json' } });
    const badToken = await verify(f, { hostId: lease.hostId, fencingToken: 'seven' }, lease.jobToken);
    expect(badToken.status).toBe(400);
    expect((badToken.json.error as { message: string }).message).toContain('fencingToken');
    const extra = await verify(
      f,
      { hostId: lease.hostId, fencingToken: lease.fencingToken, sneaky: true },
      lease.jobToken,
    );
    expect(extra.status).toBe(400);
    const big = await verify(
      f,
      { hostId: lease.hostId, fencingToken: lease.fencingToken, pad: 'x'.repeat(10_000) },
      lease.jobToken,
    );
    expect(big.status).toBe(413);
    expect(big.json).toMatchObject({ error: { code: 'payload_too_large' } });
  });
});
