import type { RawSql } from './db.ts';
import { asJson, indicesOf, jsonRowsOf, num, numOrNull, placeholders, str, strOrNull } from './raw-rows.ts';
import type { OutboxRow } from './rows.ts';

/**
 * The outbox's statements as hand-written SQL on kept statements: the sender runs them for every
 * row it sends (the due read, the next attempt, the claim, the sent mark), and drizzle building
 * each of them cost more than running it (docs/adr/0270-inbox-path-kept-statements.md,
 * docs/adr/0290-outbox-kept-statements.md). Each is the statement drizzle built before, with the
 * same arguments bound; `test/integration/ledger-raw-rows-outbox.test.ts` checks the rows and the
 * writes against drizzle's.
 */

const OUTBOX_COLS = [
  'id',
  'kind',
  'idempotency_key',
  'reservation_id',
  'payload_json',
  'status',
  'attempts',
  'next_attempt_at',
  'claimed_by',
  'claimed_until',
  'last_error',
  'result_json',
  'created_at',
  'sent_at',
] as const;
const O = indicesOf(OUTBOX_COLS);

function outboxOf(v: readonly unknown[]): OutboxRow {
  return {
    id: num(v[O.id]),
    kind: str(v[O.kind]),
    idempotencyKey: str(v[O.idempotency_key]),
    reservationId: strOrNull(v[O.reservation_id]),
    payloadJson: str(v[O.payload_json]),
    status: str(v[O.status]),
    attempts: num(v[O.attempts]),
    nextAttemptAt: num(v[O.next_attempt_at]),
    claimedBy: strOrNull(v[O.claimed_by]),
    claimedUntil: numOrNull(v[O.claimed_until]),
    lastError: strOrNull(v[O.last_error]),
    resultJson: strOrNull(v[O.result_json]),
    createdAt: num(v[O.created_at]),
    sentAt: numOrNull(v[O.sent_at]),
  };
}

/** The columns an enqueue writes; `attempts` is the schema's default (0), as drizzle bound it. */
export interface OutboxInsert {
  kind: string;
  key: string;
  reservationId: string | null;
  payloadJson: string;
  nextAttemptAt: number;
  createdAt: number;
}

const INSERT_ONE = `INSERT INTO outbox (kind, idempotency_key, reservation_id, payload_json, status, attempts, next_attempt_at, created_at) VALUES (?, ?, ?, ?, 'pending', 0, ?, ?) ON CONFLICT (idempotency_key) DO NOTHING RETURNING id`;

/** One row unless its key exists; true when inserted. */
export async function insertOutboxRow(q: RawSql, r: OutboxInsert): Promise<boolean> {
  const rs = await q.execute(INSERT_ONE, [
    r.kind,
    r.key,
    r.reservationId,
    r.payloadJson,
    r.nextAttemptAt,
    r.createdAt,
  ]);
  return rs.rows.length > 0;
}

// every row as one JSON argument: one statement text whatever the number of rows (kept prepared),
// inserted in the array's order so ids follow it. `WHERE true` keeps SQLite from reading the
// upsert's ON as a join constraint (https://www.sqlite.org/lang_upsert.html, "Parsing Ambiguity").
const INSERT_MANY = `INSERT INTO outbox (kind, idempotency_key, reservation_id, payload_json, status, attempts, next_attempt_at, created_at)
  SELECT e.value ->> 0, e.value ->> 1, e.value ->> 2, e.value ->> 3, 'pending', 0, e.value ->> 4, e.value ->> 5
  FROM json_each(?) AS e WHERE true ORDER BY e.key
  ON CONFLICT (idempotency_key) DO NOTHING`;

/** Rows in one statement, skipping any whose key exists, nothing read back (a batch can carry it). */
export async function insertOutboxRows(q: RawSql, rows: readonly OutboxInsert[]): Promise<void> {
  await q.execute(INSERT_MANY, [
    JSON.stringify(
      rows.map((r) => [r.kind, r.key, r.reservationId, r.payloadJson, r.nextAttemptAt, r.createdAt]),
    ),
  ]);
}

const KEY_EXISTS = 'SELECT id FROM outbox WHERE idempotency_key = ?';

/** True when a row with this idempotency key exists. */
export async function outboxKeyRowExists(q: RawSql, key: string): Promise<boolean> {
  return (await q.execute(KEY_EXISTS, [key])).rows.length > 0;
}

// the same statement drizzle's `sql` template ran (functions/ledger/outbox.ts enqueueCheckSync)
const CHECK_SYNC = `INSERT INTO outbox (kind, idempotency_key, reservation_id, payload_json, status, next_attempt_at, created_at)
    SELECT 'check-run', 'check:' || ? || ':' || (count(*) + 1), ?, ?, 'pending', ?, ?
    FROM outbox WHERE reservation_id = ? AND kind = 'check-run'
    HAVING coalesce(sum(status = 'pending' AND claimed_until IS NULL), 0) = 0
    ON CONFLICT (idempotency_key) DO NOTHING`;

/** Queues a check-run row for the reservation unless an unclaimed pending one exists. */
export async function insertCheckSync(q: RawSql, now: number, reservationId: string): Promise<void> {
  await q.execute(CHECK_SYNC, [
    reservationId,
    reservationId,
    JSON.stringify({ reservationId }),
    now,
    now,
    reservationId,
  ]);
}

// 'pending' bound, as drizzle bound it: the same plan on `outbox_due (status, next_attempt_at)`
const DUE = 'SELECT id FROM outbox WHERE status = ? AND next_attempt_at <= ? LIMIT 1';

/** Whether any pending row is due at `now`. */
export async function anyOutboxDue(q: RawSql, now: number): Promise<boolean> {
  return (await q.execute(DUE, ['pending', now])).rows.length > 0;
}

