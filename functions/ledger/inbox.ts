import { inArray, sql } from 'drizzle-orm';
import type { DeliveryView, InboxStats } from '../../core/protocol/deliveries.ts';
import { isoTime } from '../../core/time.ts';
import { ApiError, notFound } from '../errors.ts';
import { bumpCounter, LEDGER_COUNTERS } from './counters.ts';
import { type Tx, txSql } from './db.ts';
import * as t from './schema.ts';
import type { LedgerStore } from './store.ts';

/**
 * The webhook inbox's ledger commands and reads (docs/architecture.md "Webhook intake is an
 * inbox"). The route inserts a delivery in one raw statement and answers 202; the processor
 * reads pending rows in arrival order and completes each inside the same transaction as its
 * effects, so processing is idempotent per delivery id even with two processors on one ledger.
 */

/** A delivery waiting in (or parked in) the inbox, as the processor reads it. */
export interface InboxRow {
  deliveryId: string;
  event: string;
  action: string | null;
  orderKey: string | null;
  body: string;
  attempts: number;
  nextAttemptAt: number;
  receivedAt: number;
}

export type DeliveryState = DeliveryView['state'];
export type { DeliveryView, InboxStats };

const INSERT = `INSERT INTO webhook_deliveries
  (delivery_id, event, action, received_at, result, state, order_key, body, attempts, next_attempt_at)
  VALUES (?, ?, ?, ?, 'received', 'pending', ?, ?, 0, ?)
  ON CONFLICT (delivery_id) DO NOTHING RETURNING delivery_id`;

/**
 * Inserts a verified delivery in one statement; false when its id is already known (a
 * redelivery, which changes nothing).
 */
export async function insertDelivery(
  s: LedgerStore,
  d: { id: string; event: string; action: string | null; orderKey: string | null; body: string },
): Promise<boolean> {
  const now = s.clock();
  const r = await s.store.exec(INSERT, [d.id, d.event, d.action, now, d.orderKey, d.body, now]);
  if (r.rows.length > 0) return true;
  // a redelivery writes one counter bump and nothing else (rare: GitHub redelivers on request or failure)
  await s.write((tx) => bumpCounter(tx, LEDGER_COUNTERS.deliveries, { result: 'duplicate' }));
  return false;
}

// `state <> 'done'` repeats the partial index's condition so SQLite can use it
const PENDING = `SELECT delivery_id, event, action, order_key, body, attempts, next_attempt_at, received_at
  FROM webhook_deliveries WHERE state <> 'done' AND state = 'pending' ORDER BY rowid LIMIT ?`;

/** Pending deliveries in arrival order (due or not: a later one waits behind its key). */
export async function pendingDeliveries(s: LedgerStore, limit: number): Promise<InboxRow[]> {
  const r = await s.store.client.execute({ sql: PENDING, args: [limit] });
  return r.rows.map((row) => ({
    deliveryId: String(row.delivery_id),
    event: String(row.event),
    action: row.action == null ? null : String(row.action),
    orderKey: row.order_key == null ? null : String(row.order_key),
    body: String(row.body ?? ''),
    attempts: Number(row.attempts),
    nextAttemptAt: Number(row.next_attempt_at ?? 0),
    receivedAt: Number(row.received_at),
  }));
}

/**
 * Claims due deliveries for this processor in one statement by moving their `next_attempt_at`
 * to `until`: other processes on the same ledger then see them as not due, skip them and hold
 * back later deliveries of the same key, so order per key holds across processes too. A
 * processor that dies leaves its claims to expire at `until` (at-least-once). Returns the ids
 * actually claimed (another processor may have taken some first).
 */
export async function claimDeliveries(s: LedgerStore, ids: string[], until: number): Promise<Set<string>> {
  if (!ids.length) return new Set();
  const r = await s.store.exec(
    `UPDATE webhook_deliveries SET next_attempt_at = ? WHERE delivery_id IN (${ids.map(() => '?').join(', ')})
      AND state = 'pending' AND next_attempt_at <= ? RETURNING delivery_id`,
    [until, ...ids, s.clock()],
  );
  return new Set(r.rows.map((row) => String(row.delivery_id)));
}

/** Gives back claims this processor did not use (a delivery behind a failed one of its key). */
export async function releaseClaims(s: LedgerStore, ids: string[], until: number): Promise<void> {
  if (!ids.length) return;
  await s.store.exec(
    `UPDATE webhook_deliveries SET next_attempt_at = ? WHERE delivery_id IN (${ids.map(() => '?').join(', ')})
      AND state = 'pending' AND next_attempt_at = ?`,
    [s.clock(), ...ids, until],
  );
}

/**
 * Completes a pending delivery inside the caller's transaction (with its effects); false when
 * another processor completed it first, so its effects must not be applied again.
 */
