import { and, eq, lt } from 'drizzle-orm';
import { type Tx, txSql } from './db.ts';
import {
  anyClaimable,
  anyOutboxDue,
  claimableRows,
  claimHolders,
  claimRows,
  insertCheckSync,
  insertOutboxRow,
  insertOutboxRows,
  markRowFailed,
  markRowSent,
  nextPendingAt,
  type OutboxInsert,
  outboxKeyRowExists,
  releaseClaims,
} from './outbox-rows.ts';
import type { OutboxRow } from './rows.ts';
import * as t from './schema.ts';
import { type LedgerStore, noteChange } from './store.ts';

/**
 * The transactional outbox's ledger side (docs/architecture.md "GitHub integration"; ADR 0004): rows are
 * written in the same transaction as the state change that needs them, keyed by an idempotency
 * key, claimed by one controller process at a time, and marked sent or failed. Sending them is
 * `functions/github/outbox.ts`. The statements are hand-written on kept statements
 * (`outbox-rows.ts`; docs/adr/0290-outbox-kept-statements.md).
 */

export type OutboxKind =
  | 'check-run'
  | 'refusal-check'
  | 'dispatch'
  | 'find-run'
  | 'generate-jitconfig'
  | 'delete-runner'
  | 'cancel-run'
  /** A CI task's read-only clone token (ADR 0110). */
  | 'mint-clone-token';

export interface EnqueueItem {
  kind: OutboxKind;
  key: string;
  reservationId?: string | null;
  payload: Record<string, unknown>;
  notBefore?: number;
}

const insertOf = (now: number, item: EnqueueItem): OutboxInsert => ({
  kind: item.kind,
  key: item.key,
  reservationId: item.reservationId ?? null,
  payloadJson: JSON.stringify(item.payload),
  nextAttemptAt: item.notBefore ?? now,
  createdAt: now,
});

/** Inserts an outbox row unless one with the same key exists; true when inserted. */
export async function enqueue(tx: Tx, now: number, item: EnqueueItem): Promise<boolean> {
  // RETURNING: inside a batched write this throws DeferredReadError, as drizzle's did (db.ts)
  const inserted = await insertOutboxRow(txSql(tx), insertOf(now, item));
  // the commit that fills the outbox wakes its sender (`outbox` notice; ADR 0180)
  if (inserted) noteChange(tx, 'outbox');
  return inserted;
}

/**
 * Inserts outbox rows in one statement, skipping any whose key exists, and reads nothing back: a
 * batched write can carry it (docs/adr/0185-admission-pass-in-two-round-trips.md). Rows get ids
 * in the order given.
 */
export async function enqueueMany(tx: Tx, now: number, items: readonly EnqueueItem[]): Promise<void> {
  if (items.length === 0) return;
  await insertOutboxRows(
    txSql(tx),
    items.map((item) => insertOf(now, item)),
  );
  // the commit that fills the outbox wakes its sender (ADR 0180; a row whose key existed wakes it
  // for nothing, which claims nothing)
  noteChange(tx, 'outbox');
}

/** True when an outbox row with this idempotency key exists. */
export async function outboxKeyExists(tx: Tx, key: string): Promise<boolean> {
  return outboxKeyRowExists(txSql(tx), key);
}

/**
 * Asks for the reservation's check run to be brought up to date. The sender renders from the
 * ledger at send time, so one pending, unclaimed row already covers any later change; a row
 * that is in flight may have rendered an older state, so a new one is queued behind it.
 */
export async function enqueueCheckSync(tx: Tx, now: number, reservationId: string): Promise<void> {
  // one statement, nothing read back (a batched write can carry it, ADR 0185): the aggregate
  // yields one row, numbered after the reservation's check-run rows, unless one of them is pending
  // and nobody has claimed it. A claimed row is in flight even past its claim's expiry (a slow
  // send, a clock that jumped): its sender may have rendered already, so only a row nobody has
  // claimed covers this change.
  await insertCheckSync(txSql(tx), now, reservationId);
  // the commit wakes the sender (ADR 0180); nothing is read back to know whether a row went in,
  // and a sender woken for nothing claims nothing
  noteChange(tx, 'outbox');
}

/** A cheap read: is any row due now? Most ticks find nothing and should not take the write lock. */
export async function outboxDue(s: LedgerStore): Promise<boolean> {
  return anyOutboxDue(s.store.raw(undefined), s.clock());
}

/**
 * Whether a claim of `kinds` now would claim anything (pause aside: a paused claim takes nothing):
 * the sender's read before each claim round, outside any transaction
 * (docs/adr/0315-outbox-sender-wakes.md).
 */
export async function outboxClaimable(s: LedgerStore, kinds?: readonly OutboxKind[]): Promise<boolean> {
  return anyClaimable(s.store.raw(undefined), s.clock(), kinds);
}

/**
 * When the next pending row can next be claimed (its retry time, a foreign claim's expiry, a rate
 * limit's reset), or null when nothing is pending: the sender's timer for a retry that no commit
 * will announce (ADR 0180).
 */
export async function nextOutboxAttemptAt(s: LedgerStore): Promise<number | null> {
  const at = await nextPendingAt(s.store.raw(undefined));
  if (at == null) return null;
  const pause = Number((await s.getMark(undefined, PAUSE_KEY)) ?? 0);
  return Math.max(at, pause);
}

/** The ledger mark that pauses every send until a GitHub rate limit resets. */
export const PAUSE_KEY = 'github:rate_limit_until';

