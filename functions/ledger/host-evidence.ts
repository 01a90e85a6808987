import { eq } from 'drizzle-orm';
import { type HostEvidence, parseHostEvidence } from '../../core/protocol/host-evidence.ts';
import type { Tx } from './db.ts';
import type { LeaseRow } from './rows.ts';
import * as t from './schema.ts';
import type { LedgerStore } from './store.ts';

/**
 * The host's evidence of each lease's run (ADR 0160): written once per lease by the agent's
 * `runner_exited` report (functions/ledger/agent-reports.ts), read by the check run and the lease
 * endpoints. A second report of the same lease keeps the first (reports are idempotent).
 */

/** Stores `e` for `lease`; returns false when the lease already has its evidence. */
export async function recordHostEvidence(
  tx: Tx,
  now: number,
  lease: Pick<LeaseRow, 'id' | 'reservationId' | 'hostId' | 'fencingToken'>,
  e: HostEvidence,
): Promise<boolean> {
  const rows = await tx
    .insert(t.hostEvidence)
    .values({
      leaseId: lease.id,
      reservationId: lease.reservationId,
      hostId: lease.hostId,
      fencingToken: lease.fencingToken,
      evidenceJson: JSON.stringify(e),
      recordedAt: now,
    })
    .onConflictDoNothing({ target: t.hostEvidence.leaseId })
    .returning({ id: t.hostEvidence.leaseId });
  return rows.length > 0;
}

/** Whether the agent has reported the evidence of `leaseId` (the runner has exited). */
export async function hasHostEvidence(q: Tx | LedgerStore['db'], leaseId: string): Promise<boolean> {
  const rows = await q
    .select({ id: t.hostEvidence.leaseId })
    .from(t.hostEvidence)
    .where(eq(t.hostEvidence.leaseId, leaseId));
  return rows.length > 0;
}

/**
 * The evidence of every lease of `reservationId`, by host. A host holds one lease of a
 * reservation; a row that does not parse is left out (and the check then cannot pass).
 */
export async function hostEvidenceOf(
  q: Tx | LedgerStore['db'],
  reservationId: string,
): Promise<Record<string, HostEvidence>> {
  const rows = await q.select().from(t.hostEvidence).where(eq(t.hostEvidence.reservationId, reservationId));
  const out: Record<string, HostEvidence> = {};
  for (const row of rows) {
    const e = parseHostEvidence(row.evidenceJson);
    if (e) out[row.hostId] = e;
  }
  return out;
}
