import { eq } from 'drizzle-orm';
import { type AdmissionPlan, planAdmission } from '../../core/admission.ts';
import type { GrantRowLease } from '../../core/events.ts';
import { type HostPhase, isReleasableStatus, type ReservationStatus } from '../../core/model.ts';
import { assertHostTransition, assertReservationTransition } from '../../core/state-machines.ts';
import {
  type AdmissionRows,
  headDecides,
  loadAdmissionInput,
  PERSISTED_WAITS_PER_PASS,
  readAdmissionSnapshot,
  readQueueHead,
} from './admission-input.ts';
import { BUMP_VERSION, GUARD, isGuardConflict, SEED_VERSION } from './admission-pass-guard.ts';
import { admissionPassStats } from './admission-pass-stats.ts';
import { DeferredReadError, type Tx } from './db.ts';
import { setHostPhase } from './hosts.ts';
import { setLeaseStatus } from './leases.ts';
import { buildKeyOf, recordGrantedBuilds } from './raw-rows.ts';
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

export { loadAdmissionInput, PERSISTED_WAITS_PER_PASS } from './admission-input.ts';
export { type AdmissionPassStats, admissionPassStats } from './admission-pass-stats.ts';

/** Result of one admission pass as applied to the ledger. */
export interface PassResult {
  plan: AdmissionPlan;
  granted: { reservationId: string; leases: { leaseId: string; hostId: string; fencingToken: number }[] }[];
}

/**
 * How often a remote pass plans again after its write batch was refused before it takes the
 * write lock for an interactive pass instead (which always finishes: nothing can change under it).
 */
const OPTIMISTIC_ATTEMPTS = 3;

/**
 * One admission pass as one atomic decision (ADR 0002): read the whole state, plan with the pure
 * engine, write grants with fresh fencing tokens. Queue timeouts end `failed` with outcome
 * `queue_timeout`; waits are written to `wait_code`, never to `outcome`.
 *
 * A local ledger runs it in one write transaction: another process's pass waits on the write lock
 * and then sees these grants, so two processes can never double-grant; the partial unique index
 * on leases is the last line of defence. A remote ledger first tries it in two round trips (one
 * read batch, one write batch guarded by the pass version, docs/adr/0185-admission-pass-in-two-round-trips.md)
 * and falls back to the interactive transaction when the plan needs more than grants and waits,
 * or when other passes keep coming first.
 */
export async function admissionPassTx(s: LedgerStore, actor: string): Promise<PassResult> {
  const stats = admissionPassStats(s);
  if (!s.store.local) {
    for (let attempt = 0; attempt < OPTIMISTIC_ATTEMPTS; attempt++) {
      const out = await batchedPass(s, actor);
      if (out === 'conflict') {
        stats.conflicts++;
        continue;
      }
      if (out === 'interactive') break;
      stats.batched++;
      return out;
    }
  }
  stats.interactive++;
  return interactivePass(s, actor);
}

/** The pass as one interactive write transaction. */
function interactivePass(s: LedgerStore, actor: string): Promise<PassResult> {
  return s.write(async (tx, now, changed) => {
    let input = await readQueueHead(s, tx, now);
    let plan = planFor(s, now, input);
    if (!headDecides(plan, input)) {
      admissionPassStats(s).wholeQueueReads++;
      input = await loadAdmissionInput(s, tx);
      plan = planFor(s, now, input);
    }
    const { hostRows, leaseRows, resvRows } = input;
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
      // started or because the host already served
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

    await applyGrantsAndWaits(
      s,
      tx,
      now,
      changed,
      actor,
      result,
      resvById,
      hostById,
      changedWaits(plan, resvById),
    );
    // a batched pass of another controller on the same remote ledger must see that this one wrote
    if (!s.store.local && changed.size) await s.store.raw(tx).execute(BUMP_VERSION);
    return result;
  });
}

/**
 * The pass in two round trips (remote ledgers): one read batch, the plan in memory, one write
 * batch that starts with {@link GUARD}. `interactive` when the plan needs more than grants and
 * waits (timeouts, restores, expiries, lost pairs: rare, and their commands read as they go) or
 * when a hook needs an answer inside the transaction; `conflict` when the guard refused the batch.
 */
