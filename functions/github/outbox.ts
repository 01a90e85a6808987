import { and, asc, eq, inArray, isNull, lte, or, sql } from 'drizzle-orm';
import type { Tx } from '../ledger/db.ts';
import * as t from '../ledger/schema.ts';
import { GitHubError } from './client.ts';
import type { GitHubService } from './service.ts';

/**
 * The transactional outbox for GitHub side effects (DESIGN.md "GitHub integration"; ADR 0004).
 * Rows are written in the same ledger transaction as the state change that needs them, keyed by
 * an idempotency key (a second enqueue of the same effect is ignored), then sent by
 * {@link drainOutbox} with retries, exponential backoff, `Retry-After` and rate-limit resets.
 */

export type OutboxKind = 'check-run' | 'refusal-check' | 'dispatch' | 'generate-jitconfig' | 'delete-runner';

export interface EnqueueItem {
  kind: OutboxKind;
  key: string;
  reservationId?: string | null;
  payload: Record<string, unknown>;
  notBefore?: number;
}

/** Inserts an outbox row unless one with the same key exists; true when inserted. */
export async function enqueue(tx: Tx, now: number, item: EnqueueItem): Promise<boolean> {
  const rows = await tx
    .insert(t.outbox)
    .values({
      kind: item.kind,
      idempotencyKey: item.key,
      reservationId: item.reservationId ?? null,
      payloadJson: JSON.stringify(item.payload),
      status: 'pending',
      nextAttemptAt: item.notBefore ?? now,
      createdAt: now,
    })
    .onConflictDoNothing({ target: t.outbox.idempotencyKey })
    .returning({ id: t.outbox.id });
  return rows.length > 0;
}

/**
 * Asks for the reservation's check run to be brought up to date. The sender renders from the
 * ledger at send time, so one pending, unclaimed row already covers any later change; a row
 * that is in flight may have rendered an older state, so a new one is queued behind it.
 */
export async function enqueueCheckSync(tx: Tx, now: number, reservationId: string): Promise<void> {
  const rows = await tx
    .select({ id: t.outbox.id, status: t.outbox.status, claimedUntil: t.outbox.claimedUntil })
    .from(t.outbox)
    .where(and(eq(t.outbox.reservationId, reservationId), eq(t.outbox.kind, 'check-run')));
  if (rows.some((r) => r.status === 'pending' && (r.claimedUntil == null || r.claimedUntil < now))) return;
  await enqueue(tx, now, {
    kind: 'check-run',
    key: `check:${reservationId}:${rows.length + 1}`,
    reservationId,
    payload: { reservationId },
  });
}

/** What a sender returns: a small, secret-free result and ledger effects applied with "sent". */
export interface SendResult {
  result: Record<string, unknown>;
  apply?: (tx: Tx, now: number, changed: Set<string>) => Promise<void>;
}

export type Sender = (
  svc: GitHubService,
  row: typeof t.outbox.$inferSelect,
  payload: Record<string, unknown>,
) => Promise<SendResult>;

export interface DrainResult {
  sent: number;
  retried: number;
  failed: number;
}

