import { and, eq } from 'drizzle-orm';
import { tokenLimitFor } from '../../core/config.ts';
import {
  endsDone,
  isNotRunOutcome,
  isReleasableStatus,
  type Outcome,
  type ReservationKind,
} from '../../core/model.ts';
import { isoTime } from '../../core/time.ts';
import { conflict, notFound, staleFencingToken } from '../errors.ts';
import { bindingLeases, type Tx } from './db.ts';
import { getHost, setHostPhase } from './host-phase.ts';
import { leasesOf, setLeaseStatus } from './lease-status.ts';
import { inlined } from './raw-rows.ts';
import { beginRelease } from './reservation-release.ts';
import { getReservation, transitionReservation } from './reservation-status.ts';
import type { LeaseRow, ReservationRow } from './rows.ts';
import * as t from './schema.ts';
import type { LedgerStore } from './store.ts';

// the lease commands are split by concept; callers keep reaching these here
export { leasesOf, setLeaseStatus } from './lease-status.ts';

/** Lease commands: fencing checks, status moves, renewal, confirmed release. */

const CI_KINDS: readonly ReservationKind[] = ['manual', 'merge', 'benchmark', 'background'];

/**
 * Verifies that `fencingToken` is the current binding lease of `hostId`; throws a 409
 * `stale_fencing_token` otherwise. Every agent command/report, preflight and release calls it.
 */
export async function requireCurrentLease(
  s: LedgerStore,
  tx: Tx | undefined,
  hostId: string,
  fencingToken: number,
): Promise<LeaseRow> {
  const rows = await (tx ?? s.db)
    .select()
    .from(t.leases)
    .where(and(eq(t.leases.hostId, hostId), bindingLeases));
  const lease = rows[0];
  if (!lease || lease.fencingToken !== fencingToken) {
    throw staleFencingToken(hostId, fencingToken, lease?.fencingToken ?? null);
  }
  return lease;
}

/** The lease a per-lease job token (stored as its SHA-256) was issued for, or null. */
export async function leaseByJobTokenHash(
  s: LedgerStore,
  tx: Tx | undefined,
  hash: string,
): Promise<LeaseRow | null> {
  const rows = await (tx ?? s.db).select().from(t.leases).where(eq(t.leases.jobTokenHash, hash));
  return rows[0] ?? null;
}

/** Agent progress and evidence on a lease (each field set by a report carrying the current token). */
export type LeaseProgress = Partial<
  Pick<
    LeaseRow,
    'preparedAt' | 'runnerStartedAt' | 'runnerExitedAt' | 'exitCode' | 'evidenceJson' | 'jobTokenHash'
  >
>;

export async function setLeaseProgress(tx: Tx, lease: LeaseRow, patch: LeaseProgress): Promise<void> {
  await tx.update(t.leases).set(patch).where(eq(t.leases.id, lease.id));
  Object.assign(lease, patch);
}

/**
 * THE renewal rule for CI work: a heartbeat of the host renews its live CI leases to
 * `now + ciLeaseTtlS` (never shortens one, never revives an expired one: old work may still run).
 * Development leases are renewed only by their requester ({@link renewDevelopmentLease}).
 */
export async function renewOnHeartbeat(s: LedgerStore, tx: Tx, now: number, hostId: string): Promise<void> {
  // one statement on the heartbeat's hot path: CI leases of this host that
  // are still current move their expiry to at least now + TTL; development leases are renewed
  // only by hand
  await s.store
    .raw(tx)
    .execute(
      `UPDATE leases SET expires_at = MAX(expires_at, ?) WHERE host_id = ? AND status = 'active' AND expires_at > ? AND reservation_id IN (SELECT id FROM reservations WHERE kind IN (${inlined(CI_KINDS)}))`,
      [now + s.config.timings.ciLeaseTtlS * 1000, hostId, now],
    );
}

/**
 * A requester renews a development lease by hand: up to `ttlS` from now, capped at
 * `devLeaseMaxTtlS` from grant. An expired lease is never renewed (old work may still run).
 */