async function batchedPass(s: LedgerStore, actor: string): Promise<PassResult | 'conflict' | 'interactive'> {
  const now = s.clock();
  let input = await readAdmissionSnapshot(s, now, false);
  let plan = planFor(s, now, input);
  if (!headDecides(plan, input)) {
    admissionPassStats(s).wholeQueueReads++;
    input = await readAdmissionSnapshot(s, now, true);
    plan = planFor(s, now, input);
  }
  if (
    plan.queueTimeouts.length ||
    plan.satisfied.length ||
    plan.restores.length ||
    plan.pairLosses.length ||
    plan.expiries.length
  )
    return 'interactive';
  const resvById = new Map(input.resvRows.map((r) => [r.id, r]));
  const hostById = new Map(input.hostRows.map((h) => [h.id, h]));
  const waits = changedWaits(plan, resvById);
  if (plan.grants.length === 0 && waits.length === 0) return { plan, granted: [] };

  // what the guard checks: the reservations granted or given a new kind of wait, the hosts granted
  const stillQueued = new Set(plan.grants.map((g) => g.reservationId));
  for (const w of waits) {
    // the waits that record a history row (applyGrantsAndWaits)
    const r = resvById.get(w.reservationId)!;
    if ((r.reason ? r.waitCode : null) !== w.code) stillQueued.add(w.reservationId);
  }
  const unchangedHosts = plan.grants.flatMap((g) =>
    g.hostIds.map((id) => {
      const h = hostById.get(id)!;
      return [h.id, h.phase, h.fencingToken];
    }),
  );
  try {
    return await s.writeBatched(now, async (tx, now, changed) => {
      const q = s.store.raw(tx);
      await q.execute(SEED_VERSION);
      await q.execute(GUARD, [
        input.version,
        JSON.stringify([...stillQueued]),
        stillQueued.size,
        JSON.stringify(unchangedHosts),
        unchangedHosts.length,
      ]);
      const result: PassResult = { plan, granted: [] };
      await applyGrantsAndWaits(s, tx, now, changed, actor, result, resvById, hostById, waits);
      return result;
    });
  } catch (e) {
    if (e instanceof DeferredReadError) return 'interactive';
    if (isGuardConflict(e)) return 'conflict';
    throw e;
  }
}

function planFor(s: LedgerStore, now: number, input: AdmissionRows): AdmissionPlan {
  return planAdmission({
    now,
    config: s.config,
    hosts: input.hostRows.map(toHostRecord),
    leases: input.leaseRows.map(toLeaseRecord),
    reservations: input.resvRows.map(toReservationRecord),
    keptSlots: input.keptSlots,
  });
}

/**
 * The waits this pass writes: only the head of the queue (a grant shifts every position behind
 * it; the rest is written as it moves up, and read paths compute live positions anyway), and of
 * those only the ones whose reason or position changed.
 */
function changedWaits(plan: AdmissionPlan, resvById: Map<string, ReservationRow>): AdmissionPlan['waits'] {
  return plan.waits.slice(0, PERSISTED_WAITS_PER_PASS).filter((w) => {
    const r = resvById.get(w.reservationId)!;
    return r.reason !== w.reason || r.position !== w.position;
  });
}

// `+status`: SQLite would otherwise walk the status index over every queued row instead of
// looking the few ids up by primary key (the JSON list's size is unknown to its planner).
// The grant's statements take their rows as one JSON argument: one text whatever the number of
// grants, so the local client keeps each prepared, and a batch carries the same few statements.
const GRANT_RESERVATIONS = `UPDATE reservations SET status = 'allocated', granted_at = ?, updated_at = ?, reason = NULL, position = NULL, wait_code = NULL, outcome = NULL WHERE id IN (SELECT value FROM json_each(?)) AND +status = 'queued'`;
const GRANT_HOSTS = `UPDATE hosts SET fencing_token = fencing_token + 1, phase = 'allocated', updated_at = ? WHERE id IN (SELECT value FROM json_each(?))`;
const INSERT_LEASES = `INSERT INTO leases (id, reservation_id, host_id, fencing_token, status, lend, granted_at, expires_at) SELECT l.value ->> 0, l.value ->> 1, l.value ->> 2, l.value ->> 3, 'active', l.value ->> 4, l.value ->> 5, l.value ->> 6 FROM json_each(?) AS l`;

