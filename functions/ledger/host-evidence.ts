import { eq } from 'drizzle-orm';
import { type HostEvidence, parseHostEvidence } from '../../core/protocol/host-evidence.ts';
import type { RawSql, Tx } from './db.ts';
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

// every column, as drizzle's `select()` named them: the same plan on `host_evidence_reservation`,
// so the same row order (a later row of the same host wins below)
const EVIDENCE_OF_RESERVATION =
  'SELECT lease_id, reservation_id, host_id, fencing_token, evidence_json, recorded_at FROM host_evidence WHERE reservation_id = ?';

/**
 * The evidence of every lease of `reservationId`, by host. A host holds one lease of a
 * reservation; a row that does not parse is left out (and the check then cannot pass). A kept
 * statement: the check-run sender reads it for every granted reservation it renders
 * (docs/adr/0290-outbox-kept-statements.md).
 */
export async function hostEvidenceOf(
  q: RawSql,
  reservationId: string,
): Promise<Record<string, HostEvidence>> {
  const rs = await q.execute(EVIDENCE_OF_RESERVATION, [reservationId]);
  const out: Record<string, HostEvidence> = {};
  for (const row of rs.rows) {
    const e = parseHostEvidence(row.evidence_json as string);
    if (e) out[row.host_id as string] = e;
  }
  return out;
}
