import type { InValue } from '@libsql/client';
import { eq } from 'drizzle-orm';
import { type AdmissionPlan, budgetSlot, planAdmission } from '../../core/admission.ts';
import type { GrantRowLease } from '../../core/events.ts';
import {
  type HostPhase,
  isReleasableStatus,
  type ReservationKind,
  type ReservationStatus,
} from '../../core/model.ts';
import { assertHostTransition, assertReservationTransition } from '../../core/state-machines.ts';
import type { RawSql, Tx } from './db.ts';
import { setHostPhase } from './hosts.ts';
import { setLeaseStatus } from './leases.ts';
import {
  allHosts,
  bindingLeaseRows,
  buildKeyOf,
  buildsHadGrant,
  openReservations,
  placeholders,
  recordGrantedBuilds,
} from './raw-rows.ts';
import { beginRelease, releaseLostLease, transitionReservation } from './reservations.ts';
import {
  type HostRow,
  type ReservationRow,
  toHostRecord,
  toLeaseRecord,
  toReservationRecord,
} from './rows.ts';
import * as t from './schema.ts';
import type { LedgerStore } from './store.ts';

/** Result of one admission pass as applied to the ledger. */
export interface PassResult {
  plan: AdmissionPlan;
  granted: { reservationId: string; leases: { leaseId: string; hostId: string; fencingToken: number }[] }[];
}

/** How many queued reservations get their position/reason/wait code written per pass. */
export const PERSISTED_WAITS_PER_PASS = 200;

/** Loads everything the admission engine needs, inside the caller's transaction (raw SQL, kept statements). */
export async function loadAdmissionInput(s: LedgerStore, tx: Tx | undefined) {
  const q = s.store.raw(tx);
  // one connection per transaction: the reads run one after the other anyway
  const hostRows = await allHosts(q);
  const leaseRows = await bindingLeaseRows(q);
  const resvRows = await openReservations(q);
  return {
    hostRows,
    leaseRows,
    resvRows,
    keptSlots: await keptSlotsOf(q, resvRows, s.config.budgets.maxPrs),
  };
}

/**
 * Rule 6 between lanes (issue 14 item 6): the budget slots of queued lanes whose build (same
 * slot, same head SHA) already had a lane granted. Such a build keeps its slot until its last
 * lane finishes, so a third PR cannot take the slot between a PR's two lanes.
 *
 * A kept slot only ever matters against `maxPrs`: the engine refuses a slot when the slots taken
 * by others reach it, and those are slots of open reservations other than its own. When the open
 * reservations name at most `maxPrs` distinct slots that can never happen, kept or not, so the
 * look-up (one statement per pass, issue 13 item 2) is skipped and the plan is the same.
 */
async function keptSlotsOf(q: RawSql, open: ReservationRow[], maxPrs: number): Promise<string[]> {
  const keys: string[] = [];
  const slotOfKey = new Map<string, string>();
  const openSlots = new Set<string>();
  for (const r of open) {
    const slot = budgetSlot({ ...r, kind: r.kind as ReservationKind });
    if (slot) openSlots.add(slot);
    if (!slot || r.status !== 'queued') continue;
    const key = buildKeyOf(r);
    // bounded like the SHA list it replaces: the head of the queue is what a pass can admit
    if (key == null || slotOfKey.has(key) || slotOfKey.size >= 500) continue;
    slotOfKey.set(key, slot);
    keys.push(key);
  }
  if (keys.length === 0 || openSlots.size <= maxPrs) return [];
  const had = await buildsHadGrant(q, keys);
  return [...new Set([...had].map((k) => slotOfKey.get(k)!))];
}

/**
 * One admission pass in one write transaction (ADR 0002): read the whole state, plan with the
 * pure engine, write grants with fresh fencing tokens. Another process's pass waits on the
 * write lock and then sees these grants, so two processes can never double-grant; the partial
 * unique index on leases is the last line of defence. Queue timeouts end `failed` with outcome
 * `queue_timeout`; waits are written to `wait_code`, never to `outcome`.
 */
