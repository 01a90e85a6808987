import { and, eq } from 'drizzle-orm';
import type { HostFacts } from '../../core/model.ts';
import { conflict, notFound, staleFencingToken } from '../errors.ts';
import { bindingLeases, type Tx } from './db.ts';
import { getHost, setHostPhase } from './host-phase.ts';
import { confirmReleased, renewOnHeartbeat } from './leases.ts';
import { hostById } from './raw-rows.ts';
import { transitionReservation } from './reservation-status.ts';
import type { HostRow } from './rows.ts';
import * as t from './schema.ts';
import type { LedgerStore } from './store.ts';

// the host commands are split by concept; callers keep reaching these here
export { getHost, setHostPhase } from './host-phase.ts';

/** Host lifecycle commands: registration from config, adoption, heartbeats, restore, quarantine. */

/** Makes the ledger's host rows match the config (new hosts start unadopted). */
export async function syncHosts(s: LedgerStore): Promise<void> {
  await s.write(async (tx, now) => {
    const existing = new Map((await tx.select().from(t.hosts)).map((h) => [h.id, h]));
    for (const h of s.config.hosts) {
      const row = existing.get(h.id);
      if (!row) {
        await tx.insert(t.hosts).values({
          id: h.id,
          pool: h.pool,
          gpus: h.gpus,
          homeService: h.homeService,
          managed: false,
          phase: 'idle',
          updatedAt: now,
        });
        await s.record(tx, now, {
          subjectType: 'host',
          subjectId: h.id,
          type: 'host.registered',
          toState: 'unknown',
          cause: 'listed in configuration',
          actor: 'controller',
        });
      } else if (row.pool !== h.pool || row.gpus !== h.gpus || row.homeService !== h.homeService) {
        await tx
          .update(t.hosts)
          .set({ pool: h.pool, gpus: h.gpus, homeService: h.homeService, updatedAt: now })
          .where(eq(t.hosts.id, h.id));
      }
    }
  });
}

/** Adopt (or un-adopt) a host: only adopted hosts are ever granted (rule 2). */
export function setManaged(s: LedgerStore, id: string, managed: boolean, actor: string): Promise<HostRow> {
  return s.write(async (tx, now, changed) => {
    const host = await getHost(s, tx, id);
    if (!host) throw notFound(`host ${id}`);
    if (host.managed === managed) return host;
    await tx.update(t.hosts).set({ managed, updatedAt: now }).where(eq(t.hosts.id, id));
    await s.record(tx, now, {
      subjectType: 'host',
      subjectId: id,
      type: managed ? 'host.adopted' : 'host.unadopted',
      cause: managed ? 'operator adopted the host' : 'operator removed the host from scheduling',
      actor,
    });
    changed.add('reservation').add(`host:${id}`);
    return { ...host, managed };
  });
}

/**
 * Stores a heartbeat: facts, freshness, the home service's serving state, and renews the TTL
 * of CI leases on the host (docs/architecture.md: a lease's TTL is renewed by heartbeats).
 */
export async function recordHeartbeat(
  s: LedgerStore,
  hostId: string,
  facts: HostFacts,
  actor = `agent:${hostId}`,
): Promise<void> {
  await s.write(async (tx, now, changed) => {
    // raw SQL on kept statements: every agent sends one every 10 s
    const q = s.store.raw(tx);
    const host = await hostById(q, hostId);
    if (!host) throw notFound(`host ${hostId}`);
    const wasFresh =
      host.lastHeartbeatAt != null && now - host.lastHeartbeatAt <= s.config.timings.offlineAfterS * 1000;
    await q.execute('UPDATE hosts SET facts_json = ?, last_heartbeat_at = ?, updated_at = ? WHERE id = ?', [
      JSON.stringify(facts),
      now,
      now,
      hostId,
    ]);
    if (!wasFresh) {
      await s.record(tx, now, {
        subjectType: 'host',
        subjectId: hostId,
        type: 'host.online',
        fromState: 'offline',
        cause: 'heartbeat received',
        actor,
      });
    }
    if (host.homeService) {
      if (host.phase === 'idle' && facts.serviceState === 'serving') {
        await setHostPhase(s, tx, now, host, 'service', `${host.homeService} reported serving`, actor);
      } else if (
        host.phase === 'service' &&
        (facts.serviceState === 'stopped' || facts.serviceState === 'failed')
      ) {
        await setHostPhase(
          s,
          tx,
          now,
          host,
          'idle',
          `${host.homeService} reported ${facts.serviceState}`,
          actor,
        );
      }
    }
    await renewOnHeartbeat(s, tx, now, hostId);
    changed.add('reservation').add(`host:${hostId}`);
  });
}