export async function completeDelivery(
  tx: Tx,
  now: number,
  id: string,
  result: string,
  counted: 'processed' | 'ignored' = 'processed',
): Promise<boolean> {
  // kept statements on the inbox path (docs/adr/0270-inbox-path-kept-statements.md)
  const { rows } = await txSql(tx).execute(COMPLETE, [result.slice(0, 300), now, id]);
  // counted in the completing transaction: a delivery whose processing rolls back counts nothing
  if (rows.length > 0) await bumpCounter(tx, LEDGER_COUNTERS.deliveries, { result: counted });
  return rows.length > 0;
}

const COMPLETE = `UPDATE webhook_deliveries SET state = 'done', result = ?, processed_at = ?, body = NULL,
  next_attempt_at = NULL WHERE delivery_id = ? AND state = 'pending' RETURNING delivery_id`;

/** Records what a completed delivery did, in words (bounded), inside its transaction. */
export async function setDeliveryResult(tx: Tx, id: string, result: string): Promise<void> {
  await txSql(tx).execute('UPDATE webhook_deliveries SET result = ? WHERE delivery_id = ?', [
    result.slice(0, 300),
    id,
  ]);
}

/** Completes a delivery that needs nothing (ignored event, definitive GitHub answer, bad payload). */
export function finishDelivery(s: LedgerStore, id: string, result: string): Promise<boolean> {
  return s.write((tx, now) => completeDelivery(tx, now, id, result, 'ignored'));
}

/**
 * Records a failed attempt: the delivery is retried at `retryAt`, or parked with its error once
 * it has failed `maxAttempts` times (an audited `webhook.parked` event says why).
 */
export function failDelivery(
  s: LedgerStore,
  id: string,
  o: { error: string; retryAt: number; maxAttempts: number },
): Promise<'retry' | 'parked' | 'gone'> {
  const error = o.error.slice(0, 500);
  return s.write(async (tx, now) => {
    const rows = await tx.all<{ attempts: number; event: string }>(
      sql`UPDATE webhook_deliveries SET attempts = attempts + 1, last_error = ${error},
        next_attempt_at = ${Math.max(o.retryAt, now)},
        state = CASE WHEN attempts + 1 >= ${o.maxAttempts} THEN 'parked' ELSE 'pending' END,
        result = CASE WHEN attempts + 1 >= ${o.maxAttempts} THEN 'parked: ' || ${error.slice(0, 280)} ELSE result END
        WHERE delivery_id = ${id} AND state = 'pending' RETURNING attempts, event`,
    );
    const row = rows[0];
    if (!row) return 'gone';
    if (Number(row.attempts) < o.maxAttempts) return 'retry';
    await bumpCounter(tx, LEDGER_COUNTERS.deliveries, { result: 'parked' });
    await s.record(tx, now, {
      subjectType: 'webhook',
      subjectId: id,
      type: 'webhook.parked',
      cause: `${row.event} delivery failed ${row.attempts} times: ${error}`.slice(0, 500),
      actor: 'controller',
      data: { attempts: Number(row.attempts) },
    });
    return 'parked';
  });
}

/**
 * An operator's retry of a parked (or still pending) delivery: it becomes due now with a fresh
 * attempt budget. A delivery already done is a clear 409, and nothing changes.
 */
export function retryDelivery(s: LedgerStore, id: string, actor: string): Promise<DeliveryView> {
  return s.write(async (tx, now) => {
    const before = await tx.all<{ state: string; event: string; attempts: number }>(
      sql`SELECT state, event, attempts FROM webhook_deliveries WHERE delivery_id = ${id}`,
    );
    const row = before[0];
    if (!row) throw notFound(`delivery ${id}`);
    if (row.state === 'done') {
      throw new ApiError(409, 'already_processed', `delivery ${id} was already processed; nothing to retry`);
    }
    await tx.run(
      sql`UPDATE webhook_deliveries SET state = 'pending', attempts = 0, next_attempt_at = ${now},
        result = 'received' WHERE delivery_id = ${id}`,
    );
    await s.record(tx, now, {
      subjectType: 'webhook',
      subjectId: id,
      type: 'webhook.retried',
      fromState: row.state,
      toState: 'pending',
      cause: `operator retry of ${row.event} delivery after ${row.attempts} attempts`,
      actor,
    });
    const view = await deliveryIn(tx, id);
    if (!view) throw notFound(`delivery ${id}`);
    return view;
  });
}

type ViewRow = {
  delivery_id: string;
  event: string;
  action: string | null;
  state: string;
  received_at: number;
  processed_at: number | null;
  attempts: number;
  next_attempt_at: number | null;
  result: string;
  last_error: string | null;
};

const VIEW_COLUMNS = sql.raw(
  'delivery_id, event, action, state, received_at, processed_at, attempts, next_attempt_at, result, last_error',
);

function toView(r: ViewRow): DeliveryView {
  return {
    id: r.delivery_id,
    event: r.event,
    action: r.action,
    state: r.state as DeliveryState,
    receivedAt: isoTime(r.received_at),
    processedAt: isoTime(r.processed_at),
    attempts: Number(r.attempts),
    nextAttemptAt: r.state === 'pending' ? isoTime(r.next_attempt_at) : null,
    result: r.result,
    lastError: r.last_error,
  };
}

