import { tokenLimitFor } from '../../core/config.ts';
import { ACTIVE_STATUSES, OPEN_STATUSES, type ReservationStatus } from '../../core/model.ts';
import {
  CreateReservationBody,
  CreateTokenBody,
  DeckardStartBody,
  RenewBody,
  type ReservationInfo,
  TerminateBody,
} from '../../core/protocol/api.ts';
import { isoTime } from '../../core/time.ts';
import type { AppContext } from '../app.ts';
import { type ApiPrincipal, createApiToken, revokeApiToken } from '../auth/tokens.ts';
import { ApiError, badRequest, conflict, notFound } from '../errors.ts';
import type { ReservationRow } from '../ledger/ledger.ts';
import { toEventView } from '../views.ts';
import { parseBody } from './body.ts';
import {
  describeReservation,
  loadLiveQueue,
  loadOne,
  loadReservations,
  mayAct,
  ownerTokenOf,
} from './describe.ts';
import type { OperatorApi } from './operator.ts';

const actorOf = (p: ApiPrincipal) => `api:${p.name}`;

function forbiddenOwner(id: string): ApiError {
  return new ApiError(
    403,
    'forbidden',
    `reservation ${id} belongs to another token; only its requester or an operate token may change it`,
  );
}

/**
 * Mounts the operator/user API. Every change runs in one ledger transaction whose events carry
 * the calling token's name as actor; reads and refusals are audited by the operator sub-app every route joins.
 */