// one statement for every wait of the pass (the waits as one JSON argument, so the text never changes)
const WRITE_WAITS = `UPDATE reservations SET reason = json_extract(w.value, '$[1]'), position = json_extract(w.value, '$[2]'), wait_code = json_extract(w.value, '$[3]') FROM json_each(?) AS w WHERE reservations.id = json_extract(w.value, '$[0]') AND +reservations.status = 'queued'`;

/**
 * Writes the plan's grants and waits: a few set-based statements for the whole pass (not per
 * grant) so a burst of grants costs about as much as one; every transition is still checked and
 * recorded. Only writes, nothing read: a batched pass sends them as they are.
 */
async function applyGrantsAndWaits(
  s: LedgerStore,
  tx: Tx,
  now: number,
  changed: Set<string>,
  actor: string,
  result: PassResult,
  resvById: Map<string, ReservationRow>,
  hostById: Map<string, HostRow>,
  waits: AdmissionPlan['waits'],
): Promise<void> {
  const { plan } = result;
  // The history gets one row per grant (ADR 0100): `reservation.allocated` lists every lease it
  // issued (id, host, fencing token, lend, the host's previous phase), so the hosts' moves to
  // `allocated` and the leases' grants are read from it, not from rows of their own.
  const q = s.store.raw(tx);
  if (plan.grants.length) {
    const leaseRows: (string | number)[][] = [];
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
        leaseRows.push([leaseId, r.id, hostId, token, lend ? 1 : 0, now, now + ttlS * 1000]);
        rowLeases.push({ id: leaseId, hostId, fencingToken: token, lend, hostFrom: host.phase });
        moves.push(`${hostId} (${host.phase} → allocated${lend ? ', lending its home service' : ''})`);
        host.fencingToken = token;
        host.phase = 'allocated';
        grantedHosts.push(hostId);
        leases.push({ leaseId, hostId, fencingToken: token });
        changed.add(`host:${hostId}`);
      }
      // no lease id or token in the cause: causes are shown (redacted) to operators, tokens never
      await s.record(
        tx,
        now,
        {
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
        },
        r,
      );
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
    // compare-and-set: only still-queued rows move (the write lock, or the batch's guard, makes this exact)
    await q.execute(GRANT_RESERVATIONS, [now, now, JSON.stringify(ids)]);
    // each granted host's token goes up by exactly one: the value the lease rows carry
    await q.execute(GRANT_HOSTS, [now, JSON.stringify(grantedHosts)]);
    await q.execute(INSERT_LEASES, [JSON.stringify(leaseRows)]);
    changed.add('reservation');
  }

  // Persist why each request waits; history gets a row only when the kind of wait changes.
  if (waits.length === 0) return;
  await q.execute(WRITE_WAITS, [
    JSON.stringify(waits.map((w) => [w.reservationId, w.reason, w.position, w.code])),
  ]);
  // read models keyed by the ledger version see the new reason; the admission loop does not
  // listen to `queue` (a wait it wrote itself is no reason for another pass)
  changed.add('queue');
  for (const w of waits) {
    const r = resvById.get(w.reservationId)!;
    const prevCode = r.reason ? r.waitCode : null;
    Object.assign(r, { reason: w.reason, position: w.position, waitCode: w.code });
    if (prevCode === w.code) continue;
    await s.record(
      tx,
      now,
      {
        subjectType: 'reservation',
        subjectId: r.id,
        type: 'reservation.waiting',
        fromState: 'queued',
        toState: 'queued',
        cause: w.reason,
        actor,
        data: { code: w.code, position: w.position },
      },
      r,
    );
  }
}

/**
 * A pair node went dark: the pair fails as a unit. Every lease goes to
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
