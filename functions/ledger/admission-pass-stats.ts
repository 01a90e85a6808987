import type { LedgerStore } from './store.ts';

/** How this process's passes on one ledger went (the bench and the tests read it). */
export interface AdmissionPassStats {
  /** Passes applied as one read batch and at most one write batch (remote ledgers). */
  batched: number;
  /** Write batches refused because another pass, or a change to what it granted, came first. */
  conflicts: number;
  /** Passes run as one interactive write transaction (local ledgers, and the remote fallback). */
  interactive: number;
  /** Passes whose queue head could not decide alone, so they read the whole queue (admission-input.ts `headDecides`). */
  wholeQueueReads: number;
}

const passStats = new WeakMap<LedgerStore, AdmissionPassStats>();

export function admissionPassStats(s: LedgerStore): AdmissionPassStats {
  const known = passStats.get(s);
  if (known) return known;
  const fresh = { batched: 0, conflicts: 0, interactive: 0, wholeQueueReads: 0 };
  passStats.set(s, fresh);
  return fresh;
}
