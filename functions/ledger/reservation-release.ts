import { eq } from 'drizzle-orm';
import {
  endsDone,
  isActiveStatus,
  isNotRunOutcome,
  isReleasableStatus,
  type Outcome,
} from '../../core/model.ts';
import { isoTime } from '../../core/time.ts';
import { conflict, notFound } from '../errors.ts';
import type { Tx } from './db.ts';
import { getHost, setHostPhase } from './host-phase.ts';
import { leasesOf, setLeaseStatus } from './lease-status.ts';
import { getReservation, transitionReservation } from './reservation-status.ts';
import type { ReservationRow } from './rows.ts';
import * as t from './schema.ts';
import type { LedgerStore } from './store.ts';

/**
 * Ending reservations: cancelling queued work, starting a release, a lost lease, an operator's
 * recovery and termination, a foreign job stopped. One of the reservation command modules (split
 * by concept from `reservations.ts`, which re-exports them; docs/adr/0220-one-ledger-front-door.md).
 */

/**
 * Cancels queued work only; active work must be released (docs/architecture.md: cancelled only while
 * queued). The outcome is `cancelled`, whatever the request last waited on.
 */
export function cancelReservation(
  s: LedgerStore,
  id: string,
  actor: string,
  cause = 'cancelled by requester',
  tx?: Tx,
): Promise<ReservationRow> {
  return s.within(tx, async (tx, now, changed) => {
    const r = await getReservation(s, tx, id);
    if (!r) throw notFound(`reservation ${id}`);
    if (r.status !== 'queued') {
      throw conflict(
        'not_queued',
        `reservation ${id} is ${r.status}; only queued work can be cancelled${
          isActiveStatus(r.status) ? ' — release it instead' : ''
        }`,
      );
    }
    await transitionReservation(s, tx, now, r, 'cancelled', cause, actor, { outcome: 'cancelled' });
    changed.add('reservation');
    return r;
  });
}

/**
 * Starts releasing an active reservation: its leases go to `releasing` and its hosts to
 * `cleaning`. Hosts are freed only when the agent confirms cleanup ({@link confirmReleased}).
 * With `showCause` the cause also becomes the reservation's reason: its check run and the views
 * say why while it releases, and a failed release ends with it (a pair node lost, a task never
 * started, a foreign job, work withdrawn before dispatch) instead of `ended: <outcome>`.
 */
export function beginRelease(
  s: LedgerStore,
  id: string,
  outcome: Outcome,
  cause: string,
  actor: string,
  tx?: Tx,
  opts: { showCause?: boolean } = {},
): Promise<ReservationRow> {
  return s.within(tx, async (tx, now, changed) => {
    const r = await getReservation(s, tx, id);
    if (!r) throw notFound(`reservation ${id}`);
    if (r.status === 'releasing') return r;
    if (!isReleasableStatus(r.status)) {
      throw conflict('not_active', `reservation ${id} is ${r.status}; only active work can be released`);
    }
    // work that never ran says so in the history's public words too (ADR 0177)
    await transitionReservation(
      s,
      tx,
      now,
      r,
      'releasing',
      cause,
      actor,
      { outcome },
      isNotRunOutcome(outcome) ? { outcome } : undefined,
    );
    if (opts.showCause) {
      r.reason = cause.slice(0, 500);
      await tx.update(t.reservations).set({ reason: r.reason }).where(eq(t.reservations.id, id));
    }
    for (const lease of await leasesOf(s, tx, id)) {
      if (lease.status === 'active' || lease.status === 'expired') {
        await setLeaseStatus(s, tx, now, lease, 'releasing', cause, actor);
        const host = await getHost(s, tx, lease.hostId);
        if (host && host.phase === 'allocated') {
          await setHostPhase(s, tx, now, host, 'cleaning', `release of ${id}`, actor);
        }
        changed.add(`host:${lease.hostId}`);
      }
    }
    changed.add('reservation');
    return r;
  });
}

/**
 * A CI lease expired — its host stopped heartbeating, so nothing renewed it — before its runner or
 * task started (ADR 0177): nothing of the PR ran, and nothing of it can now. The work is released at
 * once with outcome `lease_lost`, its cause shown on the check. A host whose facts are stale stays
 * `release-required` (never inferred clean): its agent, once back, stops what it started for the
 * lease and confirms before the host is freed, as for a pair node that lost contact.
 */
