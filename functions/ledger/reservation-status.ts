import { getTableColumns } from 'drizzle-orm';
import { reservationEvent } from '../../core/events.ts';
import type { Outcome, ReservationStatus } from '../../core/model.ts';
import { assertReservationTransition } from '../../core/state-machines.ts';
import { type RawSql, type Tx, txSql } from './db.ts';
import { reservationById } from './raw-rows.ts';
import type { ReservationRow } from './rows.ts';
import * as t from './schema.ts';
import type { LedgerStore } from './store.ts';

/**
 * A reservation's row and its one status move through the transition table: the layer the host,
 * lease and reservation commands share, so they no longer import each other in a circle
 * (docs/adr/0220-one-ledger-front-door.md).
 */

export type ReservationPatch = Partial<typeof t.reservations.$inferInsert>;

export async function getReservation(
  s: LedgerStore,
  tx: Tx | undefined,
  id: string,
): Promise<ReservationRow | null> {
  // a kept statement, not drizzle's query building: the inbox, the outbox and the hooks read a
  // reservation several times per delivery (docs/adr/0270-inbox-path-kept-statements.md)
  return reservationById(s.store.raw(tx), id);
}

/**
 * Moves a reservation through the transition table and records why. Ending it clears the queue
 * position and wait code, so a finished reservation never reports how it once waited.
 */
export async function transitionReservation(
  s: LedgerStore,
  tx: Tx,
  now: number,
  r: ReservationRow,
  to: ReservationStatus,
  cause: string,
  actor: string,
  extra: ReservationPatch & { outcome?: Outcome | null } = {},
  data?: Record<string, unknown>,
): Promise<void> {
  assertReservationTransition(r.status as ReservationStatus, to);
  const terminal = ['done', 'cancelled', 'superseded', 'failed'].includes(to);
  const patch: ReservationPatch = {
    status: to,
    updatedAt: now,
    ...(terminal ? { endedAt: now, reason: cause, position: null, waitCode: null } : {}),
    ...extra,
  };
  // compare-and-set on the status read in this transaction
  await updateReservationIfStatus(txSql(tx), r.id, r.status, patch);
  await s.record(tx, now, {
    subjectType: 'reservation',
    subjectId: r.id,
    type: reservationEvent(to),
    fromState: r.status,
    toState: to,
    cause,
    actor,
    data: data ?? null,
  });
  Object.assign(r, patch);
}

// each field's column, from the schema (read once, no query building)
const COLUMN_OF: ReadonlyMap<string, string> = new Map(
  Object.entries(getTableColumns(t.reservations)).map(([key, col]) => [key, col.name]),
);
// one text per set of fields patched (a few: each transition sets the same ones), kept prepared
const patchSql = new Map<string, string>();

/**
 * `UPDATE reservations SET … WHERE id = ? AND status = ?` with the patch's fields, as drizzle's
 * `update().set(patch)` wrote them (a field left undefined is not written, a null is), on a kept
 * statement: a transition runs for most deliveries (docs/adr/0290-outbox-kept-statements.md).
 * `test/integration/ledger-raw-rows-outbox.test.ts` checks it against drizzle's update.
 */
export async function updateReservationIfStatus(
  q: RawSql,
  id: string,
  status: string,
  patch: ReservationPatch,
): Promise<void> {
  const keys: string[] = [];
  const args: (string | number | null)[] = [];
  for (const [key, value] of Object.entries(patch)) {
    if (value === undefined) continue;
    const column = COLUMN_OF.get(key);
    if (!column) throw new TypeError(`reservations has no field ${key}`);
    keys.push(column);
    args.push(value as string | number | null);
  }
  if (keys.length === 0) throw new TypeError('a reservation update needs at least one field');
  const sig = keys.join(',');
  let text = patchSql.get(sig);
  if (!text) {
    text = `UPDATE reservations SET ${keys.map((c) => `${c} = ?`).join(', ')} WHERE id = ? AND status = ?`;
    patchSql.set(sig, text);
  }
  await q.execute(text, [...args, id, status]);
}

// every column in the table's order, as drizzle's insert names them, with the schema's defaults
// (plain values only: a default built in SQL would need drizzle to render it)
const FIELDS = Object.entries(getTableColumns(t.reservations)).map(([field, c]) => {
  const d = c.default as unknown;
  if (d != null && typeof d !== 'string' && typeof d !== 'number')
    throw new TypeError(`reservations.${c.name}: a default that is not a plain value`);
  return { field, column: c.name, otherwise: (d ?? null) as string | number | null };
});
const INSERT_RESERVATION = `INSERT INTO reservations (${FIELDS.map((f) => f.column).join(', ')}) VALUES (${FIELDS.map(() => '?').join(', ')})`;
const NEXT_SEQ = 'SELECT coalesce(max(seq), 0) + 1 AS next FROM reservations';

/** The next reservation number (inside the creating transaction). */
export async function nextReservationSeq(q: RawSql): Promise<number> {
  return Number((await q.execute(NEXT_SEQ)).rows[0]!.next);
}

/**
 * Inserts a reservation as drizzle's `insert().values(row)` did: a field left undefined takes the
 * schema's default, else NULL. One kept statement (docs/adr/0290-outbox-kept-statements.md).
 */
export async function insertReservationRow(
  q: RawSql,
  row: typeof t.reservations.$inferInsert,
): Promise<void> {
  const values = row as Record<string, unknown>;
  await q.execute(
    INSERT_RESERVATION,
    FIELDS.map((f) => {
      const v = values[f.field];
      return v === undefined ? f.otherwise : (v as string | number | null);
    }),
  );
}
