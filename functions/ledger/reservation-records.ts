import { eq, sql } from 'drizzle-orm';
import { isNotRunOutcome, isReleasableStatus, type Outcome } from '../../core/model.ts';
import { type Tx, txSql } from './db.ts';
import { beginRelease } from './reservation-release.ts';
import { getReservation } from './reservation-status.ts';
import type { ReservationRow } from './rows.ts';
import * as t from './schema.ts';
import type { LedgerStore } from './store.ts';

/**
 * What a reservation records beside its status: the job's result, notes, the GitHub meta column,
 * check-run id, runner attempt, receipts (split by concept from `reservations.ts`, which re-exports
 * them).
 */

/**
 * The GitHub job's result (`workflow_job` completed). A failure is sticky: a late success from
 * the healthy half of a failed pair must not turn the reservation's result into a pass. `keep`
 * keeps the current outcome too: the caller knows the report is the echo of the controller's
 * own cancellation of the run of work that already ended (ADR 0095).
 */
export async function recordJobOutcome(
  s: LedgerStore,
  tx: Tx,
  r: ReservationRow,
  reported: 'passed' | 'failed' | 'cancelled',
  cause: string,
  data: Record<string, unknown>,
  keep = false,
): Promise<Outcome> {
  const now = s.clock();
  // a pair failed as a unit stays failed for the node that lost contact; a
  // foreign job's incident stays one when its admitted run is cancelled afterwards (ADR 0090)
  const sticky =
    (keep && r.outcome != null) ||
    r.outcome === 'failed' ||
    r.outcome === 'pair_node_lost' ||
    r.outcome === 'foreign_job' ||
    // work that never ran stays not-run: a late job result is not the PR's (ADR 0177)
    isNotRunOutcome(r.outcome);
  const outcome: Outcome = sticky ? (r.outcome as Outcome) : reported;
  await tx.update(t.reservations).set({ outcome, updatedAt: now }).where(eq(t.reservations.id, r.id));
  r.outcome = outcome;
  await s.record(tx, now, {
    subjectType: 'reservation',
    subjectId: r.id,
    type: 'reservation.job_completed',
    cause,
    actor: 'github',
    data: { outcome, ...data },
  });
  return outcome;
}

/** Records a fact about a reservation that changes no state (audited in its history). */
export async function noteReservation(
  s: LedgerStore,
  tx: Tx,
  r: Pick<ReservationRow, 'id'>,
  type: 'reservation.unwanted_while_active' | 'reservation.job_mismatch',
  cause: string,
  actor: string,
  data?: Record<string, unknown>,
): Promise<void> {
  await s.record(tx, s.clock(), {
    subjectType: 'reservation',
    subjectId: r.id,
    type,
    cause,
    actor,
    data: data ?? null,
  });
}

/**
 * Replaces the integration-owned `meta_json` of a reservation (the GitHub part keeps its facts
 * there: delivery, label, current head, check-run state).
 */
export async function writeReservationMeta(tx: Tx, r: ReservationRow, json: string): Promise<void> {
  await txSql(tx).execute('UPDATE reservations SET meta_json = ? WHERE id = ?', [json, r.id]);
  r.metaJson = json;
}

/**
 * Merges a JSON object into the integration-owned `meta_json` on the ledger's side
 * (`json_patch`, RFC 7396): nothing is read first, so a batched write can carry it, and fields
 * another writer changed meanwhile are kept (docs/adr/0185-admission-pass-in-two-round-trips.md).
 * With `unlessField`, a meta that already has that field is left as it is.
 */
export async function mergeReservationMeta(
  tx: Tx,
  id: string,
  patch: Record<string, unknown>,
  unlessField?: string,
): Promise<void> {
  if (unlessField !== undefined && !/^[A-Za-z]+$/.test(unlessField))
    throw new TypeError(`meta field ${unlessField} cannot name a JSON path`);
  const guard = unlessField ? sql` AND json_extract(meta_json, ${`$.${unlessField}`}) IS NULL` : sql``;
  await tx.run(
    sql`UPDATE reservations SET meta_json = json_patch(meta_json, ${JSON.stringify(patch)}) WHERE id = ${id} AND meta_json IS NOT NULL${guard}`,
  );
}

/** Remembers the GitHub check run that shows this reservation. */
export async function setCheckRunId(tx: Tx, r: ReservationRow, checkRunId: number): Promise<void> {
  await txSql(tx).execute('UPDATE reservations SET check_run_id = ? WHERE id = ?', [checkRunId, r.id]);
  r.checkRunId = checkRunId;
}

/**
 * Work that is no longer wanted before dispatch (PR closed, head moved, label removed) is
 * released with outcome `withdrawn`, and the check run says why in words.
 */
export function withdrawBeforeDispatch(s: LedgerStore, id: string, why: string, tx?: Tx): Promise<void> {
  return s.within(tx, async (tx) => {
    const cur = await getReservation(s, tx, id);
    if (!cur || !isReleasableStatus(cur.status)) return;
    const cause = `no longer wanted before dispatch: ${why}`;
    await beginRelease(s, id, 'withdrawn', cause, 'github', tx, { showCause: true });
  });
}

/** Runner start attempt `attempt` for a reservation whose runner was not picked up. */
export async function setRunnerAttempt(tx: Tx, id: string, attempt: number): Promise<void> {
  await tx.update(t.reservations).set({ attempt }).where(eq(t.reservations.id, id));
}

/** Stores the evidence receipts of a reservation (JSON owned by core/protocol/receipt.ts). */
export async function storeReceipts(s: LedgerStore, tx: Tx, id: string, json: string): Promise<void> {
  await tx
    .update(t.reservations)
    .set({ receiptJson: json, updatedAt: s.clock() })
    .where(eq(t.reservations.id, id));
}