export async function releaseLostLease(
  s: LedgerStore,
  tx: Tx,
  now: number,
  a: { r: ReservationRow; hostId: string; processesUnknown: boolean; actor: string },
): Promise<void> {
  const host = await getHost(s, tx, a.hostId);
  // `cleaning`: the other node of its pair expired first in the same pass and began the release
  if (host && a.processesUnknown && (host.phase === 'allocated' || host.phase === 'cleaning')) {
    await setHostPhase(
      s,
      tx,
      now,
      host,
      'release-required',
      'lease lost before its work started: the host must confirm cleanup before it is freed',
      a.actor,
    );
  }
  await beginRelease(
    s,
    a.r.id,
    'lease_lost',
    `the lease on ${a.hostId} was lost before its work started: no heartbeat renewed it within ${s.config.timings.ciLeaseTtlS} s`,
    a.actor,
    tx,
    { showCause: true },
  );
}

/** What an operator's recovery did. */
export interface RecoveryResult {
  action: 'cancelled' | 'release-requested' | 'already-ended';
  awaitingHosts: string[];
  message: string;
}

/**
 * Why a releasing reservation is still releasing, host by host (ADR 0156): only its agent confirms
 * a release (rule 7), so recovery has nothing to do; the words say what will end it.
 */
async function releasingWhy(s: LedgerStore, tx: Tx, now: number, id: string): Promise<string> {
  const why: string[] = [];
  for (const l of (await leasesOf(s, tx, id)).filter((x) => x.status !== 'released')) {
    const h = await getHost(s, tx, l.hostId);
    if (!h) continue;
    const hb = h.lastHeartbeatAt;
    if (hb == null || now - hb > s.config.timings.offlineAfterS * 1000) {
      why.push(
        `${h.id}: its agent has not been heard from ${hb == null ? 'yet' : `since ${isoTime(hb)}`}, and only the agent confirms a release`,
      );
    } else if (h.phase === 'release-required') {
      why.push(`${h.id}: processes outlived the lease and are never killed; end them on the host`);
    } else {
      why.push(
        `${h.id} is ${h.phase}: its agent is cleaning up; a cleanup that keeps failing quarantines the host with the reason after the agent's timeouts.cleanupS (default 300 s), which ends this reservation`,
      );
    }
  }
  return why.join('; ') || 'no host is left to confirm';
}

/**
 * Operator recovery of expired or stuck work: queued → cancelled; granted → release requested
 * (hosts freed only once the agent confirms, rule 7). Work already releasing is refused with why it
 * still is, host by host — recovery never answers "done" having changed nothing; ending it without
 * the agent's confirmation is the emergency terminate. A live lease is refused: that is a
 * release, not a recovery.
 */
export function recoverReservation(s: LedgerStore, id: string, actor: string): Promise<RecoveryResult> {
  return s.write(async (tx, now, changed) => {
    const r = await getReservation(s, tx, id);
    if (!r) throw notFound(`reservation ${id}`);
    const leases = await leasesOf(s, tx, id);
    const live = leases.filter((l) => l.status === 'active' && l.expiresAt > now);
    if (live.length) {
      throw conflict(
        'live_lease',
        `${id} holds a live lease on ${live.map((l) => l.hostId).join(', ')} (expires ${isoTime(
          Math.min(...live.map((l) => l.expiresAt)),
        )}); recovery is for expired or stuck work — release it instead (sparkctl release ${id})`,
      );
    }
    const note = async (action: string, message: string) => {
      await s.record(tx, now, {
        subjectType: 'reservation',
        subjectId: id,
        type: 'reservation.recovery',
        fromState: r.status,
        toState: r.status,
        cause: message,
        actor,
        data: { action },
      });
    };
    if (r.status === 'queued') {
      await cancelReservation(s, id, actor, 'operator recovery: cancelled while queued', tx);
      return { action: 'cancelled', awaitingHosts: [], message: `${id} was queued; cancelled` };
    }
    if (isReleasableStatus(r.status)) {
      await beginRelease(
        s,
        id,
        'recovered',
        'operator recovery: lease no longer live; agent asked to stop what it owns',
        actor,
        tx,
      );
      const hosts = (await leasesOf(s, tx, id)).filter((l) => l.status !== 'released').map((l) => l.hostId);
      for (const h of hosts) changed.add(`host:${h}`);
      const message = `${id} marked for release; hosts ${hosts.join(', ')} are freed only after their agent confirms termination`;
      await note('release-requested', message);
      return { action: 'release-requested', awaitingHosts: hosts, message };
    }
    if (r.status === 'releasing') {
      throw conflict(
        'awaiting_agent',
        `${id} is already releasing; recovery has nothing to do: ${await releasingWhy(s, tx, now, id)}. To end it without the agent's confirmation (its hosts are then quarantined): sparkctl emergency terminate ${id} --reason …`,
      );
    }
    return {
      action: 'already-ended',
      awaitingHosts: [],
      message: `${id} already ended (${r.status}); nothing to recover`,
    };
  });
}