const PAUSE_KEY = 'github:rate_limit_until';
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
  const due = await ledger.db
    .select({ id: t.outbox.id })
    .from(t.outbox)
    .where(and(eq(t.outbox.status, 'pending'), lte(t.outbox.nextAttemptAt, ledger.clock())))
    .limit(1);
  if (!due.length) return out;
  const claimed = await ledger.write(async (tx, now) => {
    const pause = await tx.select().from(t.meta).where(eq(t.meta.key, PAUSE_KEY));
    if (pause[0] && Number(pause[0].value) > now) return [];
    const rows = await tx
      .select()
      .from(t.outbox)
      .where(
        and(
          eq(t.outbox.status, 'pending'),
          lte(t.outbox.nextAttemptAt, now),
          or(isNull(t.outbox.claimedUntil), lte(t.outbox.claimedUntil, now)),
          // one check-run send per reservation at a time across processes: two concurrent sends
          // both find no check run yet and both create one (seen by test/e2e/load-webhooks)
          sql`NOT (${t.outbox.kind} = 'check-run' AND EXISTS (SELECT 1 FROM outbox AS busy WHERE busy.kind = 'check-run' AND busy.reservation_id = ${t.outbox.reservationId} AND busy.status = 'pending' AND busy.claimed_until > ${now}))`,
        ),
      )
      .orderBy(asc(t.outbox.id))
      .limit(opts.limit ?? 25);
    if (rows.length) {
      await tx
        .update(t.outbox)
        .set({ claimedBy: svc.workerId, claimedUntil: now + CLAIM_MS })
        .where(
          inArray(
            t.outbox.id,
            rows.map((r) => r.id),
          ),
        );
    }
    return rows;
  });

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
      await ledger.write(async (tx, now, changed) => {
        await tx
          .update(t.outbox)
          .set({
            status: 'sent',
            sentAt: now,
            attempts: row.attempts + 1,
            resultJson: JSON.stringify(res.result),
            claimedBy: null,
            claimedUntil: null,
            lastError: null,
          })
          .where(and(eq(t.outbox.id, row.id), eq(t.outbox.claimedBy, svc.workerId)));
        await res.apply?.(tx, now, changed);
        changed.add('outbox');
      });
      out.sent++;
    } catch (e) {
      const gh = e instanceof GitHubError ? e : null;
      if (!gh) svc.log.error('outbox send failed', { id: row.id, kind: row.kind, error: String(e) });
      const attempts = row.attempts + 1;
      const retryable = gh ? gh.retryable : true;
      const final = !retryable || attempts >= MAX_ATTEMPTS;
      const message = (e as Error).message.slice(0, 500);
      await ledger.write(async (tx, now) => {
        const next = Math.max(now + backoffMs(attempts), gh?.retryAt ?? 0);
        await tx
          .update(t.outbox)
          .set({
            status: final ? 'failed' : 'pending',
            attempts,
            nextAttemptAt: next,
            lastError: message,
            claimedBy: null,
            claimedUntil: null,
          })
          .where(and(eq(t.outbox.id, row.id), eq(t.outbox.claimedBy, svc.workerId)));
        if (gh?.retryAt && (gh.status === 403 || gh.status === 429)) {
          // a primary/secondary rate limit applies to the whole App: pause every send until reset
          await tx
            .insert(t.meta)
            .values({ key: PAUSE_KEY, value: String(gh.retryAt) })
            .onConflictDoUpdate({ target: t.meta.key, set: { value: String(gh.retryAt) } });
        }
        if (final) {
          await ledger.record(tx, now, {
            subjectType: 'outbox',
            subjectId: String(row.id),
            type: 'outbox.failed',
            cause: `${row.kind} gave up after ${attempts} attempt(s): ${message}`,
            actor: 'github-outbox',
            data: { kind: row.kind, reservationId: row.reservationId, status: gh?.status ?? null },
          });
        }
      });
      if (final) out.failed++;
      else out.retried++;
      if (final) await onFinalFailure(svc, row, message);
    }
  }
  return out;
}

/** A dispatch or runner registration that can never succeed must not strand the hosts. */
async function onFinalFailure(svc: GitHubService, row: typeof t.outbox.$inferSelect, message: string) {
  if (!row.reservationId || (row.kind !== 'dispatch' && row.kind !== 'generate-jitconfig')) return;
  const rid = row.reservationId;
  await svc.ledger.write(async (tx) => {
    const r = await svc.ledger.getReservation(tx, rid);
    if (!r || !['allocated', 'preparing', 'running'].includes(r.status)) return;
    await svc.ledger.beginRelease(
      rid,
      'github_failed',
      `GitHub ${row.kind === 'dispatch' ? 'workflow dispatch' : 'runner registration'} failed: ${message}`.slice(
        0,
        400,
      ),
      'github-outbox',
      tx,
    );
  });
}

/** Pending rows per kind (for tests and the bench). */
export async function outboxCounts(svc: GitHubService) {
  return svc.ledger.db
    .select({ kind: t.outbox.kind, status: t.outbox.status, n: sql<number>`count(*)` })
    .from(t.outbox)
    .groupBy(t.outbox.kind, t.outbox.status);
}
