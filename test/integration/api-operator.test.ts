import { count, eq } from 'drizzle-orm';
import { afterEach, describe, expect, it } from 'vitest';
import { ReservationResponse } from '../../core/protocol/api.ts';
import * as t from '../../functions/ledger/schema.ts';
import { testClock } from '../../scripts/sim/ledger.ts';
import {
  agentCleaned,
  agentPrepared,
  bringOnline,
  heardAnHourAgo,
  startApiController,
  until,
} from './cli-harness.ts';

type Ctl = Awaited<ReturnType<typeof startApiController>>;
let ctl: Ctl | null = null;
afterEach(async () => {
  await ctl?.c.close();
  ctl = null;
});

async function counts(c: Ctl['c']) {
  const [r] = await c.ledger.db.select({ n: count() }).from(t.reservations);
  const [e] = await c.ledger.db.select({ n: count() }).from(t.events);
  return { reservations: r!.n, events: e!.n };
}

describe('operator/user API', () => {
  it('creates a development reservation at priority 100, audited with the token name', async () => {
    ctl = await startApiController();
    const { call, tokens, c } = ctl;
    await heardAnHourAgo(c.ledger);
    const res = await call(tokens.dev, 'POST', '/api/v1/reservations', { ttlS: 3600 });
    expect(res.status).toBe(201);
    const { reservation } = ReservationResponse.parse(res.body);
    expect(reservation).toMatchObject({
      kind: 'development',
      priority: 100,
      status: 'queued',
      mine: true,
      ttlS: 3600,
    });
    expect(reservation.position).toBe(1);
    expect(reservation.reason).toMatch(/schedulable/);
    const hist = await call(tokens.dev, 'GET', `/api/v1/reservations/${reservation.id}/history`);
    expect(hist.body.events[0]).toMatchObject({ type: 'reservation.queued', actor: 'api:dev' });
    const row = await c.ledger.getReservation(undefined, reservation.id);
    expect(row?.requester).toBe('api:dev');
  });

  it('rejects bad input with a message and writes nothing', async () => {
    ctl = await startApiController({
      config: { timings: { devLeaseMaxTtlS: 7200, devLeaseDefaultTtlS: 3600 } },
    });
    const { call, tokens, c } = ctl;
    const before = await counts(c);
    const cases: [unknown, RegExp][] = [
      [{ topology: 'pair', host: 'spark-1' }, /drop --host or --pair/],
      [{ ttlS: 9000 }, /exceeds the development maximum of 7200s/],
      [{ ttlS: 5 }, /at least 60 seconds/],
      [{ host: 'spark-9' }, /unknown host "spark-9"/],
      [{ host: 'Bad Host' }, /host id/],
      [{ topology: 'triple' }, /topology/],
      [{ surprise: true }, /surprise/],
      ['{not json', /not valid JSON/],
    ];
    for (const [body, message] of cases) {
      const res = await call(tokens.dev, 'POST', '/api/v1/reservations', body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      // one body parser for every route: unparseable text is invalid_json, a refused body invalid_request
      expect(res.body.error.code).toBe(typeof body === 'string' ? 'invalid_json' : 'invalid_request');
      expect(res.body.error.message).toMatch(message);
    }
    expect(await counts(c)).toEqual(before);
  });

  it('enforces tokens and scopes: 401 unknown, 403 without scope, emergency never implied by operate', async () => {
    ctl = await startApiController();
    const { call, tokens } = ctl;
    await heardAnHourAgo(ctl.c.ledger);
    expect((await call(null, 'GET', '/api/v1/reservations')).status).toBe(401);
    const bad = await call('spk_api_nope', 'GET', '/api/v1/reservations');
    expect(bad.status).toBe(401);
    expect(bad.body.error.message).toMatch(/unknown or revoked/);
    expect((await call(tokens.dev, 'POST', '/api/v1/hosts/spark-2/adopt')).status).toBe(403);
    const r = await call(tokens.ops, 'POST', '/api/v1/reservations', {});
    const term = await call(tokens.ops, 'POST', `/api/v1/reservations/${r.body.reservation.id}/terminate`, {
      reason: 'testing',
    });
    expect(term.status).toBe(403);
    expect(term.body.error.message).toMatch(/"emergency" scope/);
    // an operate token cannot mint the scope it lacks
    const mint = await call(tokens.ops, 'POST', '/api/v1/tokens', { name: 'x', scopes: ['emergency'] });
    expect(mint.status).toBe(403);
    const ok = await call(tokens.em, 'POST', '/api/v1/tokens', { name: 'pager', scopes: ['emergency'] });
    expect(ok.status).toBe(201);
    expect(ok.body.token).toMatch(/^spk_api_/);
  });

  it('audits reads (once per token and route per minute) and scope refusals', async () => {
    const clock = testClock(Date.now());
    ctl = await startApiController({ clock });
    const { call, tokens, c } = ctl;
    const dev = (await call(tokens.dev, 'GET', '/api/v1/whoami')).body.tokenId as string;
    for (let i = 0; i < 3; i++)
      expect((await call(tokens.dev, 'GET', '/api/v1/reservations')).status).toBe(200);
    const reads = async () =>
      (await c.ledger.history('audit', dev)).filter(
        (e) => e.type === 'api.read' && e.cause.includes('/reservations'),
      );
    expect(await reads()).toHaveLength(1);
    expect((await reads())[0]).toMatchObject({ actor: 'api:dev', cause: 'read /api/v1/reservations' });
    clock.advance(61_000);
    await call(tokens.dev, 'GET', '/api/v1/reservations');
    expect((await reads()).at(-1)?.cause).toMatch(
      /\(3 calls to GET \/api\/v1\/reservations in the minute before\)/,
    );

    const ops = (await call(tokens.ops, 'GET', '/api/v1/whoami')).body.tokenId as string;
    await call(tokens.ops, 'POST', '/api/v1/reservations/r-1/terminate', { reason: 'nope' });
    const denied = (await c.ledger.history('audit', ops)).filter((e) => e.type === 'api.denied');
    expect(denied).toHaveLength(1);
    expect(denied[0]).toMatchObject({
      actor: 'api:ops',
      cause: 'refused POST /api/v1/reservations/r-1/terminate (HTTP 403)',
    });
    // an unknown token cannot be attributed; nothing is written for it
    const before = (await c.ledger.recentEvents(1))[0]!.id;
    await call('spk_api_unknown', 'GET', '/api/v1/reservations');
    expect((await c.ledger.recentEvents(1))[0]!.id).toBe(before);
  });

  it('every /api/v1 route family joins the same audit trail: operator, agent-token and repository routes', async () => {
    ctl = await startApiController();
    const { call, tokens, c } = ctl;
    const dev = (await call(tokens.dev, 'GET', '/api/v1/whoami')).body.tokenId as string;
    const ops = (await call(tokens.ops, 'GET', '/api/v1/whoami')).body.tokenId as string;
    const audited = async (tokenId: string, type: 'api.read' | 'api.denied') =>
      (await c.ledger.history('audit', tokenId)).filter((e) => e.type === type).map((e) => e.dataJson);

    // reads of each family: one api.read row each, naming the route
    expect((await call(tokens.dev, 'GET', '/api/v1/reservations')).status).toBe(200);
    expect((await call(tokens.dev, 'GET', '/api/v1/repositories')).status).toBe(200);
    const reads = await audited(dev, 'api.read');
    expect(reads).toContainEqual(JSON.stringify({ route: 'GET /api/v1/reservations', status: 200 }));
    expect(reads).toContainEqual(JSON.stringify({ route: 'GET /api/v1/repositories', status: 200 }));

    // refusals for lack of scope in each family: one api.denied row each
    expect((await call(tokens.dev, 'POST', '/api/v1/hosts/spark-2/adopt')).status).toBe(403);
    expect((await call(tokens.dev, 'POST', '/api/v1/hosts/spark-2/agent-tokens')).status).toBe(403);
    expect((await call(tokens.dev, 'DELETE', '/api/v1/agent-tokens/agt-000000000000')).status).toBe(403);
    expect((await call(tokens.dev, 'POST', '/api/v1/repositories/acme/butter/disable')).status).toBe(403);
    expect(await audited(dev, 'api.denied')).toEqual([
      JSON.stringify({ route: 'POST /api/v1/hosts/:id/adopt', status: 403 }),
      JSON.stringify({ route: 'POST /api/v1/hosts/:id/agent-tokens', status: 403 }),
      JSON.stringify({ route: 'DELETE /api/v1/agent-tokens/:id', status: 403 }),
      JSON.stringify({ route: 'POST /api/v1/repositories/:owner/:name/disable', status: 403 }),
    ]);

    // changes are audited by their own events, carrying the token name as actor
    const created = await call(tokens.ops, 'POST', '/api/v1/hosts/spark-2/agent-tokens');
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    expect((await call(tokens.ops, 'DELETE', `/api/v1/agent-tokens/${id}`)).status).toBe(200);
    expect((await c.ledger.history('token', id)).map((e) => [e.type, e.actor])).toEqual([
      ['agent_token.created', 'api:ops'],
      ['agent_token.revoked', 'api:ops'],
    ]);
    expect(await audited(ops, 'api.denied')).toEqual([]);
  });

  it('lets a develop token act only on its own reservations', async () => {
    ctl = await startApiController();
    const { call, tokens } = ctl;
    await heardAnHourAgo(ctl.c.ledger);
    const mine = await call(tokens.dev, 'POST', '/api/v1/reservations', {});
    const id = mine.body.reservation.id;
    const other = await call(tokens.dev2, 'POST', `/api/v1/reservations/${id}/cancel`);
    expect(other.status).toBe(403);
    expect(other.body.error.message).toMatch(/belongs to another token/);
    const list = await call(tokens.dev2, 'GET', '/api/v1/reservations?mine=1');
    expect(list.body.reservations).toEqual([]);
    expect((await call(tokens.ops, 'POST', `/api/v1/reservations/${id}/cancel`)).status).toBe(200);
  });

  it('cancels queued work only; active work must be released, and release waits for the agent', async () => {
    ctl = await startApiController();
    const { call, tokens, c } = ctl;
    await bringOnline(c.ledger);
    const res = await call(tokens.dev, 'POST', '/api/v1/reservations', { host: 'spark-2' });
    const id = res.body.reservation.id as string;
    await until('grant', async () => (await c.ledger.getReservation(undefined, id))?.status === 'allocated');
    const cancel = await call(tokens.dev, 'POST', `/api/v1/reservations/${id}/cancel`);
    expect(cancel.status).toBe(409);
    expect(cancel.body.error.message).toMatch(/release it instead/);

    const queued = await call(tokens.dev, 'POST', '/api/v1/reservations', { host: 'spark-2' });
    const qid = queued.body.reservation.id as string;
    const rel = await call(tokens.dev, 'POST', `/api/v1/reservations/${qid}/release`);
    expect(rel.status).toBe(409);
    expect(rel.body.error.message).toMatch(/cancel it instead/);
    expect(
      (await call(tokens.dev, 'POST', `/api/v1/reservations/${qid}/cancel`)).body.reservation.status,
    ).toBe('cancelled');

    await agentPrepared(c.ledger, id);
    const ready = await call(tokens.dev, 'GET', `/api/v1/reservations/${id}`);
    expect(ready.body.reservation.ready).toBe(true);
    // not even an operate token ends someone else's active work by a release (rule 1)
    const foreign = await call(tokens.ops, 'POST', `/api/v1/reservations/${id}/release`);
    expect(foreign.status).toBe(403);
    expect(foreign.body.error.message).toMatch(/emergency terminate/);
    expect((await c.ledger.getReservation(undefined, id))?.status).toBe('preparing');
    const released = await call(tokens.dev, 'POST', `/api/v1/reservations/${id}/release`);
    expect(released.body.reservation.status).toBe('releasing');
    expect(released.body.reservation.leases[0].status).toBe('releasing');
    // the host stays bound until the agent confirms cleanup (rule 7)
    expect((await c.ledger.getHost(undefined, 'spark-2'))?.phase).toBe('cleaning');
    await agentCleaned(c.ledger, id);
    const done = await call(tokens.dev, 'GET', `/api/v1/reservations/${id}`);
    expect(done.body.reservation).toMatchObject({ status: 'done', outcome: 'released' });
    expect(JSON.stringify(done.body)).not.toMatch(/fencing/i);
  });

  it('renews a development lease up to the maximum, never an expired or queued one', async () => {
    const clock = testClock(Date.now());
    ctl = await startApiController({
      clock,
      config: { timings: { devLeaseMaxTtlS: 7200, devLeaseDefaultTtlS: 3600 } },
    });
    const { call, tokens, c } = ctl;
    await bringOnline(c.ledger);
    const id = (await call(tokens.dev, 'POST', '/api/v1/reservations', { host: 'spark-2' })).body.reservation
      .id;
    await until('grant', async () => (await c.ledger.getReservation(undefined, id))?.status === 'allocated');
    const granted = (await c.ledger.leasesOf(undefined, id))[0]!;
    expect(granted.expiresAt - granted.grantedAt).toBe(3600_000);

    clock.advance(30 * 60_000);
    const r1 = await call(tokens.dev, 'POST', `/api/v1/reservations/${id}/renew`, {});
    expect(r1.status).toBe(200);
    expect(Date.parse(r1.body.reservation.leases[0].expiresAt)).toBe(clock() + 3600_000);
    const r2 = await call(tokens.dev, 'POST', `/api/v1/reservations/${id}/renew`, { ttlS: 7200 });
    expect(Date.parse(r2.body.reservation.leases[0].expiresAt)).toBe(granted.grantedAt + 7200_000);
    const r3 = await call(tokens.dev, 'POST', `/api/v1/reservations/${id}/renew`, {});
    expect(r3.status).toBe(409);
    expect(r3.body.error.code).toBe('renew_limit');
    const hist = await call(tokens.dev, 'GET', `/api/v1/reservations/${id}/history`);
    expect(hist.body.events.filter((e: { type: string }) => e.type === 'lease.renewed')).toHaveLength(2);

    clock.advance(2 * 3600_000);
    await c.loop.runNow();
    const r4 = await call(tokens.dev, 'POST', `/api/v1/reservations/${id}/renew`, {});
    expect(r4.status).toBe(409);
  });

  it('recover refuses a live lease, then releases only after the agent confirms termination', async () => {
    const clock = testClock(Date.now());
    ctl = await startApiController({ clock });
    const { call, tokens, c } = ctl;
    await bringOnline(c.ledger);
    const id = (await call(tokens.dev, 'POST', '/api/v1/reservations', { host: 'spark-2', ttlS: 600 })).body
      .reservation.id;
    await until('grant', async () => (await c.ledger.getReservation(undefined, id))?.status === 'allocated');
    await agentPrepared(c.ledger, id);
    // the developer's processes keep the GPU busy: an expiry must not free the host
    await c.ledger.recordHeartbeat('spark-2', {
      gpuProcesses: [{ pid: 77, name: 'python', usedMemoryMiB: 1000 }],
      freeDiskBytes: 1e11,
      serviceState: 'none',
      runnerState: 'none',
      interconnectOk: true,
    });
    const refused = await call(tokens.ops, 'POST', `/api/v1/reservations/${id}/recover`);
    expect(refused.status).toBe(409);
    expect(refused.body.error.code).toBe('live_lease');
    expect(refused.body.error.message).toMatch(/release it instead/);
    expect((await call(tokens.dev, 'POST', `/api/v1/reservations/${id}/recover`)).status).toBe(403);

    clock.advance(601_000);
    await c.loop.runNow();
    expect((await c.ledger.getHost(undefined, 'spark-2'))?.phase).toBe('release-required');

    const rec = await call(tokens.ops, 'POST', `/api/v1/reservations/${id}/recover`);
    expect(rec.status).toBe(200);
    expect(rec.body).toMatchObject({ action: 'release-requested', awaitingHosts: ['spark-2'] });
    expect(rec.body.reservation.status).toBe('releasing');
    await c.loop.runNow();
    expect((await c.ledger.getHost(undefined, 'spark-2'))?.phase).toBe('release-required');
    // already releasing: recovery has nothing to do and says why, never a 200 that changed nothing
    const again = await call(tokens.ops, 'POST', `/api/v1/reservations/${id}/recover`);
    expect(again.status).toBe(409);
    expect(again.body.error.code).toBe('awaiting_agent');
    // (the test clock moved past the heartbeat: the agent counts as not heard from)
    expect(again.body.error.message).toMatch(/spark-2: its agent has not been heard from since/);
    expect(again.body.error.message).toMatch(/sparkctl emergency terminate/);

    await agentCleaned(c.ledger, id);
    expect((await c.ledger.getHost(undefined, 'spark-2'))?.phase).toBe('idle');
    const end = await call(tokens.ops, 'GET', `/api/v1/reservations/${id}`);
    expect(end.body.reservation).toMatchObject({ status: 'failed', outcome: 'recovered' });
    const types = (await call(tokens.ops, 'GET', `/api/v1/reservations/${id}/history`)).body.events.map(
      (e: { type: string }) => e.type,
    );
    expect(types).toContain('reservation.recovery');
  });

  it('emergency terminate needs a reason, releases through the agent and raises an alert', async () => {
    ctl = await startApiController();
    const { call, tokens, c } = ctl;
    await bringOnline(c.ledger);
    const id = (await call(tokens.dev, 'POST', '/api/v1/reservations', { host: 'spark-2' })).body.reservation
      .id;
    await until('grant', async () => (await c.ledger.getReservation(undefined, id))?.status === 'allocated');
    const noReason = await call(tokens.em, 'POST', `/api/v1/reservations/${id}/terminate`, {});
    expect(noReason.status).toBe(400);
    expect(noReason.body.error.message).toMatch(/reason/);
    expect((await c.ledger.getReservation(undefined, id))?.status).toBe('allocated');
    const ok = await call(tokens.em, 'POST', `/api/v1/reservations/${id}/terminate`, {
      reason: 'GPU on fire',
    });
    expect(ok.body.reservation.status).toBe('releasing');
    const events = await c.ledger.history('reservation', id);
    expect(events.find((e) => e.type === 'alert.emergency_terminate')?.cause).toMatch(
      /api:oncall: GPU on fire/,
    );
  });

  it('adopts hosts, starts Deckard at priority 90 on the home-service host, revokes tokens', async () => {
    ctl = await startApiController();
    const { call, tokens, c } = ctl;
    const adopt = await call(tokens.ops, 'POST', '/api/v1/hosts/spark-2/adopt');
    expect(adopt.body.host).toMatchObject({ id: 'spark-2', managed: true });
    expect((await call(tokens.ops, 'POST', '/api/v1/hosts/spark-9/adopt')).status).toBe(404);
    const adopted = await c.ledger.history('host', 'spark-2');
    expect(adopted.at(-1)).toMatchObject({ type: 'host.adopted', actor: 'api:ops' });
    expect((await call(tokens.ops, 'POST', '/api/v1/hosts/spark-2/clear-quarantine')).status).toBe(409);

    const d = await call(tokens.ops, 'POST', '/api/v1/deckard/start', {});
    expect(d.status).toBe(201);
    expect(d.body.reservation).toMatchObject({ kind: 'deckard', priority: 90, targetHost: 'spark-1' });
    const again = await call(tokens.ops, 'POST', '/api/v1/deckard/start', {});
    expect(again.body.reservation.id).toBe(d.body.reservation.id);
    expect((await call(tokens.ops, 'POST', '/api/v1/deckard/start', { host: 'spark-2' })).status).toBe(400);

    const created = await call(tokens.ops, 'POST', '/api/v1/tokens', { name: 'ci-bot', scopes: ['develop'] });
    const list = await call(tokens.ops, 'GET', '/api/v1/tokens');
    expect(list.body.tokens.map((x: { name: string }) => x.name)).toContain('ci-bot');
    expect(list.text).not.toContain(created.body.token);
    expect((await call(created.body.token, 'GET', '/api/v1/whoami')).body.name).toBe('ci-bot');
    expect((await call(tokens.ops, 'DELETE', `/api/v1/tokens/${created.body.id}`)).status).toBe(200);
    expect((await call(created.body.token, 'GET', '/api/v1/whoami')).status).toBe(401);
    const stored = await c.ledger.db.select().from(t.apiTokens).where(eq(t.apiTokens.id, created.body.id));
    expect(stored[0]?.tokenHash).not.toBe(created.body.token);
  });
});
