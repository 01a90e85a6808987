import { and, eq } from 'drizzle-orm';
import { reservationEvent } from '../../core/events.ts';
import type { Outcome, ReservationStatus } from '../../core/model.ts';
import { assertReservationTransition } from '../../core/state-machines.ts';
import type { Tx } from './db.ts';
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
  await tx
    .update(t.reservations)
    .set(patch)
    .where(and(eq(t.reservations.id, r.id), eq(t.reservations.status, r.status)));
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
