import { afterEach, describe, expect, it } from 'vitest';
import { ConfigError, parseConfig, tokenLimitFor } from '../../core/config.ts';
import { createApiToken } from '../../functions/auth/tokens.ts';
import type { RunningController } from '../../functions/node-server.ts';
import { testClock } from '../../scripts/sim/ledger.ts';
import { startTestController } from '../helpers/controller.ts';
import { bringOnline, heardAnHourAgo, startApiController, until } from './cli-harness.ts';

/**
 * per-token limits for development work (`tokenLimits` in the config), so one
 * develop token cannot take the fleet (30 pair leases of 24 h were accepted before).
 */

let c: (RunningController & { dir: string }) | null = null;
let api: Awaited<ReturnType<typeof startApiController>> | null = null;
afterEach(async () => {
  await c?.close();
  c = null;
  await api?.c.close();
  api = null;
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

async function count(sql: string): Promise<number> {
  return Number((await c!.ledger.store.client.execute(sql)).rows[0]![0]);
}

describe('tokenLimits', () => {
  it('refuses the third 24 h pair from one develop token (default: 4 hosts at once) and changes nothing', async () => {
    c = await startTestController({ listen: false });
    await heardAnHourAgo(c.ledger);
    const dev = (await createApiToken(c.ledger, { name: 'dev', scopes: ['develop'] }, 'test')).token;
    const other = (await createApiToken(c.ledger, { name: 'other', scopes: ['develop'] }, 'test')).token;

    const answers: number[] = [];
    let refusal: Json | null = null;
    for (let i = 0; i < 30; i++) {
      const r = await call('POST', '/reservations', dev, { topology: 'pair', ttlS: 86_400 });
      answers.push(r.status);
      if (r.status !== 201) refusal = r.json;
    }
    expect(answers.filter((s) => s === 201)).toHaveLength(2);
    expect(answers.filter((s) => s === 409)).toHaveLength(28);
    expect(refusal!.error.code).toBe('token_limit');
    expect(refusal!.error.message).toMatch(/holds or waits for 4 host\(s\).*at most 4 .*maxConcurrentLeases/);
    // refusals wrote nothing: two reservations, two queued events
    expect(await count("SELECT count(*) FROM reservations WHERE kind = 'development'")).toBe(2);
    expect(await count("SELECT count(*) FROM events WHERE type = 'reservation.queued'")).toBe(2);

    // the limit is per token
    expect((await call('POST', '/reservations', other, { topology: 'single' })).status).toBe(201);
    // a single still does not fit for `dev`; cancelling one pair frees room again
    expect((await call('POST', '/reservations', dev, { topology: 'single' })).status).toBe(409);
    expect((await call('POST', '/reservations/r-1/cancel', dev)).status).toBe(200);
    expect((await call('POST', '/reservations', dev, { topology: 'single' })).status).toBe(201);
  });

  it('applies byName limits: hosts, max TTL and concurrency, with errors naming the limit', async () => {
    c = await startTestController({
      listen: false,
      config: {
        tokenLimits: { byName: { 'ci-bot': { hosts: ['spark-2'], maxTtlS: 3600, maxConcurrentLeases: 1 } } },
      },
    });
    await heardAnHourAgo(c.ledger);
    const bot = (await createApiToken(c.ledger, { name: 'ci-bot', scopes: ['develop'] }, 'test')).token;
    const before = await count('SELECT count(*) FROM reservations');

    const noHost = await call('POST', '/reservations', bot, { topology: 'single' });
    expect(noHost.status).toBe(403);
    expect(noHost.json.error.message).toMatch(
      /only hosts spark-2 \(tokenLimits hosts\): name one with --host/,
    );
    const wrongHost = await call('POST', '/reservations', bot, { host: 'spark-1' });
    expect(wrongHost.status).toBe(403);
    expect(wrongHost.json.error.message).toMatch(/not spark-1/);
    const pair = await call('POST', '/reservations', bot, { topology: 'pair' });
    expect(pair.status).toBe(403);
    expect(pair.json.error.message).toMatch(/a pair in pool spark could take spark-1/);
    const long = await call('POST', '/reservations', bot, { host: 'spark-2', ttlS: 7200 });
    expect(long.status).toBe(403);
    expect(long.json.error.code).toBe('token_limit');
    expect(long.json.error.message).toMatch(/tokenLimits maxTtlS of 3600s/);
    expect(await count('SELECT count(*) FROM reservations')).toBe(before);

    const ok = await call('POST', '/reservations', bot, { host: 'spark-2' });
    expect(ok.status).toBe(201);
    // the default TTL (4 h) is cut to the token's maximum
    expect(await count("SELECT ttl_s FROM reservations WHERE id = 'r-1'")).toBe(3600);
    const second = await call('POST', '/reservations', bot, { host: 'spark-2' });
    expect(second.status).toBe(409);
    expect(second.json.error.message).toMatch(/at most 1 at once \(tokenLimits maxConcurrentLeases\)/);
  });

  it('validates the config and resolves limits over the defaults', () => {
    expect(() => parseConfig({ tokenLimits: { default: { hosts: ['spark-9'] } } })).toThrow(
      /tokenLimits\.default\.hosts\.0: unknown host "spark-9"/,
    );
    expect(() => parseConfig({ tokenLimits: { byName: { a: { maxTtlS: 200_000 } } } })).toThrow(
      /tokenLimits\.byName\.a\.maxTtlS: maxTtlS 200000 exceeds timings\.devLeaseMaxTtlS/,
    );
    expect(() => parseConfig({ tokenLimits: { default: { maxLeases: 3 } } })).toThrow(ConfigError);
    const cfg = parseConfig({
      tokenLimits: { default: { maxConcurrentLeases: 2 }, byName: { big: { maxConcurrentLeases: 8 } } },
    });
    expect(tokenLimitFor(cfg, 'someone')).toEqual({ maxConcurrentLeases: 2, maxTtlS: 86_400, hosts: null });
    expect(tokenLimitFor(cfg, 'big').maxConcurrentLeases).toBe(8);
    // a token named like an Object.prototype member gets the default, not a prototype value
    expect(tokenLimitFor(cfg, 'constructor').maxConcurrentLeases).toBe(2);
    expect(tokenLimitFor(parseConfig({}), 'x')).toEqual({
      maxConcurrentLeases: 4,
      maxTtlS: 86_400,
      hosts: null,
    });
  });

  it("bounds renewals by the requesting token's maxTtlS", async () => {
    const clock = testClock(Date.now());
    api = await startApiController({
      clock,
      config: {
        timings: { devLeaseMaxTtlS: 7200, devLeaseDefaultTtlS: 1800 },
        tokenLimits: { byName: { dev: { maxTtlS: 3600 } } },
      },
    });
    const { call, tokens } = api;
    await bringOnline(api.c.ledger);
    const id = (await call(tokens.dev, 'POST', '/api/v1/reservations', { host: 'spark-2' })).body.reservation
      .id as string;
    await until(
      'grant',
      async () => (await api!.c.ledger.getReservation(undefined, id))?.status === 'allocated',
    );
    const granted = (await api.c.ledger.leasesOf(undefined, id))[0]!;
    clock.advance(10 * 60_000);
    // asks for 2 h (within the global 7200 s) but the token may hold 1 h from grant
    const r1 = await call(tokens.dev, 'POST', `/api/v1/reservations/${id}/renew`, { ttlS: 7200 });
    expect(r1.status).toBe(200);
    expect(Date.parse(r1.body.reservation.leases[0].expiresAt)).toBe(granted.grantedAt + 3600_000);
    const r2 = await call(tokens.dev, 'POST', `/api/v1/reservations/${id}/renew`, {});
    expect(r2.status).toBe(409);
    expect(r2.body.error.message).toMatch(/3600s from grant, tokenLimits maxTtlS of its token/);
  });
});