/** The home service came back healthy (or failed to): restoring → service / retry / quarantined. */
export function recordRestore(
  s: LedgerStore,
  hostId: string,
  ok: boolean,
  detail: string,
  actor: string,
): Promise<HostRow> {
  return s.write(async (tx, now, changed) => {
    const host = await getHost(s, tx, hostId);
    if (!host) throw notFound(`host ${hostId}`);
    if (host.phase !== 'restoring') {
      throw conflict('not_restoring', `host ${hostId} is ${host.phase}, not restoring`);
    }
    changed.add(`host:${hostId}`).add('reservation');
    if (ok) {
      // the note said why it was restoring (a failed attempt, a service that stopped): over now
      await tx
        .update(t.hosts)
        .set({ restoreAttempts: 0, restoreNotBefore: null, note: null })
        .where(eq(t.hosts.id, hostId));
      await setHostPhase(s, tx, now, host, 'service', `${host.homeService} model-ready health passed`, actor);
      return host;
    }
    const attempts = host.restoreAttempts + 1;
    const { restoreRetries, restoreBackoffS } = s.config.timings;
    if (attempts > restoreRetries) {
      // the reason the host is not ready, as `sparkctl fleet` shows it to operators
      await tx
        .update(t.hosts)
        .set({
          restoreAttempts: attempts,
          note: `${host.homeService} restore failed ${attempts} times: ${detail}`.slice(0, 500),
        })
        .where(eq(t.hosts.id, hostId));
      await setHostPhase(
        s,
        tx,
        now,
        host,
        'quarantined',
        `restore failed ${attempts} times: ${detail}`.slice(0, 500),
        actor,
      );
      // an explicit start that drove this restore ends with it
      const starts = await tx
        .select()
        .from(t.reservations)
        .where(
          and(
            eq(t.reservations.kind, 'deckard'),
            eq(t.reservations.targetHost, hostId),
            eq(t.reservations.status, 'queued'),
          ),
        );
      for (const r of starts) {
        await transitionReservation(
          s,
          tx,
          now,
          r,
          'failed',
          `${host.homeService} restore failed ${attempts} times; ${hostId} quarantined until an operator clears it`,
          actor,
          { outcome: 'restore_failed' },
        );
      }
      await s.record(tx, now, {
        subjectType: 'host',
        subjectId: hostId,
        type: 'alert.restore_failed',
        cause: `${host.homeService} restore failed after ${attempts} attempts; host quarantined`,
        actor,
        data: { attempts, detail: detail.slice(0, 2000) },
      });
      return host;
    }
    const notBefore = now + restoreBackoffS * 1000 * 2 ** (attempts - 1);
    await tx
      .update(t.hosts)
      .set({ restoreAttempts: attempts, restoreNotBefore: notBefore, note: detail.slice(0, 500) })
      .where(eq(t.hosts.id, hostId));
    await s.record(tx, now, {
      subjectType: 'host',
      subjectId: hostId,
      type: 'host.restore_retry',
      fromState: 'restoring',
      toState: 'restoring',
      cause: `restore attempt ${attempts} failed; retry after backoff`,
      actor,
      data: { attempts, notBefore },
    });
    return host;
  });
}

/**
 * The agent's word that the host's home service stopped by itself outside any lease (ADR 0175):
 * its process is gone, or its model-ready check kept failing. The host goes `restoring` at once —
 * never granted while it is (docs/architecture.md rule 2) — and its agent restarts the service through the
 * restore path: the model-ready gate, `timings.restoreRetries` retries with backoff, then
 * `quarantined` with the reason and `alert.restore_failed`. One `alert.service_down` event records
 * the stop (the retries record their own). Changes nothing, and says why, when a lease binds the
 * host (the service is the lease's until its release restores it), when the host is not adopted (an
 * operator took it out: maintenance), or when it is not serving or idle (already restoring,
 * quarantined, release-required). The fencing token must be the host's current one, as a
 * `restored` report's: a report that crossed a new grant is stale.
 */
