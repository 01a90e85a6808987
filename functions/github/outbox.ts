import { isReleasableStatus } from '../../core/model.ts';
import type { Tx } from '../ledger/db.ts';
import type { OutboxRow } from '../ledger/ledger.ts';
import {
  claimDue,
  type EnqueueItem,
  enqueue,
  enqueueCheckSync,
  markFailed,
  markSent,
  type OutboxKind,
  outboxDue,
} from '../ledger/outbox.ts';
import { beginRelease, getReservation } from '../ledger/reservations.ts';
import { GitHubError } from './client.ts';
import { patchMeta } from './meta.ts';
import type { GitHubService } from './service.ts';

/**
 * Sends the transactional outbox's GitHub side effects (DESIGN.md "GitHub integration"; ADR
 * 0004) with retries, exponential backoff, `Retry-After` and rate-limit resets. Rows are
 * written by ledger commands (`functions/ledger/outbox.ts`) in the same transaction as the state
 * change that needs them.
 */

export { outboxCounts } from '../ledger/queries.ts';
export { type EnqueueItem, enqueue, enqueueCheckSync, type OutboxKind };

/** What a sender returns: a small, secret-free result and ledger effects applied with "sent". */
export interface SendResult {
  result: Record<string, unknown>;
  apply?: (tx: Tx, now: number, changed: Set<string>) => Promise<void>;
}

export type Sender = (
  svc: GitHubService,
  row: OutboxRow,
  payload: Record<string, unknown>,
) => Promise<SendResult>;

export interface DrainResult {
  sent: number;
  retried: number;
  failed: number;
}

const CLAIM_MS = 120_000;
export const MAX_ATTEMPTS = 12;

/** Backoff after `attempts` failures: 2 s doubling, capped at 15 min, with jitter. */
export function backoffMs(attempts: number): number {
  const base = Math.min(15 * 60_000, 2000 * 2 ** Math.max(0, attempts - 1));
  return Math.round(base * (0.75 + Math.random() * 0.25));
}

/**
 * Sends due outbox rows once each. Rows are claimed in a write transaction (claim token +
 * expiry) so two controller processes never send the same row at once; a crash mid-send leaves
 * the claim to expire and the row is sent again, which every sender tolerates (idempotent
 * creates look up what a lost response may already have made).
 */
export async function drainOutbox(
  svc: GitHubService,
  senders: Record<OutboxKind, Sender>,
  opts: { limit?: number } = {},
): Promise<DrainResult> {
  const { ledger } = svc;
  const out: DrainResult = { sent: 0, retried: 0, failed: 0 };
  // a cheap read first: most ticks find nothing due and should not take the write lock
  if (!(await outboxDue(ledger))) return out;
  const claimed = await claimDue(ledger, svc.workerId, CLAIM_MS, opts.limit ?? 25);

  for (const row of claimed) {
    const sender = senders[row.kind as OutboxKind];
    let payload: Record<string, unknown>;
    try {
      payload = JSON.parse(row.payloadJson) as Record<string, unknown>;
    } catch {
      payload = {};
    }
    try {
      if (!sender) throw new GitHubError(0, `unknown outbox kind "${row.kind}"`, false);
      const res = await sender(svc, row, payload);
      await markSent(ledger, row, svc.workerId, res.result, res.apply);
      out.sent++;
    } catch (e) {
      const gh = e instanceof GitHubError ? e : null;
      if (!gh) svc.log.error('outbox send failed', { id: row.id, kind: row.kind, error: String(e) });
      const attempts = row.attempts + 1;
      const retryable = gh ? gh.retryable : true;
      const final = !retryable || attempts >= MAX_ATTEMPTS;
      const message = (e as Error).message.slice(0, 500);
      await markFailed(ledger, row, svc.workerId, {
        attempts,
        final,
        message,
        nextAttemptAt: (now) => Math.max(now + backoffMs(attempts), gh?.retryAt ?? 0),
        // a primary/secondary rate limit applies to the whole App: pause every send until reset
        pauseUntil: gh?.retryAt && (gh.status === 403 || gh.status === 429) ? gh.retryAt : null,
        status: gh?.status ?? null,
      });
      if (final) out.failed++;
      else out.retried++;
      if (final) await onFinalFailure(svc, row, message);
    }
  }
  return out;
}

const FINAL_FAILURE_WHAT: Record<string, string> = {
  dispatch: 'workflow dispatch',
  'find-run': 'lookup of the dispatched run',
  'generate-jitconfig': 'runner registration',
};

/** A dispatch, run lookup or runner registration that can never succeed must not strand the hosts. */
async function onFinalFailure(svc: GitHubService, row: OutboxRow, message: string) {
  if (!row.reservationId || !['dispatch', 'find-run', 'generate-jitconfig'].includes(row.kind)) return;
  const rid = row.reservationId;
  await svc.ledger.write(async (tx) => {
    const r = await getReservation(svc.ledger, tx, rid);
    if (!r || !isReleasableStatus(r.status)) return;
    // the check run says why in words (e.g. a workflow that breaks the contract, with its fix)
    await patchMeta(tx, r, {
      note: `GitHub ${FINAL_FAILURE_WHAT[row.kind] ?? row.kind} failed: ${message}`.slice(0, 1000),
    });
    await beginRelease(
      svc.ledger,
      rid,
      'github_failed',
      `GitHub ${FINAL_FAILURE_WHAT[row.kind] ?? row.kind} failed: ${message}`.slice(0, 400),
      'github-outbox',
      tx,
    );
  });
}