async function deliveryIn(q: Pick<Tx, 'all'>, id: string): Promise<DeliveryView | null> {
  const rows = await q.all<ViewRow>(
    sql`SELECT ${VIEW_COLUMNS} FROM webhook_deliveries WHERE delivery_id = ${id}`,
  );
  return rows[0] ? toView(rows[0]) : null;
}

/** One delivery by id, or null. */
export function getDelivery(s: LedgerStore, id: string): Promise<DeliveryView | null> {
  return deliveryIn(s.db, id);
}

/**
 * Deliveries for operators: by default the open ones (pending and parked, oldest first) then
 * the most recent done ones, `limit` in all.
 */
export async function listDeliveries(
  s: LedgerStore,
  o: { state?: DeliveryState | undefined; limit: number },
): Promise<DeliveryView[]> {
  if (o.state === 'done') {
    const rows = await s.db.all<ViewRow>(
      sql`SELECT ${VIEW_COLUMNS} FROM webhook_deliveries WHERE state = 'done' ORDER BY rowid DESC LIMIT ${o.limit}`,
    );
    return rows.map(toView);
  }
  const open = await s.db.all<ViewRow>(
    o.state
      ? sql`SELECT ${VIEW_COLUMNS} FROM webhook_deliveries WHERE state <> 'done' AND state = ${o.state} ORDER BY rowid LIMIT ${o.limit}`
      : sql`SELECT ${VIEW_COLUMNS} FROM webhook_deliveries WHERE state <> 'done' ORDER BY rowid LIMIT ${o.limit}`,
  );
  if (o.state || open.length >= o.limit) return open.map(toView);
  const done = await s.db.all<ViewRow>(
    sql`SELECT ${VIEW_COLUMNS} FROM webhook_deliveries WHERE state = 'done' ORDER BY rowid DESC LIMIT ${o.limit - open.length}`,
  );
  return [...open, ...done].map(toView);
}

/** Inbox depth (pending, parked) and the age of the oldest pending delivery. */
export async function inboxStats(s: LedgerStore): Promise<InboxStats> {
  const rows = await s.db.all<{ state: string; n: number; oldest: number | null }>(
    sql`SELECT state, count(*) AS n, min(received_at) AS oldest FROM webhook_deliveries
      WHERE state <> 'done' GROUP BY state`,
  );
  const pending = rows.find((r) => r.state === 'pending');
  const parked = rows.find((r) => r.state === 'parked');
  return {
    pending: Number(pending?.n ?? 0),
    parked: Number(parked?.n ?? 0),
    oldestPendingAgeMs: pending?.oldest == null ? 0 : Math.max(0, s.clock() - Number(pending.oldest)),
  };
}

/** The ones of `ids` the inbox holds (any state): a redelivery of those would be a no-op. */
export async function inboxHolds(s: LedgerStore, ids: readonly string[]): Promise<Set<string>> {
  if (!ids.length) return new Set();
  const rows = await s.db
    .select({ id: t.webhookDeliveries.deliveryId })
    .from(t.webhookDeliveries)
    .where(inArray(t.webhookDeliveries.deliveryId, [...ids]));
  return new Set(rows.map((r) => r.id));
}

const REDELIVERY_REQUESTED_KEY = 'github:redelivery_requested';

/** GUIDs whose redelivery the controller asked GitHub for (ADR 0091), with when. */
export async function redeliveriesRequested(s: LedgerStore): Promise<Record<string, number>> {
  return JSON.parse((await s.getMark(undefined, REDELIVERY_REQUESTED_KEY)) ?? '{}') as Record<string, number>;
}

/**
 * Records that GitHub accepted a redelivery request for `guid` (one per GUID): remembered while
 * it can still be a candidate (`keepMs`), counted, and audited as `webhook.redelivery_requested`.
 * A failed request is only counted, so the next sweep asks again.
 */
export function recordRedeliveryRequest(
  s: LedgerStore,
  o: { guid: string; ok: boolean; keepMs: number; cause: string; data: Record<string, unknown> },
): Promise<void> {
  return s.write(async (tx, now) => {
    await bumpCounter(tx, 'spark_webhook_redeliveries_total', { result: o.ok ? 'requested' : 'failed' });
    if (!o.ok) return;
    const cur = JSON.parse((await s.getMark(tx, REDELIVERY_REQUESTED_KEY)) ?? '{}') as Record<string, number>;
    const kept = Object.fromEntries(Object.entries(cur).filter(([, at]) => at >= now - o.keepMs));
    kept[o.guid] = now;
    await s.setMark(tx, REDELIVERY_REQUESTED_KEY, JSON.stringify(kept));
    await s.record(tx, now, {
      subjectType: 'webhook',
      subjectId: o.guid,
      type: 'webhook.redelivery_requested',
      cause: o.cause.slice(0, 500),
      actor: 'controller',
      data: o.data,
    });
  });
}