export function recordServiceDown(
  s: LedgerStore,
  hostId: string,
  report: { fencingToken: number; reason: string },
  actor: string,
): Promise<string> {
  return s.write(async (tx, now, changed) => {
    const host = await getHost(s, tx, hostId);
    if (!host) throw conflict('unknown_host', `host ${hostId} is not in the ledger`);
    const svc = host.homeService;
    if (!svc) throw conflict('no_home_service', `host ${hostId} has no home service in the configuration`);
    const bound = (
      await tx
        .select()
        .from(t.leases)
        .where(and(eq(t.leases.hostId, hostId), bindingLeases))
    )[0];
    if (bound) {
      throw conflict(
        'lease_bound',
        `${hostId} is bound to lease ${bound.id}: its ${svc} is the lease's until the release restores it`,
      );
    }
    if (host.fencingToken !== report.fencingToken)
      throw staleFencingToken(hostId, report.fencingToken, host.fencingToken);
    if (!host.managed) return `${hostId} is not adopted: ${svc} left alone`;
    if (host.phase !== 'service' && host.phase !== 'idle') return `${hostId} is ${host.phase}: nothing to do`;
    const reason = report.reason.slice(0, 1000);
    await tx
      .update(t.hosts)
      .set({
        restoreAttempts: 0,
        restoreNotBefore: null,
        note: `${svc} stopped outside any lease: ${reason}`.slice(0, 500),
      })
      .where(eq(t.hosts.id, hostId));
    await setHostPhase(
      s,
      tx,
      now,
      host,
      'restoring',
      `${svc} stopped outside any lease; restarting it`,
      actor,
    );
    await s.record(tx, now, {
      subjectType: 'host',
      subjectId: hostId,
      type: 'alert.service_down',
      cause:
        `${svc} on ${hostId} stopped outside any lease (${reason}); restarting it under the restore policy`.slice(
          0,
          500,
        ),
      actor,
      data: { reason },
    });
    changed.add(`host:${hostId}`).add('reservation');
    return `${hostId} restoring ${svc}`;
  });
}

/**
 * An agent's `restored` report: the fencing token only moves on a grant and a restoring host is
 * never granted, so the host's current token is the one the report must carry.
 */
export async function applyRestoredReport(
  s: LedgerStore,
  hostId: string,
  report: { fencingToken: number; ok: boolean; detail: string },
  actor: string,
): Promise<HostRow> {
  const host = await getHost(s, undefined, hostId);
  if (!host) throw conflict('unknown_host', `host ${hostId} is not in the ledger`);
  if (host.fencingToken !== report.fencingToken) {
    throw conflict(
      'stale_fencing_token',
      `fencing token ${report.fencingToken} for ${hostId} is not current (current ${host.fencingToken})`,
    );
  }
  return recordRestore(s, hostId, report.ok, report.detail, actor);
}

/**
 * The agent could not clean up after a lease within its bounded time (ADR 0156: a tree that will
 * not go, a process of the lease that will not die). The lease ends — its work is over and a trap
 * must not hold the host and the queue behind it — but the host is quarantined with the reason
 * until an operator clears it, and an `alert.cleanup_failed` fires
 * (`spark_ledger_events_total{type="alert.cleanup_failed"}`, `spark_host_state{state="quarantined"}`).
 * The fencing token must be the host's current lease's.
 */
export async function quarantineAfterFailedCleanup(
  s: LedgerStore,
  tx: Tx,
  a: { hostId: string; fencingToken: number; reason: string; actor: string },
): Promise<string> {
  const note = `cleanup failed: ${a.reason}`.slice(0, 500);
  const { lease, reservation } = await confirmReleased(
    s,
    a.hostId,
    a.fencingToken,
    a.actor,
    { quarantine: note },
    tx,
  );
  await s.record(tx, s.clock(), {
    subjectType: 'host',
    subjectId: a.hostId,
    type: 'alert.cleanup_failed',
    cause: `${a.hostId} quarantined: its agent could not clean up after ${lease.id}: ${a.reason}`.slice(
      0,
      500,
    ),
    actor: a.actor,
    data: { leaseId: lease.id, reservationId: reservation.id, reason: a.reason.slice(0, 1000) },
  });
  return `${a.hostId} quarantined (cleanup failed); reservation ${reservation.id} ${reservation.status}`;
}

/** Operator clears quarantine; the host restores its service (or goes idle) before any grant. */
export function clearQuarantine(s: LedgerStore, hostId: string, actor: string): Promise<HostRow> {
  return s.write(async (tx, now, changed) => {
    const host = await getHost(s, tx, hostId);
    if (!host) throw notFound(`host ${hostId}`);
    if (host.phase !== 'quarantined') throw conflict('not_quarantined', `host ${hostId} is ${host.phase}`);
    await tx
      .update(t.hosts)
      .set({ restoreAttempts: 0, restoreNotBefore: null, note: null })
      .where(eq(t.hosts.id, hostId));
    await setHostPhase(
      s,
      tx,
      now,
      host,
      host.homeService ? 'restoring' : 'idle',
      'operator cleared quarantine',
      actor,
    );
    changed.add(`host:${hostId}`).add('reservation');
    return host;
  });
}