export function admissionPassTx(s: LedgerStore, actor: string): Promise<PassResult> {
  return s.write(async (tx, now, changed) => {
    const { hostRows, leaseRows, resvRows, keptSlots } = await loadAdmissionInput(s, tx);
    const plan = planAdmission({
      now,
      config: s.config,
      hosts: hostRows.map(toHostRecord),
      leases: leaseRows.map(toLeaseRecord),
      reservations: resvRows.map(toReservationRecord),
      keptSlots,
    });
    const resvById = new Map(resvRows.map((r) => [r.id, r]));
    const hostById = new Map(hostRows.map((h) => [h.id, h]));
    const leaseById = new Map(leaseRows.map((l) => [l.id, l]));
    const result: PassResult = { plan, granted: [] };

    for (const id of plan.queueTimeouts) {
      const r = resvById.get(id)!;
      await transitionReservation(
        s,
        tx,
        now,
        r,
        'failed',
        `queue timeout: waited ${Math.round((now - r.createdAt) / 60000)} min (limit ${Math.round(
          s.config.timings.queueTimeoutS / 60,
        )} min); last reason: ${r.reason ?? 'none'}`,
        actor,
        { outcome: 'queue_timeout' },
      );
      changed.add('reservation');
    }

    for (const id of plan.satisfied) {
      const r = resvById.get(id)!;
      // an explicit Deckard start whose host serves: met without a lease — by the restore it
      // started (issue 14 item 2) or because the host already served
      const restored = r.waitCode === 'restoring';
      await transitionReservation(
        s,
        tx,
        now,
        r,
        'done',
        restored ? `${r.targetHost} restored: model-ready health passed` : `${r.targetHost} already serving`,
        actor,
        { outcome: restored ? 'restored' : 'already_serving' },
      );
      changed.add('reservation');
    }

    for (const rs of plan.restores) {
      // an explicit Deckard start on an idle host drives the agent's restore path now: the host
      // goes `restoring` (desired state `restore`: model-ready gate, bounded retries, quarantine)
      const host = hostById.get(rs.hostId)!;
      await tx
        .update(t.hosts)
        .set({ restoreAttempts: 0, restoreNotBefore: null })
        .where(eq(t.hosts.id, host.id));
      await setHostPhase(
        s,
        tx,
        now,
        host,
        'restoring',
        `explicit ${host.homeService} start ${rs.reservationId}`,
        actor,
      );
      changed.add(`host:${host.id}`).add('reservation');
    }

    for (const loss of plan.pairLosses) {
      await failLostPair(s, tx, now, loss, hostById, actor);
      changed.add('reservation');
      for (const h of [...loss.lostHosts, ...loss.healthyHosts]) changed.add(`host:${h}`);
    }

    for (const ex of plan.expiries) {
      const lease = leaseById.get(ex.leaseId)!;
      await setLeaseStatus(s, tx, now, lease, 'expired', 'lease TTL passed without renewal', actor);
      const host = hostById.get(ex.hostId)!;
      const lost = resvById.get(ex.reservationId);
      if (
        lost &&
        lost.kind !== 'development' &&
        lease.runnerStartedAt == null &&
        // `running`: a runner reported its start, or GitHub its job's (workflow_job in_progress)
        (lost.status === 'allocated' || lost.status === 'preparing')
      ) {
        // CI whose lease was lost before its work started ends at once, as not run (ADR 0177)
        await releaseLostLease(s, tx, now, {
          r: lost,
          hostId: ex.hostId,
          processesUnknown: ex.outcome === 'release-required',
          actor,
        });
        changed.add(`host:${ex.hostId}`).add('reservation');
        continue;
      }
      if (ex.outcome === 'release-required') {
        if (host.phase === 'allocated') {
          await setHostPhase(
            s,
            tx,
            now,
            host,
            'release-required',
            'lease expired while processes remain (or are unknown): nothing killed, nothing admitted',
            actor,
          );
        }
      } else {
        const r = resvById.get(ex.reservationId);
        if (r && isReleasableStatus(r.status)) {
          await beginRelease(
            s,
            r.id,
            'expired',
            'lease expired; agent asked to confirm termination',
            actor,
            tx,
          );
        }
      }
      changed.add(`host:${ex.hostId}`).add('reservation');
    }

    // Grants: a few set-based statements for the whole pass (not per grant) so a burst of
    // grants costs about as much as one; every transition is still checked and recorded. The
    // history gets one row per grant (ADR 0100): `reservation.allocated` lists every lease it
    // issued (id, host, fencing token, lend, the host's previous phase), so the hosts' moves to
    // `allocated` and the leases' grants are read from it, not from rows of their own.
    const q = s.store.raw(tx);
    if (plan.grants.length) {
      const leaseArgs: InValue[] = [];
      const grantedHosts: string[] = [];
      for (const g of plan.grants) {
        const r = resvById.get(g.reservationId)!;
        const ttlS =
          r.ttlS ??
          (r.kind === 'development' ? s.config.timings.devLeaseDefaultTtlS : s.config.timings.ciLeaseTtlS);
        assertReservationTransition(r.status as ReservationStatus, 'allocated');
        const leases: PassResult['granted'][number]['leases'] = [];
        const rowLeases: GrantRowLease[] = [];
        const moves: string[] = [];
        for (const hostId of g.hostIds) {
          const host = hostById.get(hostId)!;
          assertHostTransition(host.phase as HostPhase, 'allocated');
          const token = host.fencingToken + 1;
          const leaseId = `l-${hostId}-${token}`;
          const lend = g.lend.includes(hostId);
          leaseArgs.push(leaseId, r.id, hostId, token, lend ? 1 : 0, now, now + ttlS * 1000);
          rowLeases.push({ id: leaseId, hostId, fencingToken: token, lend, hostFrom: host.phase });
          moves.push(`${hostId} (${host.phase} → allocated${lend ? ', lending its home service' : ''})`);
          host.fencingToken = token;
          host.phase = 'allocated';
          grantedHosts.push(hostId);
          leases.push({ leaseId, hostId, fencingToken: token });
          changed.add(`host:${hostId}`);
        }
        // no lease id or token in the cause: causes are shown (redacted) to operators, tokens never
        await s.record(tx, now, {
          subjectType: 'reservation',
          subjectId: r.id,
          type: 'reservation.allocated',
          fromState: r.status,
          toState: 'allocated',
          cause: `granted ${moves.join(' + ')}`,
          actor,
          data: {
            hosts: g.hostIds,
            lend: g.lend,
            leases: rowLeases,
            kind: r.kind,
            waitedMs: now - r.createdAt,
          },
        });
        Object.assign(r, {
          status: 'allocated',
          grantedAt: now,
          reason: null,
          position: null,
          updatedAt: now,
        });
        result.granted.push({ reservationId: r.id, leases });
      }
      const ids = plan.grants.map((g) => g.reservationId);
      // rule 6 between lanes: a build with a lane granted keeps its slot (read by keptSlotsOf)
      const builds: string[] = [];
      for (const id of ids) {
        const key = buildKeyOf(resvById.get(id)!);
        if (key != null) builds.push(key);
      }
      await recordGrantedBuilds(q, builds, now);
      // compare-and-set: only still-queued rows move (the write lock makes this exact)
      await q.execute(
        `UPDATE reservations SET status = 'allocated', granted_at = ?, updated_at = ?, reason = NULL, position = NULL, wait_code = NULL, outcome = NULL WHERE id IN (${placeholders(
          ids.length,
        )}) AND status = 'queued'`,
        [now, now, ...ids],
      );
      // each granted host's token goes up by exactly one: the value the lease rows carry
      await q.execute(
        `UPDATE hosts SET fencing_token = fencing_token + 1, phase = 'allocated', updated_at = ? WHERE id IN (${placeholders(
          grantedHosts.length,
        )})`,
        [now, ...grantedHosts],
      );
      const LEASE_ROW = "(?, ?, ?, ?, 'active', ?, ?, ?)";
      for (let i = 0; i < leaseArgs.length; i += 7 * 50) {
        const chunk = leaseArgs.slice(i, i + 7 * 50);
        await q.execute(
          `INSERT INTO leases (id, reservation_id, host_id, fencing_token, status, lend, granted_at, expires_at) VALUES ${Array.from(
            { length: chunk.length / 7 },
            () => LEASE_ROW,
          ).join(', ')}`,
          chunk,
        );
      }
      changed.add('reservation');
    }

    // Persist why each request waits; history gets a row only when the kind of wait changes.
    // Only the head of the queue is written each pass (a grant shifts every position behind it);
    // the rest is written as it moves up, and read paths compute live positions anyway.
    for (const w of plan.waits.slice(0, PERSISTED_WAITS_PER_PASS)) {
      const r = resvById.get(w.reservationId)!;
      if (r.reason === w.reason && r.position === w.position) continue;
      const prevCode = r.reason ? r.waitCode : null;
      await q.execute(
        "UPDATE reservations SET reason = ?, position = ?, wait_code = ? WHERE id = ? AND status = 'queued'",
        [w.reason, w.position, w.code, r.id],
      );
      // read models keyed by the ledger version see the new reason; the admission loop does not
      // listen to `queue` (a wait it wrote itself is no reason for another pass)
      changed.add('queue');
      if (prevCode !== w.code) {
        await s.record(tx, now, {
          subjectType: 'reservation',
          subjectId: r.id,
          type: 'reservation.waiting',
          fromState: 'queued',
          toState: 'queued',
          cause: w.reason,
          actor,
          data: { code: w.code, position: w.position },
        });
      }
    }
    return result;
  });
}

