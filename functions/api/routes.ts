import { and, asc, eq, inArray, or } from 'drizzle-orm';
import type { Hono } from 'hono';
import type { ReservationStatus } from '../../core/model.ts';
import {
  CreateReservationBody,
  CreateTokenBody,
  DeckardStartBody,
  RenewBody,
  type ReservationInfo,
  TerminateBody,
} from '../../core/protocol/api.ts';
import type { AppContext } from '../app.ts';
import {
  type ApiPrincipal,
  type AuthEnv,
  createApiToken,
  requireScope,
  revokeApiToken,
} from '../auth/tokens.ts';
import { ApiError, badRequest, conflict, notFound } from '../errors.ts';
import type { ReservationRow } from '../ledger/ledger.ts';
import * as t from '../ledger/schema.ts';
import { toEventView } from '../views.ts';
import { createAuditor } from './audit.ts';
import { parseBody } from './body.ts';
import {
  describeReservation,
  loadLiveQueue,
  loadOne,
  loadReservations,
  mayAct,
  ownerTokenOf,
} from './describe.ts';

const actorOf = (p: ApiPrincipal) => `api:${p.name}`;
const iso = (ms: number | null) => (ms == null ? null : new Date(ms).toISOString());
const ACTIVE: ReservationStatus[] = ['allocated', 'preparing', 'running', 'releasing'];

function forbiddenOwner(id: string): ApiError {
  return new ApiError(
    403,
    'forbidden',
    `reservation ${id} belongs to another token; only its requester or an operate token may change it`,
  );
}

/**
 * Mounts the operator/user API. Every change runs in one ledger transaction whose events carry
 * the calling token's name as actor; reads and refusals are audited by {@link createAuditor}.
 */
