import { and, asc, eq, inArray, isNull, lt, lte, or, sql } from 'drizzle-orm';
import type { Tx } from './db.ts';
import type { OutboxRow } from './rows.ts';
import * as t from './schema.ts';
import { type LedgerStore, noteChange } from './store.ts';

/**
 * The transactional outbox's ledger side (docs/architecture.md "GitHub integration"; ADR 0004): rows are
 * written in the same transaction as the state change that needs them, keyed by an idempotency
 * key, claimed by one controller process at a time, and marked sent or failed. Sending them is
 * `functions/github/outbox.ts`.
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

/** Inserts an outbox row unless one with the same key exists; true when inserted. */
export async function enqueue(tx: Tx, now: number, item: EnqueueItem): Promise<boolean> {
  const rows = await tx
    .insert(t.outbox)
    .values({
      kind: item.kind,
      idempotencyKey: item.key,
      reservationId: item.reservationId ?? null,
      payloadJson: JSON.stringify(item.payload),
      status: 'pending',
      nextAttemptAt: item.notBefore ?? now,
      createdAt: now,
    })
    .onConflictDoNothing({ target: t.outbox.idempotencyKey })
    .returning({ id: t.outbox.id });
  // the commit that fills the outbox wakes its sender (`outbox` notice; ADR 0180)
  if (rows.length > 0) noteChange(tx, 'outbox');
  return rows.length > 0;
}

/**
 * Inserts outbox rows in one statement, skipping any whose key exists, and reads nothing back: a
 * batched write can carry it (docs/adr/0185-admission-pass-in-two-round-trips.md). Rows get ids
 * in the order given.
 */
export async function enqueueMany(tx: Tx, now: number, items: readonly EnqueueItem[]): Promise<void> {
  if (items.length === 0) return;
  await tx
    .insert(t.outbox)
    .values(
      items.map((item) => ({
        kind: item.kind,
        idempotencyKey: item.key,
        reservationId: item.reservationId ?? null,
        payloadJson: JSON.stringify(item.payload),
        status: 'pending',
        nextAttemptAt: item.notBefore ?? now,
        createdAt: now,
      })),
    )
    .onConflictDoNothing({ target: t.outbox.idempotencyKey });
  // the commit that fills the outbox wakes its sender (ADR 0180; a row whose key existed wakes it
  // for nothing, which claims nothing)
  noteChange(tx, 'outbox');
}

/** True when an outbox row with this idempotency key exists. */
export async function outboxKeyExists(tx: Tx, key: string): Promise<boolean> {
  const rows = await tx.select({ id: t.outbox.id }).from(t.outbox).where(eq(t.outbox.idempotencyKey, key));
  return rows.length > 0;
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
  await tx.run(sql`INSERT INTO outbox (kind, idempotency_key, reservation_id, payload_json, status, next_attempt_at, created_at)
    SELECT 'check-run', 'check:' || ${reservationId} || ':' || (count(*) + 1), ${reservationId}, ${JSON.stringify({ reservationId })}, 'pending', ${now}, ${now}
    FROM outbox WHERE reservation_id = ${reservationId} AND kind = 'check-run'
    HAVING coalesce(sum(status = 'pending' AND claimed_until IS NULL), 0) = 0
    ON CONFLICT (idempotency_key) DO NOTHING`);
  // the commit wakes the sender (ADR 0180); nothing is read back to know whether a row went in,
  // and a sender woken for nothing claims nothing
  noteChange(tx, 'outbox');
}

/** A cheap read: is any row due now? Most ticks find nothing and should not take the write lock. */
export async function outboxDue(s: LedgerStore): Promise<boolean> {
  const due = await s.db
    .select({ id: t.outbox.id })
    .from(t.outbox)
    .where(and(eq(t.outbox.status, 'pending'), lte(t.outbox.nextAttemptAt, s.clock())))
    .limit(1);
  return due.length > 0;
}

/**
 * When the next pending row can next be claimed (its retry time, a foreign claim's expiry, a rate
 * limit's reset), or null when nothing is pending: the sender's timer for a retry that no commit
 * will announce (ADR 0180).
 */
export async function nextOutboxAttemptAt(s: LedgerStore): Promise<number | null> {
  const rows = await s.db
    .select({
      at: sql<number | null>`MIN(MAX(${t.outbox.nextAttemptAt}, COALESCE(${t.outbox.claimedUntil}, 0)))`,
    })
    .from(t.outbox)
    .where(eq(t.outbox.status, 'pending'));
  const at = rows[0]?.at ?? null;
  if (at == null) return null;
  const pause = Number((await s.getMark(undefined, PAUSE_KEY)) ?? 0);
  return Math.max(Number(at), pause);
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
    const rows = await tx
      .select()
      .from(t.outbox)
      .where(
        and(
          eq(t.outbox.status, 'pending'),
          lte(t.outbox.nextAttemptAt, now),
          kinds ? inArray(t.outbox.kind, [...kinds]) : undefined,
          or(isNull(t.outbox.claimedUntil), lte(t.outbox.claimedUntil, now)),
          // one check-run send per reservation at a time across processes: two concurrent sends
          // both find no check run yet and both create one (seen by test/e2e/load-webhooks)
          sql`NOT (${t.outbox.kind} = 'check-run' AND EXISTS (SELECT 1 FROM outbox AS busy WHERE busy.kind = 'check-run' AND busy.reservation_id = ${t.outbox.reservationId} AND busy.status = 'pending' AND busy.claimed_until > ${now}))`,
        ),
      )
      .orderBy(asc(t.outbox.id))
      .limit(limit);
    if (rows.length) {
      await tx
        .update(t.outbox)
        .set({ claimedBy: workerId, claimedUntil: now + claimMs })
        .where(
          inArray(
            t.outbox.id,
            rows.map((r) => r.id),
          ),
        );
    }
    return rows;
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
    await tx
      .update(t.outbox)
      .set({
        status: 'sent',
        sentAt: now,
        attempts: row.attempts + 1,
        resultJson: JSON.stringify(result),
        claimedBy: null,
        claimedUntil: null,
        lastError: null,
      })
      .where(and(eq(t.outbox.id, row.id), eq(t.outbox.claimedBy, workerId)));
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
    await tx
      .update(t.outbox)
      .set({
        status: f.final ? 'failed' : 'pending',
        attempts: f.attempts,
        nextAttemptAt: f.nextAttemptAt(now),
        lastError: f.message,
        claimedBy: null,
        claimedUntil: null,
      })
      .where(and(eq(t.outbox.id, row.id), eq(t.outbox.claimedBy, workerId)));
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
