import { eq } from 'drizzle-orm';
import type { HostPhase } from '../../core/model.ts';
import { assertHostTransition } from '../../core/state-machines.ts';
import type { Tx } from './db.ts';
import type { HostRow } from './rows.ts';
import * as t from './schema.ts';
import type { LedgerStore } from './store.ts';

/**
 * A host's row and its one phase move through the transition table: the layer the host, lease and
 * reservation commands share (docs/adr/0220-one-ledger-front-door.md).
 */

export async function getHost(s: LedgerStore, tx: Tx | undefined, id: string): Promise<HostRow | null> {
  const rows = await (tx ?? s.db).select().from(t.hosts).where(eq(t.hosts.id, id));
  return rows[0] ?? null;
}

/** Moves a host's persisted phase through the transition table and records it. */
export async function setHostPhase(
  s: LedgerStore,
  tx: Tx,
  now: number,
  host: HostRow,
  to: HostPhase,
  cause: string,
  actor: string,
): Promise<void> {
  if (host.phase === to) return;
  assertHostTransition(host.phase as HostPhase, to);
  await tx.update(t.hosts).set({ phase: to, updatedAt: now }).where(eq(t.hosts.id, host.id));
  await s.record(tx, now, {
    subjectType: 'host',
    subjectId: host.id,
    type: 'host.phase',
    fromState: host.phase,
    toState: to,
    cause,
    actor,
  });
  host.phase = to;
}
