import { and, eq } from 'drizzle-orm';
import { leaseEvent } from '../../core/events.ts';
import type { LeaseStatus } from '../../core/model.ts';
import { assertLeaseTransition } from '../../core/state-machines.ts';
import type { Tx } from './db.ts';
import { leasesOfReservation } from './raw-rows.ts';
import type { LeaseRow } from './rows.ts';
import * as t from './schema.ts';
import type { LedgerStore } from './store.ts';

/**
 * A reservation's leases and a lease's one status move through the transition table: the layer the
 * lease and reservation commands share (docs/adr/0220-one-ledger-front-door.md).
 */

/** The leases of a reservation, by host. */
export async function leasesOf(
  s: LedgerStore,
  tx: Tx | undefined,
  reservationId: string,
): Promise<LeaseRow[]> {
  return leasesOfReservation(s.store.raw(tx), reservationId);
}

/** Moves a lease through the transition table and records it. */
export async function setLeaseStatus(
  s: LedgerStore,
  tx: Tx,
  now: number,
  lease: LeaseRow,
  to: LeaseStatus,
  cause: string,
  actor: string,
): Promise<void> {
  assertLeaseTransition(lease.status as LeaseStatus, to);
  await tx
    .update(t.leases)
    .set({ status: to, ...(to === 'released' ? { releasedAt: now } : {}) })
    .where(and(eq(t.leases.id, lease.id), eq(t.leases.status, lease.status)));
  await s.record(tx, now, {
    subjectType: 'lease',
    subjectId: lease.id,
    type: leaseEvent(to),
    fromState: lease.status,
    toState: to,
    cause,
    actor,
    data: { reservationId: lease.reservationId, hostId: lease.hostId, fencingToken: lease.fencingToken },
  });
  lease.status = to;
}