export function mountApiRoutes(api: OperatorApi, ctx: AppContext): void {
  const { ledger } = ctx;

  async function info(id: string, p: ApiPrincipal): Promise<ReservationInfo> {
    const one = await loadOne(ledger, id);
    if (!one) throw notFound(`reservation ${id}`);
    return describeReservation(ledger, one.row, one.leases, p, await loadLiveQueue(ctx.services.views));
  }

  async function requireMine(id: string, p: ApiPrincipal): Promise<ReservationRow> {
    const r = await ledger.getReservation(undefined, id);
    if (!r) throw notFound(`reservation ${id}`);
    if (!mayAct(p, r)) throw forbiddenOwner(id);
    return r;
  }

  api.get('/whoami', 'develop', (c) => {
    const p = c.get('principal');
    return c.json({ tokenId: p.tokenId, name: p.name, scopes: p.scopes });
  });

  // ------------------------------------------------------------ reservations

  api.post('/reservations', 'develop', async (c) => {
    const p = c.get('principal');
    const body = await parseBody(c, CreateReservationBody);
    const { timings } = ledger.config;
    if (body.topology === 'pair' && body.host) {
      throw badRequest('--host names one host but a pair takes two: drop --host or --pair');
    }
    if (body.drill && !body.host)
      throw badRequest('a restore drill names the host whose service it lends (--host)');
    if (body.ttlS != null && body.ttlS > timings.devLeaseMaxTtlS) {
      throw badRequest(
        `ttl ${body.ttlS}s exceeds the development maximum of ${timings.devLeaseMaxTtlS}s; ask for less and renew later`,
      );
    }
    const limit = tokenLimitFor(ledger.config, p.name);
    const row = await ledger.api.createDevelopmentReservation(
      {
        kind: 'development',
        topology: body.topology,
        targetHost: body.host ?? null,
        requester: actorOf(p),
        ttlS: body.ttlS ?? Math.min(timings.devLeaseDefaultTtlS, limit.maxTtlS),
        meta: { source: 'api', tokenId: p.tokenId, ...(body.drill ? { drill: true } : {}) },
      },
      p.tokenId,
      limit,
      actorOf(p),
    );
    // one pass before answering so the reply already says where the request stands
    await ctx.loop.runNow();
    return c.json({ reservation: await info(row.id, p) }, 201);
  });

  api.get('/reservations', 'develop', async (c) => {
    const p = c.get('principal');
    const status = c.req.query('status') ?? 'open';
    const groups: Record<string, readonly ReservationStatus[] | undefined> = {
      open: OPEN_STATUSES,
      queued: ['queued'],
      active: ACTIVE_STATUSES,
      all: undefined,
    };
    if (!(status in groups)) {
      throw badRequest(`status must be one of ${Object.keys(groups).join(', ')} (got "${status}")`);
    }
    const mine = ['1', 'true', 'yes'].includes(c.req.query('mine') ?? '');
    const statuses = groups[status];
    const rows = await loadReservations(ledger, { ...(statuses ? { statuses } : {}), limit: 500 });
    const live = await loadLiveQueue(ctx.services.views);
    const list = rows
      .map(({ row, leases }) => describeReservation(ledger, row, leases, p, live))
      .filter((r) => !mine || r.mine);
    return c.json({ reservations: list });
  });

  api.get('/reservations/:id', 'develop', async (c) =>
    c.json({ reservation: await info(c.req.param('id'), c.get('principal')) }),
  );

  api.get('/reservations/:id/history', 'develop', async (c) => {
    const id = c.req.param('id');
    const one = await loadOne(ledger, id);
    if (!one) throw notFound(`reservation ${id}`);
    const rows = await ledger.api.reservationHistory(
      id,
      one.leases.map((l) => l.id),
    );
    return c.json({ reservationId: id, events: rows.map((r) => toEventView(r, { publicView: false })) });
  });

  api.post('/reservations/:id/renew', 'develop', async (c) => {
    const p = c.get('principal');
    const id = c.req.param('id');
    const body = await parseBody(c, RenewBody);
    await requireMine(id, p);
    await ledger.api.renewDevelopmentLease(id, body.ttlS, actorOf(p));
    return c.json({ reservation: await info(id, p) });
  });

  api.post('/reservations/:id/release', 'develop', async (c) => {
    const p = c.get('principal');
    const id = c.req.param('id');
    const r = await ledger.getReservation(undefined, id);
    if (!r) throw notFound(`reservation ${id}`);
    // priority is non-preemptive (docs/architecture.md rule 1): ending someone else's active work is the
    // separately authorized emergency operation, not a release, whatever the caller's scope
    if (ownerTokenOf(r) !== p.tokenId && r.status !== 'queued') {
      throw new ApiError(
        403,
        'forbidden',
        `${id} is not yours to release; ending someone else's active work is an emergency operation (sparkctl emergency terminate ${id} --reason …)`,
      );
    }
    if (r.status === 'queued') {
      throw conflict(
        'queued',
        `${id} is still queued and holds no host: cancel it instead (sparkctl cancel ${id})`,
      );
    }
    await ledger.beginRelease(id, 'released', `released by ${actorOf(p)}`, actorOf(p));
    return c.json({ reservation: await info(id, p) });
  });

  api.post('/reservations/:id/cancel', 'develop', async (c) => {
    const p = c.get('principal');
    const id = c.req.param('id');
    await requireMine(id, p);
    await ledger.cancelReservation(id, actorOf(p), `cancelled by ${actorOf(p)}`);
    return c.json({ reservation: await info(id, p) });
  });

  api.post('/reservations/:id/recover', 'operate', async (c) => {
    const p = c.get('principal');
    const id = c.req.param('id');
    const result = await ledger.api.recoverReservation(id, actorOf(p));
    return c.json({ reservation: await info(id, p), ...result });
  });

  api.post('/reservations/:id/terminate', 'emergency', async (c) => {
    const p = c.get('principal');
    const id = c.req.param('id');
    const { reason } = await parseBody(c, TerminateBody);
    await ledger.api.terminateReservation(id, reason, actorOf(p));
    return c.json({ reservation: await info(id, p) });
  });

  // ------------------------------------------------------------ hosts and Deckard

  const hostBody = (h: { id: string; managed: boolean; phase: string }) => ({
    host: { id: h.id, managed: h.managed, phase: h.phase },
  });
  api.post('/hosts/:id/adopt', 'operate', async (c) =>
    c.json(hostBody(await ledger.setManaged(c.req.param('id'), true, actorOf(c.get('principal'))))),
  );
  api.post('/hosts/:id/unadopt', 'operate', async (c) =>
    c.json(hostBody(await ledger.setManaged(c.req.param('id'), false, actorOf(c.get('principal'))))),
  );
  api.post('/hosts/:id/clear-quarantine', 'operate', async (c) => {
    const id = c.req.param('id');
    await ledger.clearQuarantine(id, actorOf(c.get('principal')));
    const h = await ledger.getHost(undefined, id);
    return c.json(hostBody(h!));
  });

  api.post('/deckard/start', 'operate', async (c) => {
    const p = c.get('principal');
    const body = await parseBody(c, DeckardStartBody);
    const hosts = ledger.config.hosts;
    const target = body.host
      ? hosts.find((h) => h.id === body.host)
      : (hosts.find((h) => h.homeService === 'deckard') ?? hosts.find((h) => h.homeService));
    if (!target) {
      throw badRequest(
        body.host ? `unknown host "${body.host}"` : 'no configured host has a home service (homeService)',
      );
    }
    if (!target.homeService) throw badRequest(`${target.id} has no home service to start`);
    const row = await ledger.api.requestServiceStart(target.id, actorOf(p), {
      source: 'api',
      tokenId: p.tokenId,
    });
    await ctx.loop.runNow();
    return c.json({ reservation: await info(row.id, p) }, 201);
  });

  // ------------------------------------------------------------ API tokens

  api.post('/tokens', 'operate', async (c) => {
    const p = c.get('principal');
    const body = await parseBody(c, CreateTokenBody);
    // emergency is never implied by operate, so it cannot be minted by an operate-only token
    if (body.scopes.includes('emergency') && !p.scopes.includes('emergency')) {
      throw new ApiError(403, 'forbidden', 'only a token holding "emergency" may create an emergency token');
    }
    const created = await createApiToken(
      ledger,
      { name: body.name, scopes: [...new Set(body.scopes)], expiresInS: body.expiresInS },
      actorOf(p),
    );
    return c.json(created, 201);
  });

  api.get('/tokens', 'operate', async (c) => {
    const rows = await ledger.api.listApiTokens();
    return c.json({
      tokens: rows.map((r) => ({
        id: r.id,
        name: r.name,
        scopes: r.scopes.split(','),
        createdAt: isoTime(r.createdAt),
        revokedAt: isoTime(r.revokedAt),
        lastUsedAt: isoTime(r.lastUsedAt),
        expiresAt: isoTime(r.expiresAt ?? null),
      })),
    });
  });

  api.delete('/tokens/:id', 'operate', async (c) => {
    const id = c.req.param('id');
    const p = c.get('principal');
    await revokeApiToken(ledger, id, actorOf(p), { mayRevokeEmergency: p.scopes.includes('emergency') });
    return c.json({ id, revoked: true });
  });
}