const NEXT_AT =
  'SELECT MIN(MAX(next_attempt_at, COALESCE(claimed_until, 0))) AS at FROM outbox WHERE status = ?';

/** The earliest time a pending row can next be claimed, or null when nothing is pending. */
export async function nextPendingAt(q: RawSql): Promise<number | null> {
  const at = (await q.execute(NEXT_AT, ['pending'])).rows[0]?.at;
  return at == null ? null : Number(at);
}

const CLAIM_HOLDERS = 'SELECT DISTINCT claimed_by FROM outbox WHERE status = ? AND claimed_until > ?';

/** The workers holding an unexpired claim on a pending row at `now`. */
export async function claimHolders(q: RawSql, now: number): Promise<string[]> {
  const rs = await q.execute(CLAIM_HOLDERS, ['pending', now]);
  return rs.rows.map((r) => String(r.claimed_by));
}

const RELEASE_CLAIMS = `UPDATE outbox SET claimed_by = NULL, claimed_until = NULL
  WHERE status = 'pending' AND claimed_by = ? AND claimed_until > ? RETURNING id`;

/** Drops the unexpired claims `workerId` holds on pending rows; returns how many. */
export async function releaseClaims(q: RawSql, workerId: string, now: number): Promise<number> {
  return (await q.execute(RELEASE_CLAIMS, [workerId, now])).rows.length;
}

const claimableFilter = (kinds: number) =>
  `FROM outbox WHERE status = ? AND next_attempt_at <= ?${kinds ? ` AND kind IN (${placeholders(kinds)})` : ''}
  AND (claimed_until IS NULL OR claimed_until <= ?)
  AND NOT (kind = 'check-run' AND EXISTS (SELECT 1 FROM outbox AS busy WHERE busy.kind = 'check-run' AND busy.reservation_id = outbox.reservation_id AND busy.status = 'pending' AND busy.claimed_until > ?))`;
const claimableWhere = (kinds: number) => `${claimableFilter(kinds)}
  ORDER BY id ASC LIMIT ?`;
// one text per number of kinds (a lane has a fixed list, so a few texts, each kept prepared)
const claimableSql = new Map<number, string>();
const anyClaimableSql = new Map<number, string>();

/**
 * Whether {@link claimableRows} would return a row: the sender's read before a claim, outside any
 * transaction, so a wake with nothing to claim (a row in flight, another lane's row, a check run
 * behind one in flight) takes no write lock (docs/adr/0315-outbox-sender-wakes.md).
 */
export async function anyClaimable(
  q: RawSql,
  now: number,
  kinds: readonly string[] | undefined,
): Promise<boolean> {
  if (kinds && kinds.length === 0) return false;
  const n = kinds?.length ?? 0;
  let text = anyClaimableSql.get(n);
  if (!text) {
    // no order: the first row found answers, without sorting every candidate first
    text = `SELECT id ${claimableFilter(n)} LIMIT ?`;
    anyClaimableSql.set(n, text);
  }
  return (await q.execute(text, ['pending', now, ...(kinds ?? []), now, now, 1])).rows.length > 0;
}

/**
 * Pending rows due at `now` that nobody holds, by id, at most `limit`, only of `kinds` when given;
 * a check run is left while another of its reservation's is claimed (functions/ledger/outbox.ts).
 */
export function claimableRows(
  q: RawSql,
  now: number,
  limit: number,
  kinds: readonly string[] | undefined,
): Promise<OutboxRow[]> {
  // an empty list matches nothing, as drizzle's `inArray` with no values (`false`)
  if (kinds && kinds.length === 0) return Promise.resolve([]);
  const n = kinds?.length ?? 0;
  let text = claimableSql.get(n);
  if (!text) {
    text = asJson(OUTBOX_COLS.join(', '), claimableWhere(n));
    claimableSql.set(n, text);
  }
  return jsonRowsOf(q, text, ['pending', now, ...(kinds ?? []), now, now, limit], OUTBOX_COLS, outboxOf);
}

// the ids as one JSON argument: one text whatever their number
const CLAIM =
  'UPDATE outbox SET claimed_by = ?, claimed_until = ? WHERE id IN (SELECT value FROM json_each(?))';

/** Claims the rows for `workerId` until `until`. */
export async function claimRows(
  q: RawSql,
  ids: readonly number[],
  workerId: string,
  until: number,
): Promise<void> {
  await q.execute(CLAIM, [workerId, until, JSON.stringify(ids)]);
}

const MARK_SENT = `UPDATE outbox SET status = 'sent', attempts = ?, claimed_by = NULL, claimed_until = NULL, last_error = NULL, result_json = ?, sent_at = ? WHERE id = ? AND claimed_by = ?`;

/** Marks a row sent if `workerId` still holds its claim. */
export async function markRowSent(
  q: RawSql,
  id: number,
  workerId: string,
  f: { attempts: number; resultJson: string; now: number },
): Promise<void> {
  await q.execute(MARK_SENT, [f.attempts, f.resultJson, f.now, id, workerId]);
}

const MARK_FAILED = `UPDATE outbox SET status = ?, attempts = ?, next_attempt_at = ?, claimed_by = NULL, claimed_until = NULL, last_error = ? WHERE id = ? AND claimed_by = ?`;

/** Records a failed send (pending again, or `failed`) if `workerId` still holds the claim. */
export async function markRowFailed(
  q: RawSql,
  id: number,
  workerId: string,
  f: { status: 'pending' | 'failed'; attempts: number; nextAttemptAt: number; lastError: string },
): Promise<void> {
  await q.execute(MARK_FAILED, [f.status, f.attempts, f.nextAttemptAt, f.lastError, id, workerId]);
}