export function mountApiRoutes(root: Hono<AuthEnv>, ctx: AppContext): void {
  const { ledger } = ctx;
  const api = root.basePath('/api/v1');
  const audit = createAuditor(ledger, ctx.log);

  async function info(id: string, p: ApiPrincipal): Promise<ReservationInfo> {
    const one = await loadOne(ledger, id);
    if (!one) throw notFound(`reservation ${id}`);
    return describeReservation(ledger, one.row, one.leases, p, await loadLiveQueue(ledger));
  }

  async function requireMine(id: string, p: ApiPrincipal): Promise<ReservationRow> {
    const r = await ledger.getReservation(undefined, id);
    if (!r) throw notFound(`reservation ${id}`);
    if (!mayAct(p, r)) throw forbiddenOwner(id);
    return r;
  }

  api.get('/whoami', audit, requireScope('develop'), (c) => {
    const p = c.get('principal');
    return c.json({ tokenId: p.tokenId, name: p.name, scopes: p.scopes });
  });

  // ------------------------------------------------------------ reservations

  api.post('/reservations', audit, requireScope('develop'), async (c) => {
    const p = c.get('principal');
    const body = await parseBody(c, CreateReservationBody);
    const { timings } = ledger.config;
    if (body.topology === 'pair' && body.host) {
      throw badRequest('--host names one host but a pair takes two: drop --host or --pair');
    }
    if (body.ttlS != null && body.ttlS > timings.devLeaseMaxTtlS) {
      throw badRequest(
        `ttl ${body.ttlS}s exceeds the development maximum of ${timings.devLeaseMaxTtlS}s; ask for less and renew later`,
      );
    }
    const row = await ledger.write(async (tx, _now, changed) => {
      const r = await ledger.createReservation(
        {
          kind: 'development',
          topology: body.topology,
          targetHost: body.host ?? null,
          requester: actorOf(p),
          ttlS: body.ttlS ?? timings.devLeaseDefaultTtlS,
          meta: { source: 'api', tokenId: p.tokenId },
        },
        actorOf(p),
        tx,
      );
      changed.add('reservation');
      return r;
    });
    // one pass before answering so the reply already says where the request stands
    await ctx.loop.runNow();
    return c.json({ reservation: await info(row.id, p) }, 201);
  });

  api.get('/reservations', audit, requireScope('develop'), async (c) => {
    const p = c.get('principal');
    const status = c.req.query('status') ?? 'open';
    const groups: Record<string, ReservationStatus[] | undefined> = {
      open: ['queued', ...ACTIVE],
      queued: ['queued'],
      active: ACTIVE,
      all: undefined,
    };
    if (!(status in groups)) {
      throw badRequest(`status must be one of ${Object.keys(groups).join(', ')} (got "${status}")`);
    }
    const mine = ['1', 'true', 'yes'].includes(c.req.query('mine') ?? '');
    const statuses = groups[status];
    const rows = await loadReservations(ledger, { ...(statuses ? { statuses } : {}), limit: 500 });
    const live = await loadLiveQueue(ledger);
    const list = rows
      .map(({ row, leases }) => describeReservation(ledger, row, leases, p, live))
      .filter((r) => !mine || r.mine);
    return c.json({ reservations: list });
  });

  api.get('/reservations/:id', audit, requireScope('develop'), async (c) =>
    c.json({ reservation: await info(c.req.param('id'), c.get('principal')) }),
  );

  api.get('/reservations/:id/history', audit, requireScope('develop'), async (c) => {
    const id = c.req.param('id');
    const one = await loadOne(ledger, id);
    if (!one) throw notFound(`reservation ${id}`);
    const leaseIds = one.leases.map((l) => l.id);
    const rows = await ledger.db
      .select()
      .from(t.events)
      .where(
        or(
          and(eq(t.events.subjectType, 'reservation'), eq(t.events.subjectId, id)),
          leaseIds.length
            ? and(eq(t.events.subjectType, 'lease'), inArray(t.events.subjectId, leaseIds))
            : undefined,
        ),
      )
      .orderBy(asc(t.events.id))
      .limit(1000);
    return c.json({ reservationId: id, events: rows.map((r) => toEventView(r, { publicView: false })) });
  });

  api.post('/reservations/:id/renew', audit, requireScope('develop'), async (c) => {
    const p = c.get('principal');
    const id = c.req.param('id');
    const body = await parseBody(c, RenewBody);
    await requireMine(id, p);
    const { devLeaseMaxTtlS } = ledger.config.timings;
    await ledger.write(async (tx, now, changed) => {
      const r = await ledger.getReservation(tx, id);
      if (!r) throw notFound(`reservation ${id}`);
      if (r.kind !== 'development') {
        throw conflict(
          'not_renewable',
          `${id} is ${r.kind} work; only development leases are renewed by hand`,
        );
      }
      if (!['allocated', 'preparing', 'running'].includes(r.status)) {
        throw conflict(
          'not_active',
          `${id} is ${r.status}; only an active lease can be renewed${r.status === 'queued' ? ' (it has not been granted yet)' : ''}`,
        );
      }
      const leases = (await ledger.leasesOf(tx, id)).filter((l) => l.status !== 'released');
      const expired = leases.find((l) => l.status !== 'active' || l.expiresAt <= now);
      if (expired) {
        throw conflict(
          'lease_expired',
          `the lease on ${expired.hostId} already expired; an expired lease is never renewed (reserve again)`,
        );
      }
      const ttlMs = (body.ttlS ?? r.ttlS ?? ledger.config.timings.devLeaseDefaultTtlS) * 1000;
      for (const l of leases) {
        const cap = l.grantedAt + devLeaseMaxTtlS * 1000;
        const next = Math.min(now + ttlMs, cap);
        if (next <= l.expiresAt) {
          throw conflict(
            'renew_limit',
            `the lease on ${l.hostId} already runs to ${iso(l.expiresAt)}, the most a development lease may hold (${devLeaseMaxTtlS}s from grant); release and reserve again`,
          );
        }
        await tx.update(t.leases).set({ expiresAt: next }).where(eq(t.leases.id, l.id));
        await ledger.record(tx, now, {
          subjectType: 'lease',
          subjectId: l.id,
          type: 'lease.renewed',
          fromState: 'active',
          toState: 'active',
          cause: `renewed until ${iso(next)}`,
          actor: actorOf(p),
          data: { reservationId: id, hostId: l.hostId, expiresAt: next },
        });
        changed.add(`host:${l.hostId}`);
      }
    });
    return c.json({ reservation: await info(id, p) });
  });

  api.post('/reservations/:id/release', audit, requireScope('develop'), async (c) => {
    const p = c.get('principal');
    const id = c.req.param('id');
    const r = await ledger.getReservation(undefined, id);
    if (!r) throw notFound(`reservation ${id}`);
    // priority is non-preemptive (DESIGN.md rule 1): ending someone else's active work is the
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
    await ledger.write(async (tx, _now, changed) => {
      await ledger.beginRelease(id, 'released', `released by ${actorOf(p)}`, actorOf(p), tx);
      changed.add('reservation');
      for (const l of await ledger.leasesOf(tx, id)) changed.add(`host:${l.hostId}`);
    });
    return c.json({ reservation: await info(id, p) });
  });

  api.post('/reservations/:id/cancel', audit, requireScope('develop'), async (c) => {
    const p = c.get('principal');
    const id = c.req.param('id');
    await requireMine(id, p);
    await ledger.write(async (tx, _now, changed) => {
      await ledger.cancelReservation(id, actorOf(p), `cancelled by ${actorOf(p)}`, tx);
      changed.add('reservation');
    });
    return c.json({ reservation: await info(id, p) });
  });

  api.post('/reservations/:id/recover', audit, requireScope('operate'), async (c) => {
    const p = c.get('principal');
    const id = c.req.param('id');
    const result = await ledger.write(async (tx, now, changed) => {
      const r = await ledger.getReservation(tx, id);
      if (!r) throw notFound(`reservation ${id}`);
      const leases = await ledger.leasesOf(tx, id);
      const live = leases.filter((l) => l.status === 'active' && l.expiresAt > now);
      if (live.length) {
        throw conflict(
          'live_lease',
          `${id} holds a live lease on ${live.map((l) => l.hostId).join(', ')} (expires ${iso(
            Math.min(...live.map((l) => l.expiresAt)),
          )}); recovery is for expired or stuck work — release it instead (sparkctl release ${id})`,
        );
      }
      const awaiting = () => leases.filter((l) => l.status !== 'released').map((l) => l.hostId);
      const note = async (action: string, message: string) => {
        await ledger.record(tx, now, {
          subjectType: 'reservation',
          subjectId: id,
          type: 'reservation.recovery',
          fromState: r.status,
          toState: r.status,
          cause: message,
          actor: actorOf(p),
          data: { action },
        });
      };
      if (r.status === 'queued') {
        await ledger.cancelReservation(id, actorOf(p), 'operator recovery: cancelled while queued', tx);
        changed.add('reservation');
        return { action: 'cancelled' as const, awaitingHosts: [], message: `${id} was queued; cancelled` };
      }
      if (['allocated', 'preparing', 'running'].includes(r.status)) {
        await ledger.beginRelease(
          id,
          'recovered',
          'operator recovery: lease no longer live; agent asked to stop what it owns',
          actorOf(p),
          tx,
        );
        const hosts = (await ledger.leasesOf(tx, id))
          .filter((l) => l.status !== 'released')
          .map((l) => l.hostId);
        for (const h of hosts) changed.add(`host:${h}`);
        changed.add('reservation');
        const message = `${id} marked for release; hosts ${hosts.join(', ')} are freed only after their agent confirms termination`;
        await note('release-requested', message);
        return { action: 'release-requested' as const, awaitingHosts: hosts, message };
      }
      if (r.status === 'releasing') {
        const hosts = awaiting();
        const message = `${id} is already releasing; waiting for the agent on ${hosts.join(', ') || 'no host'} to confirm termination`;
        await note('awaiting-agent', message);
        return { action: 'awaiting-agent' as const, awaitingHosts: hosts, message };
      }
      return {
        action: 'already-ended' as const,
        awaitingHosts: [],
        message: `${id} already ended (${r.status}); nothing to recover`,
      };
    });
    return c.json({ reservation: await info(id, p), ...result });
  });

  api.post('/reservations/:id/terminate', audit, requireScope('emergency'), async (c) => {
    const p = c.get('principal');
    const id = c.req.param('id');
    const { reason } = await parseBody(c, TerminateBody);
    await ledger.write(async (tx, now, changed) => {
      const r = await ledger.getReservation(tx, id);
      if (!r) throw notFound(`reservation ${id}`);
      const from = r.status;
      if (r.status === 'queued') {
        await ledger.cancelReservation(id, actorOf(p), `emergency: ${reason}`, tx);
      } else if (['allocated', 'preparing', 'running'].includes(r.status)) {
        await ledger.beginRelease(id, 'terminated', `emergency terminate: ${reason}`, actorOf(p), tx);
      } else if (r.status !== 'releasing') {
        throw conflict('not_active', `${id} already ended (${r.status}); nothing to terminate`);
      }
      await ledger.record(tx, now, {
        subjectType: 'reservation',
        subjectId: id,
        type: 'alert.emergency_terminate',
        fromState: from,
        toState: from === 'queued' ? 'cancelled' : 'releasing',
        cause: `emergency terminate by ${actorOf(p)}: ${reason}`,
        actor: actorOf(p),
      });
      changed.add('reservation');
      for (const l of await ledger.leasesOf(tx, id)) changed.add(`host:${l.hostId}`);
    });
    return c.json({ reservation: await info(id, p) });
  });

  // ------------------------------------------------------------ hosts and Deckard

  const hostBody = (h: { id: string; managed: boolean; phase: string }) => ({
    host: { id: h.id, managed: h.managed, phase: h.phase },
  });
  api.post('/hosts/:id/adopt', audit, requireScope('operate'), async (c) =>
    c.json(hostBody(await ledger.setManaged(c.req.param('id'), true, actorOf(c.get('principal'))))),
  );
  api.post('/hosts/:id/unadopt', audit, requireScope('operate'), async (c) =>
    c.json(hostBody(await ledger.setManaged(c.req.param('id'), false, actorOf(c.get('principal'))))),
  );
  api.post('/hosts/:id/clear-quarantine', audit, requireScope('operate'), async (c) => {
    const id = c.req.param('id');
    await ledger.clearQuarantine(id, actorOf(c.get('principal')));
    const h = await ledger.getHost(undefined, id);
    return c.json(hostBody(h!));
  });

  api.post('/deckard/start', audit, requireScope('operate'), async (c) => {
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
    const row = await ledger.write(async (tx, _now, changed) => {
      const open = await tx
        .select()
        .from(t.reservations)
        .where(
          and(
            eq(t.reservations.kind, 'deckard'),
            eq(t.reservations.targetHost, target.id),
            inArray(t.reservations.status, ['queued', ...ACTIVE]),
          ),
        );
      if (open[0]) return open[0];
      changed.add('reservation');
      return ledger.createReservation(
        {
          kind: 'deckard',
          topology: 'single',
          targetHost: target.id,
          requester: actorOf(p),
          meta: { source: 'api', tokenId: p.tokenId },
        },
        actorOf(p),
        tx,
      );
    });
    await ctx.loop.runNow();
    return c.json({ reservation: await info(row.id, p) }, 201);
  });

  // ------------------------------------------------------------ API tokens

  api.post('/tokens', audit, requireScope('operate'), async (c) => {
    const p = c.get('principal');
    const body = await parseBody(c, CreateTokenBody);
    // emergency is never implied by operate, so it cannot be minted by an operate-only token
    if (body.scopes.includes('emergency') && !p.scopes.includes('emergency')) {
      throw new ApiError(403, 'forbidden', 'only a token holding "emergency" may create an emergency token');
    }
    const created = await createApiToken(
      ledger,
      { name: body.name, scopes: [...new Set(body.scopes)] },
      actorOf(p),
    );
    return c.json(created, 201);
  });

  api.get('/tokens', audit, requireScope('operate'), async (c) => {
    const rows = await ledger.db.select().from(t.apiTokens).orderBy(asc(t.apiTokens.createdAt));
    return c.json({
      tokens: rows.map((r) => ({
        id: r.id,
        name: r.name,
        scopes: r.scopes.split(','),
        createdAt: iso(r.createdAt)!,
        revokedAt: iso(r.revokedAt),
        lastUsedAt: iso(r.lastUsedAt),
      })),
    });
  });

  api.delete('/tokens/:id', audit, requireScope('operate'), async (c) => {
    const id = c.req.param('id');
    await revokeApiToken(ledger, id, actorOf(c.get('principal')));
    return c.json({ id, revoked: true });
  });
}
