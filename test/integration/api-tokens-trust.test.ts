import { afterEach, describe, expect, it } from 'vitest';
import { createApiToken } from '../../functions/auth/tokens.ts';
import type { RunningController } from '../../functions/node-server.ts';
import { startTestController } from '../helpers/controller.ts';

/**
 * through the operator API: token names are unique among live tokens (the audit
 * actor `api:<name>` names one credential), revoking an emergency token needs the emergency
 * scope, `lastUsedAt` is maintained (at most one write a minute), and 403 audit rows are
 * throttled per token and route with their path bounded.
 */

let c: (RunningController & { dir: string }) | null = null;
afterEach(async () => {
  await c?.close();
  c = null;
});

// biome-ignore lint/suspicious/noExplicitAny: loosely typed JSON answers read by the assertions
type Json = Record<string, any>;

async function call(method: string, path: string, token: string, body?: unknown) {
  const res = await c!.app.request(`/api/v1${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, json: (await res.json()) as Json };
}

describe('API token rules', () => {
  it('unique names, emergency revocation, lastUsedAt and throttled denials', async () => {
    c = await startTestController({ listen: false });
    const ops = (await createApiToken(c.ledger, { name: 'ops', scopes: ['operate'] }, 'test')).token;
    const boss = (await createApiToken(c.ledger, { name: 'boss', scopes: ['operate', 'emergency'] }, 'test'))
      .token;

    // unique names among live tokens
    const dup = await call('POST', '/tokens', ops, { name: 'ops', scopes: ['develop'] });
    expect(dup.status).toBe(409);
    expect(dup.json.error.code).toBe('token_name_taken');
    const dev = await call('POST', '/tokens', ops, { name: 'dev', scopes: ['develop'] });
    expect(dev.status).toBe(201);

    // an operate-only token cannot revoke an emergency token; an emergency one can
    const emergency = await call('POST', '/tokens', boss, { name: 'break-glass', scopes: ['emergency'] });
    expect(emergency.status).toBe(201);
    const refused = await call('DELETE', `/tokens/${emergency.json.id}`, ops);
    expect(refused.status).toBe(403);
    const list = await call('GET', '/tokens', ops);
    const row = list.json.tokens as Array<{
      id: string;
      revokedAt: string | null;
      lastUsedAt: string | null;
      name: string;
    }>;
    expect(row.find((t) => t.id === emergency.json.id)!.revokedAt).toBeNull();
    // lastUsedAt is maintained for tokens that were used
    expect(row.find((t) => t.name === 'ops')!.lastUsedAt).not.toBeNull();
    expect(row.find((t) => t.name === 'break-glass')!.lastUsedAt).toBeNull();
    expect((await call('DELETE', `/tokens/${emergency.json.id}`, boss)).status).toBe(200);
    // the name is free again once revoked
    expect((await call('POST', '/tokens', boss, { name: 'break-glass', scopes: ['emergency'] })).status).toBe(
      201,
    );

    // 403s: one audit row per token and route per minute, path bounded
    const long = `/reservations/${'x'.repeat(2000)}/terminate`;
    for (let i = 0; i < 10; i++) expect((await call('POST', long, dev.json.token)).status).toBe(403);
    const denied = (
      await c.ledger.store.client.execute("SELECT cause FROM events WHERE type = 'api.denied'")
    ).rows.filter((r) => String(r.cause).startsWith('refused POST /api/v1/reservations/xxx'));
    expect(denied).toHaveLength(1);
    expect(String(denied[0]!.cause).length).toBeLessThan(200);
  });

  it('an expired token gets 401 saying when it expired; list and create show the expiry', async () => {
    let now = Date.parse('2026-01-01T00:00:00Z');
    c = await startTestController({ listen: false, clock: () => now });
    const ops = (await createApiToken(c.ledger, { name: 'ops', scopes: ['operate'] }, 'test')).token;

    const bad = await call('POST', '/tokens', ops, { name: 'short', scopes: ['develop'], expiresInS: 5 });
    expect(bad.status).toBe(400);
    const made = await call('POST', '/tokens', ops, {
      name: 'temp',
      scopes: ['develop'],
      expiresInS: 30 * 86400,
    });
    expect(made.status).toBe(201);
    expect(made.json.expiresAt).toBe('2026-01-31T00:00:00.000Z');
    const forever = await call('POST', '/tokens', ops, { name: 'forever', scopes: ['develop'] });
    expect(forever.json.expiresAt).toBeNull();

    expect((await call('GET', '/whoami', made.json.token)).status).toBe(200);
    const listed = (await call('GET', '/tokens', ops)).json.tokens as Json[];
    expect(listed.find((t) => t.name === 'temp')!.expiresAt).toBe('2026-01-31T00:00:00.000Z');
    expect(listed.find((t) => t.name === 'forever')!.expiresAt).toBeNull();

    now = Date.parse('2026-01-31T00:00:00Z');
    const expired = await call('GET', '/whoami', made.json.token);
    expect(expired.status).toBe(401);
    expect(expired.json.error.message).toContain('expired at 2026-01-31T00:00:00.000Z');
    // the token without expiry still works
    expect((await call('GET', '/whoami', forever.json.token)).status).toBe(200);
  });
});
