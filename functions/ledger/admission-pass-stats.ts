/** How this process's passes on one ledger store went (the bench and the tests read it). */
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

/** Fresh counters; each {@link import('./store.ts').LedgerStore} holds its own. */
export function newAdmissionPassStats(): AdmissionPassStats {
  return { batched: 0, conflicts: 0, interactive: 0, wholeQueueReads: 0 };
}

/** The pass counters of a ledger store (a thin accessor: the store holds them). */
export function admissionPassStats(s: { readonly passStats: AdmissionPassStats }): AdmissionPassStats {
  return s.passStats;
}