export function renewDevelopmentLease(
  s: LedgerStore,
  id: string,
  ttlS: number | undefined,
  actor: string,
): Promise<void> {
  const { devLeaseMaxTtlS, devLeaseDefaultTtlS } = s.config.timings;
  return s.write(async (tx, now, changed) => {
    const r = await getReservation(s, tx, id);
    if (!r) throw notFound(`reservation ${id}`);
    if (r.kind !== 'development') {
      throw conflict('not_renewable', `${id} is ${r.kind} work; only development leases are renewed by hand`);
    }
    if (!isReleasableStatus(r.status)) {
      throw conflict(
        'not_active',
        `${id} is ${r.status}; only an active lease can be renewed${r.status === 'queued' ? ' (it has not been granted yet)' : ''}`,
      );
    }
    const leases = (await leasesOf(s, tx, id)).filter((l) => l.status !== 'released');
    const expired = leases.find((l) => l.status !== 'active' || l.expiresAt <= now);
    if (expired) {
      throw conflict(
        'lease_expired',
        `the lease on ${expired.hostId} already expired; an expired lease is never renewed (reserve again)`,
      );
    }
    const ttlMs = (ttlS ?? r.ttlS ?? devLeaseDefaultTtlS) * 1000;
    // the requesting token's maxTtlS bounds renewals too, not only the first grant
    const maxS = r.requester.startsWith('api:')
      ? tokenLimitFor(s.config, r.requester.slice(4)).maxTtlS
      : devLeaseMaxTtlS;
    for (const l of leases) {
      const cap = l.grantedAt + maxS * 1000;
      const next = Math.min(now + ttlMs, cap);
      if (next <= l.expiresAt) {
        throw conflict(
          'renew_limit',
          `the lease on ${l.hostId} already runs to ${isoTime(l.expiresAt)}, the most a development lease may hold (${maxS}s from grant${maxS < devLeaseMaxTtlS ? ', tokenLimits maxTtlS of its token' : ''}); release and reserve again`,
        );
      }
      await tx.update(t.leases).set({ expiresAt: next }).where(eq(t.leases.id, l.id));
      await s.record(tx, now, {
        subjectType: 'lease',
        subjectId: l.id,
        type: 'lease.renewed',
        fromState: 'active',
        toState: 'active',
        cause: `renewed until ${isoTime(next)}`,
        actor,
        data: { reservationId: id, hostId: l.hostId, expiresAt: next },
      });
      changed.add(`host:${l.hostId}`);
    }
  });
}

/**
 * The agent confirmed that the work under `fencingToken` is gone and the host is clean.
 * Frees the host (to `idle`, or `restoring` when its home service must come back) and ends the
 * reservation once every lease of it is released (rule 7).
 */
export function confirmReleased(
  s: LedgerStore,
  hostId: string,
  fencingToken: number,
  actor: string,
  /**
   * `processesRemain`: GPU processes outlived the lease (host release-required, lease kept).
   * `quarantine`: the lease ends, but the host goes to `quarantined` with this note instead of
   * idle (the agent could not clean up, ADR 0156).
   */
  opts: { processesRemain?: boolean; quarantine?: string } = {},
  tx?: Tx,
): Promise<{ reservation: ReservationRow; lease: LeaseRow }> {
  return s.within(tx, async (tx, now, changed) => {
    const lease = await requireCurrentLease(s, tx, hostId, fencingToken);
    const r = (await getReservation(s, tx, lease.reservationId))!;
    const host = (await getHost(s, tx, hostId))!;
    if (opts.processesRemain) {
      await setHostPhase(s, tx, now, host, 'release-required', 'processes remain after cleanup', actor);
      changed.add(`host:${hostId}`);
      return { reservation: r, lease };
    }
    if (lease.status !== 'releasing') {
      // the agent may report termination on its own (runner exited); start the release first
      if (isReleasableStatus(r.status)) {
        await beginRelease(
          s,
          r.id,
          (r.outcome as Outcome | null) ?? 'released',
          'agent reported termination',
          actor,
          tx,
        );
        Object.assign(
          lease,
          (await leasesOf(s, tx, r.id)).find((l) => l.id === lease.id),
        );
        Object.assign(r, await getReservation(s, tx, r.id));
        Object.assign(host, await getHost(s, tx, hostId));
      } else {
        await setLeaseStatus(s, tx, now, lease, 'releasing', 'agent reported termination', actor);
      }
    }
    await setLeaseStatus(s, tx, now, lease, 'released', 'agent confirmed termination and cleanup', actor);
    if (host.phase === 'release-required') {
      await setHostPhase(s, tx, now, host, 'cleaning', 'processes gone', actor);
    }
    if (host.phase === 'allocated')
      await setHostPhase(s, tx, now, host, 'cleaning', 'cleanup confirmed', actor);
    if (opts.quarantine) {
      await tx
        .update(t.hosts)
        .set({ note: opts.quarantine.slice(0, 500) })
        .where(eq(t.hosts.id, hostId));
      await setHostPhase(s, tx, now, host, 'quarantined', opts.quarantine.slice(0, 500), actor);
    } else {
      await setHostPhase(
        s,
        tx,
        now,
        host,
        host.homeService ? 'restoring' : 'idle',
        host.homeService ? `cleaned; restoring ${host.homeService}` : 'cleaned',
        actor,
      );
    }
    const remaining = (await leasesOf(s, tx, r.id)).filter((l) => l.status !== 'released');
    if (remaining.length === 0 && r.status === 'releasing') {
      const failed = !endsDone(r.outcome);
      // a terminal transition stores its cause as the reason; a failed release begun with its cause
      // shown (`beginRelease` `showCause`) keeps it: a lost pair keeps the seed's words ("spark-1
      // lost contact …"), which its check run's title is made of, a task dstack never started keeps
      // what did not start where (ADR 0120). The grant clears the reason, so no wait reason is left.
      const cause = !failed
        ? 'released; termination confirmed on every host'
        : (r.reason ?? `ended: ${r.outcome}`);
      // work that never ran keeps saying so in the public history (ADR 0177)
      await transitionReservation(
        s,
        tx,
        now,
        r,
        failed ? 'failed' : 'done',
        cause,
        actor,
        {},
        isNotRunOutcome(r.outcome) ? { outcome: r.outcome } : undefined,
      );
    }
    changed.add('reservation').add(`host:${hostId}`);
    return { reservation: r, lease };
  });
}