/**
 * A pair node went dark (issue 14 item 1): the pair fails as a unit. Every lease goes to
 * `releasing` (the healthy node's agent stops the runner it started and keeps its evidence); the
 * dark node is `release-required` until its agent returns and confirms cleanup (rule 7: nothing
 * there is assumed gone, nothing is granted there).
 */
async function failLostPair(
  s: LedgerStore,
  tx: Tx,
  now: number,
  loss: AdmissionPlan['pairLosses'][number],
  hostById: Map<string, HostRow>,
  actor: string,
): Promise<void> {
  const lost = loss.lostHosts.join(' and ');
  const cause = `${lost} lost contact during a pair run — pair failed as a unit`;
  await beginRelease(s, loss.reservationId, 'pair_node_lost', cause, actor, tx, { showCause: true });
  for (const id of loss.lostHosts) {
    const host = hostById.get(id);
    if (!host) continue;
    // beginRelease moved it to cleaning; re-read so the transition starts from the stored phase
    const fresh = (await tx.select().from(t.hosts).where(eq(t.hosts.id, id)))[0];
    if (fresh?.phase !== 'cleaning') continue;
    await setHostPhase(
      s,
      tx,
      now,
      fresh,
      'release-required',
      `lost contact during pair run ${loss.reservationId}; released only when its agent confirms cleanup`,
      actor,
    );
  }
  await s.record(tx, now, {
    subjectType: 'reservation',
    subjectId: loss.reservationId,
    type: 'alert.pair_node_lost',
    cause,
    actor,
    data: { lostHosts: loss.lostHosts, healthyHosts: loss.healthyHosts },
  });
}