/**
 * Claims up to `limit` due rows for `workerId` for `claimMs` (claim token + expiry), so two
 * controller processes never send the same row at once. Nothing is claimed while paused.
 */
export function claimDue(
  s: LedgerStore,
  workerId: string,
  claimMs: number,
  limit: number,
  /** Only rows of these kinds (one lane of the sender, functions/github/outbox.ts); default all. */
  kinds?: readonly OutboxKind[],
): Promise<OutboxRow[]> {
  return s.write(async (tx, now) => {
    const pause = await s.getMark(tx, PAUSE_KEY);
    if (pause && Number(pause) > now) return [];
    // pending, due, unclaimed or past its claim, by id; one check-run send per reservation at a
    // time across processes: two concurrent sends both find no check run yet and both create one
    // (seen by test/e2e/load-webhooks)
    const q = s.store.raw(tx);
    const rows = await claimableRows(q, now, limit, kinds);
    if (rows.length)
      await claimRows(
        q,
        rows.map((r) => r.id),
        workerId,
        now + claimMs,
      );
    return rows;
  });
}

/**
 * Drops the claims of controller processes that are gone (`isGone`, functions/process-identity.ts),
 * so the rows a killed controller had claimed are sent at once instead of when their claims
 * expire. A cheap read first: usually nobody else holds a claim, and nothing is written. Each
 * gone process gets an `outbox.claims_released` event; returns how many rows were released.
 */
export async function releaseGoneClaims(
  s: LedgerStore,
  isGone: (workerId: string) => boolean,
): Promise<number> {
  const gone = (await claimHolders(s.store.raw(undefined), s.clock())).filter(isGone);
  if (gone.length === 0) return 0;
  return s.write(async (tx, now, changed) => {
    let released = 0;
    for (const workerId of gone) {
      const n = await releaseClaims(s.store.raw(tx), workerId, now);
      if (n === 0) continue;
      released += n;
      await s.record(tx, now, {
        subjectType: 'outbox',
        subjectId: workerId,
        type: 'outbox.claims_released',
        cause: `controller process ${workerId} is gone; the ${n} row(s) it had claimed are sent again`,
        actor: 'github-outbox',
        data: { workerId, rows: n },
      });
    }
    if (released) changed.add('outbox');
    return released;
  });
}

/** What a sender hands back to apply with "sent", in the same transaction. */
export type SentEffects = (tx: Tx, now: number, changed: Set<string>) => Promise<void>;

/** Marks a claimed row sent (only if this worker still holds the claim) and applies its effects. */
export function markSent(
  s: LedgerStore,
  row: OutboxRow,
  workerId: string,
  result: Record<string, unknown>,
  apply?: SentEffects,
): Promise<void> {
  return s.write(async (tx, now, changed) => {
    await markRowSent(s.store.raw(tx), row.id, workerId, {
      attempts: row.attempts + 1,
      resultJson: JSON.stringify(result),
      now,
    });
    await apply?.(tx, now, changed);
    changed.add('outbox');
  });
}

/**
 * Records a failed send: retried at `nextAttemptAt`, or given up (`final`) with an
 * `outbox.failed` event. A rate limit on the App pauses every send until `pauseUntil`.
 */
export function markFailed(
  s: LedgerStore,
  row: OutboxRow,
  workerId: string,
  f: {
    attempts: number;
    final: boolean;
    message: string;
    nextAttemptAt: (now: number) => number;
    pauseUntil: number | null;
    status: number | null;
  },
): Promise<void> {
  return s.write(async (tx, now) => {
    await markRowFailed(s.store.raw(tx), row.id, workerId, {
      status: f.final ? 'failed' : 'pending',
      attempts: f.attempts,
      nextAttemptAt: f.nextAttemptAt(now),
      lastError: f.message,
    });
    if (f.pauseUntil != null) await s.setMark(tx, PAUSE_KEY, String(f.pauseUntil));
    if (f.final) {
      await s.record(tx, now, {
        subjectType: 'outbox',
        subjectId: String(row.id),
        type: 'outbox.failed',
        cause: `${row.kind} gave up after ${f.attempts} attempt(s): ${f.message}`,
        actor: 'github-outbox',
        data: { kind: row.kind, reservationId: row.reservationId, status: f.status },
      });
    }
  });
}

/** GitHub lets an operator redeliver a webhook for 3 days; dedup rows older than 7 days go. */
export const DELIVERY_RETENTION_MS = 7 * 24 * 3_600_000;
const PRUNE_KEY = 'github:deliveries_pruned_at';

/** Prunes old webhook dedup rows at most once an hour; returns how many were removed. */
export async function pruneDeliveries(s: LedgerStore): Promise<number> {
  const mark = await s.getMark(undefined, PRUNE_KEY);
  if (mark && s.clock() - Number(mark) < 3_600_000) return 0;
  return s.write(async (tx, now) => {
    const removed = await tx
      .delete(t.webhookDeliveries)
      // pending and parked deliveries stay until processed or retried by an operator
      .where(
        and(
          lt(t.webhookDeliveries.receivedAt, now - DELIVERY_RETENTION_MS),
          eq(t.webhookDeliveries.state, 'done'),
        ),
      )
      .returning({ id: t.webhookDeliveries.deliveryId });
    await s.setMark(tx, PRUNE_KEY, String(now));
    return removed.length;
  });
}