/**
 * Ends work that is releasing without its agents' confirmation (ADR 0156): every lease not yet
 * released is released, and its host — whose agent has not confirmed that nothing of the lease
 * runs or is left — is quarantined until an operator clears it, so nothing is granted there
 * meanwhile (rule 7 holds for the host, not for the stuck reservation). The agent, when it next
 * polls, still stops and removes what it started for the lease.
 */
async function endReleasingUnconfirmed(
  s: LedgerStore,
  tx: Tx,
  now: number,
  r: ReservationRow,
  why: string,
  actor: string,
): Promise<void> {
  for (const l of await leasesOf(s, tx, r.id)) {
    if (l.status === 'released') continue;
    const cause = `${why}; termination not confirmed by the agent of ${l.hostId}`.slice(0, 500);
    if (l.status !== 'releasing') await setLeaseStatus(s, tx, now, l, 'releasing', cause, actor);
    await setLeaseStatus(s, tx, now, l, 'released', cause, actor);
    const h = await getHost(s, tx, l.hostId);
    if (h && h.phase !== 'quarantined') {
      const note =
        `${why}; not confirmed clean by its agent: check the host, then clear the quarantine`.slice(0, 500);
      if (h.phase === 'allocated') await setHostPhase(s, tx, now, h, 'cleaning', cause, actor);
      await tx.update(t.hosts).set({ note }).where(eq(t.hosts.id, h.id));
      await setHostPhase(s, tx, now, h, 'quarantined', note, actor);
    }
  }
  const outcome = (r.outcome as Outcome | null) ?? 'terminated';
  await transitionReservation(
    s,
    tx,
    now,
    r,
    endsDone(outcome) ? 'done' : 'failed',
    why.slice(0, 500),
    actor,
    {
      outcome,
    },
  );
}

/**
 * The separately authorized emergency operation (docs/architecture.md rule 1): queued work is cancelled,
 * granted work is released with outcome `terminated`, and work already releasing — its agent not
 * confirming the cleanup (a trap in its work dir, an agent gone) — ends now with its hosts
 * quarantined (ADR 0156); each leaves an `alert.emergency_terminate`.
 */
export function terminateReservation(
  s: LedgerStore,
  id: string,
  reason: string,
  actor: string,
): Promise<void> {
  return s.write(async (tx, now, changed) => {
    const r = await getReservation(s, tx, id);
    if (!r) throw notFound(`reservation ${id}`);
    const from = r.status;
    let to: string = 'releasing';
    if (r.status === 'queued') {
      await cancelReservation(s, id, actor, `emergency: ${reason}`, tx);
      to = 'cancelled';
    } else if (isReleasableStatus(r.status)) {
      await beginRelease(s, id, 'terminated', `emergency terminate: ${reason}`, actor, tx);
    } else if (r.status === 'releasing') {
      await endReleasingUnconfirmed(s, tx, now, r, `emergency terminate by ${actor}: ${reason}`, actor);
      to = r.status;
    } else {
      throw conflict('not_active', `${id} already ended (${r.status}); nothing to terminate`);
    }
    await s.record(tx, now, {
      subjectType: 'reservation',
      subjectId: id,
      type: 'alert.emergency_terminate',
      fromState: from,
      toState: to,
      cause: `emergency terminate by ${actor}: ${reason}`,
      actor,
    });
    changed.add('reservation');
    for (const l of await leasesOf(s, tx, id)) changed.add(`host:${l.hostId}`);
  });
}

/** The check-run words for a reservation whose runner a foreign job took. */
export const FOREIGN_JOB_REASON = 'runner taken by a foreign job — stopped';

/**
 * A job that is not the admitted one runs on this reservation's runner: the
 * reservation is released with outcome `foreign_job` (the agent's desired state becomes `clean`,
 * which stops the runner it started and cleans the host), and an `alert.foreign_job` fires.
 * Returns false when the reservation already ended or is releasing (audited only).
 */
export async function stopForeignJob(
  s: LedgerStore,
  tx: Tx,
  id: string,
  detail: string,
  data: Record<string, unknown>,
): Promise<boolean> {
  const r = await getReservation(s, tx, id);
  if (!r) throw notFound(`reservation ${id}`);
  const acted = isReleasableStatus(r.status);
  if (acted) {
    await beginRelease(s, id, 'foreign_job', `${FOREIGN_JOB_REASON}: ${detail}`, 'github', tx, {
      showCause: true,
    });
  }
  await s.record(tx, s.clock(), {
    subjectType: 'reservation',
    subjectId: id,
    type: 'alert.foreign_job',
    fromState: r.status,
    toState: acted ? 'releasing' : r.status,
    cause: `${acted ? FOREIGN_JOB_REASON : 'foreign job on a runner of ended work'}: ${detail}`,
    actor: 'github',
    data,
  });
  return acted;
}
