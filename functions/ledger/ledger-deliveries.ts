import type { Tx } from './db.ts';
import * as inbox from './inbox.ts';
import type { After } from './ledger-github.ts';
import * as outbox from './outbox.ts';
import * as queries from './queries.ts';
import type { OutboxRow } from './rows.ts';
import { applySentEffect, type SentEffect } from './sent-effects.ts';
import type { LedgerStore } from './store.ts';

/**
 * The webhook inbox, `ledger.inbox` (docs/adr/0035-webhook-inbox.md;
 * docs/adr/0240-ledger-front-door-only.md): deliveries stored on arrival, drained in order, each
 * completed in the transaction that applies its effects.
 */
export class InboxLedger {
  constructor(private readonly s: LedgerStore) {}

  /** Stores a verified delivery once; false for a redelivery of one already stored. */
  insert(...a: After<typeof inbox.insertDelivery>) {
    return inbox.insertDelivery(this.s, ...a);
  }
  pending(limit: number) {
    return inbox.pendingDeliveries(this.s, limit);
  }
  claim(...a: After<typeof inbox.claimDeliveries>) {
    return inbox.claimDeliveries(this.s, ...a);
  }
  releaseClaims(...a: After<typeof inbox.releaseClaims>) {
    return inbox.releaseClaims(this.s, ...a);
  }
  /**
   * Applies a delivery exactly once: one transaction claims the inbox row (pending → done), runs
   * `apply` and records its result in words. Null when another processor completed it first.
   */
  apply(
    id: string,
    apply: (tx: Tx, now: number, changed: Set<string>) => Promise<string>,
  ): Promise<string | null> {
    return this.s.write(async (tx, now, changed) => {
      // claim first: a delivery completed by another processor must not apply its effects twice
      if (!(await inbox.completeDelivery(tx, now, id, 'processing'))) return null;
      const result = await apply(tx, now, changed);
      await inbox.setDeliveryResult(tx, id, result);
      return result;
    });
  }
  /** Completes a delivery that needs nothing; false when it was already completed. */
  finish(id: string, result: string) {
    return inbox.finishDelivery(this.s, id, result);
  }
  fail(...a: After<typeof inbox.failDelivery>) {
    return inbox.failDelivery(this.s, ...a);
  }
  /** An operator's retry of a parked delivery. */
  retry(...a: After<typeof inbox.retryDelivery>) {
    return inbox.retryDelivery(this.s, ...a);
  }
  get(id: string) {
    return inbox.getDelivery(this.s, id);
  }
  list(...a: After<typeof inbox.listDeliveries>) {
    return inbox.listDeliveries(this.s, ...a);
  }
  stats() {
    return inbox.inboxStats(this.s);
  }
  /** Which of `ids` the inbox holds. */
  holds(ids: readonly string[]) {
    return inbox.inboxHolds(this.s, ids);
  }
  redeliveriesRequested() {
    return inbox.redeliveriesRequested(this.s);
  }
  recordRedeliveryRequest(...a: After<typeof inbox.recordRedeliveryRequest>) {
    return inbox.recordRedeliveryRequest(this.s, ...a);
  }
}

/**
 * The transactional outbox, `ledger.outbox` (ADR 0004; docs/adr/0240-ledger-front-door-only.md):
 * rows written by ledger commands in their transactions, claimed, sent and marked by the GitHub
 * part's sender.
 */
export class OutboxLedger {
  constructor(private readonly s: LedgerStore) {}

  /** Whether any row is due now. */
  due() {
    return outbox.outboxDue(this.s);
  }
  /** Whether a claim of `kinds` (default all) now would claim a row. */
  claimable(kinds?: readonly outbox.OutboxKind[]) {
    return outbox.outboxClaimable(this.s, kinds);
  }
  nextAttemptAt() {
    return outbox.nextOutboxAttemptAt(this.s);
  }
  claimDue(...a: After<typeof outbox.claimDue>) {
    return outbox.claimDue(this.s, ...a);
  }
  /**
   * A row sent: marked, and what GitHub's answer means for the ledger (`effect`, named as data)
   * written in the same transaction (docs/adr/0260-outbox-and-sweeps-as-ledger-commands.md).
   */
  markSent(row: OutboxRow, workerId: string, result: Record<string, unknown>, effect?: SentEffect) {
    return outbox.markSent(
      this.s,
      row,
      workerId,
      result,
      effect && ((tx, now, changed) => applySentEffect(this.s, tx, now, changed, effect)),
    );
  }
  markFailed(...a: After<typeof outbox.markFailed>) {
    return outbox.markFailed(this.s, ...a);
  }
  /** Releases the claims of controller processes that are gone; returns how many rows. */
  releaseGoneClaims(...a: After<typeof outbox.releaseGoneClaims>) {
    return outbox.releaseGoneClaims(this.s, ...a);
  }
  /** Prunes webhook dedup rows older than the retention; returns how many. */
  pruneDeliveries() {
    return outbox.pruneDeliveries(this.s);
  }
  counts() {
    return queries.outboxCounts(this.s);
  }
}
