import { ZodError } from 'zod';
import type { AppContext } from '../app.ts';
import { ApiError } from '../errors.ts';
import type { InboxRow } from '../ledger/inbox.ts';
import { GitHubError } from './client.ts';
import { ignoreDelivery, intakeHandlers } from './intake/index.ts';
import { type GitHubService, githubService } from './service.ts';
import type { InboxDrainResult, InboxProcessor } from './service-parts.ts';

/**
 * The webhook inbox's processor (docs/adr/0035-webhook-inbox.md). The route has
 * already verified, inserted and acknowledged each delivery; this drains them in arrival order,
 * per repository/PR (`order_key`): a delivery waiting for a retry holds back the later ones of
 * its key and no others. At-least-once and idempotent per delivery id: each is completed in the
 * transaction that applies its effects, so a crash, a second processor or a retry never applies
 * one twice.
 *
 * What a delivery ends as:
 * - its intake result (queued, refused, ignored, ...): `done`;
 * - a payload that does not match the event's schema: `done` with `invalid payload: …`;
 * - a definitive GitHub answer (404, 403, 422, App not configured): `done` with `ended: …`;
 * - anything transient (GitHub 5xx, timeouts, rate limits, the ledger busy): retried with
 *   backoff (or GitHub's Retry-After), then `parked` after {@link INBOX_MAX_ATTEMPTS} attempts
 *   with its error, until an operator retries it.
 */

/** Attempts before a delivery that keeps failing is parked. */
export const INBOX_MAX_ATTEMPTS = 6;
/**
 * How long a processor's claim on a delivery lasts: another process on the same ledger takes
 * it over after this if the claimer died (kill -9) before completing it.
 */
export const INBOX_CLAIM_MS = 20_000;
/** Deliveries read per round; each is processed on its own, yielding to requests in between. */
export const INBOX_BATCH = 64;

/** Backoff after the n-th failed attempt (1-based): 1 s, 2 s, 4 s … capped at 5 min. */
export function inboxBackoffMs(attempt: number): number {
  return Math.min(300_000, 1000 * 2 ** Math.max(0, attempt - 1));
}

export type DrainResult = InboxDrainResult;
export type { InboxProcessor } from './service-parts.ts';

/**
 * The inbox processor of `svc`, built once with it (`create-service.ts`); it defers to the
 * requests in flight through the service's request gate.
 */
export function createInboxProcessor(svc: GitHubService): InboxProcessor {
  const { gate } = svc;
  let running: Promise<DrainResult> | null = null;
  let again = false;

  const round = async (total: DrainResult): Promise<number> => {
    const rows = await svc.ledger.inbox.pending(INBOX_BATCH);
    const now = svc.ledger.clock();
    // what this round may process: due, and nothing earlier of its key still waiting
    const held = new Set<string>();
    const due: InboxRow[] = [];
    for (const row of rows) {
      const key = row.orderKey ?? row.deliveryId;
      if (held.has(key)) continue;
      if (row.nextAttemptAt > now) held.add(key);
      else due.push(row);
    }
    const until = now + INBOX_CLAIM_MS;
    const claimed = await svc.ledger.inbox.claim(
      due.map((r) => r.deliveryId),
      until,
    );
    const unused: string[] = [];
    let progressed = 0;
    for (const row of due) {
      const key = row.orderKey ?? row.deliveryId;
      if (!claimed.has(row.deliveryId)) {
        // another processor has it: later deliveries of its key wait for that one
        held.add(key);
        continue;
      }
      if (held.has(key)) {
        unused.push(row.deliveryId);
        continue;
      }
      // acknowledging first: a burst of webhooks is answered before its deliveries are processed
      // (a drain someone waits for — tick, cron, waitUntil, a test — does not wait)
      if (deferring)
        await Promise.race([
          gate.whenQuiet(),
          new Promise<void>((r) => {
            wake = r;
          }),
        ]);
      wake = null;
      const outcome = await processOne(svc, row);
      if (outcome === 'retry') {
        held.add(key);
        total.retried++;
      } else {
        if (outcome === 'parked') total.parked++;
        else total.processed++;
        progressed++;
      }
    }
    await svc.ledger.inbox.releaseClaims(unused, until);
    return rows.length === INBOX_BATCH ? progressed : 0;
  };

  let deferring = false;
  // ends a kicked drain's wait for quiet when someone now waits for the drain itself
  let wake: (() => void) | null = null;
  const drain = (defer = false): Promise<DrainResult> => {
    if (running) {
      again = true;
      deferring &&= defer;
      if (!defer) wake?.();
      return running;
    }
    deferring = defer;
    running = (async () => {
      const total: DrainResult = { processed: 0, retried: 0, parked: 0 };
      try {
        do {
          again = false;
          while ((await round(total)) > 0) {}
        } while (again);
      } catch (e) {
        // the ledger is unreachable: the rows stay pending and the next tick tries again
        svc.log.warn('webhook inbox: drain failed', { error: String(e) });
      } finally {
        running = null;
      }
      return total;
    })();
    return running;
  };

  return {
    kick() {
      void drain(true);
    },
    drain: () => drain(false),
    async settle() {
      await running;
    },
  };
}

/**
 * Resolves when the inbox drain this isolate started (after a webhook's 202) and the admission
 * passes it kicked are done: the Worker entry hands it to `waitUntil` so processing finishes
 * after the response, inside that request's lifetime.
 */
export async function settleInbox(ctx: AppContext): Promise<void> {
  await githubService(ctx).inbox.settle();
  // and the admission passes the processed deliveries kicked
  await ctx.loop.settle();
}

/** Processes one delivery; says whether it is done, waits for a retry, or was parked. */
async function processOne(svc: GitHubService, row: InboxRow): Promise<'done' | 'retry' | 'parked'> {
  const d = { id: row.deliveryId, event: row.event };
  const end = async (result: string) => {
    await svc.ledger.inbox.finish(d.id, result);
    svc.log.info('webhook processed', { event: d.event, delivery: d.id, result });
    return 'done' as const;
  };
  let payload: unknown;
  try {
    payload = JSON.parse(row.body);
  } catch {
    // the route refuses non-JSON bodies; a row without one can only come from outside the route
    return end('invalid: the stored body is not JSON');
  }
  const handler = Object.hasOwn(intakeHandlers, d.event) ? intakeHandlers[d.event] : undefined;
  try {
    const r = handler ? await handler(svc, d, payload) : await ignoreDelivery(svc, d, row.action);
    svc.log.info('webhook processed', {
      event: d.event,
      action: row.action,
      delivery: d.id,
      result: r.result,
    });
    return 'done';
  } catch (e) {
    if (e instanceof ZodError) {
      const fields = e.issues.map((i) => i.path.join('.')).join(', ');
      return end(`invalid payload: ${d.event} payload is missing fields: ${fields}`);
    }
    if (e instanceof ApiError && e.status < 500) return end(`refused: ${e.message}`);
    if (e instanceof GitHubError && !e.retryable) {
      // a definitive answer (the PR is gone, no permission to read it, ...): the delivery ends
      // with the reason; retrying cannot change it
      return end(`ended: GitHub answered ${e.status || 'no request'}: ${e.message}`);
    }
    const attempt = row.attempts + 1;
    const now = svc.ledger.clock();
    const retryAt = e instanceof GitHubError && e.retryAt ? e.retryAt : now + inboxBackoffMs(attempt);
    const error = e instanceof GitHubError ? `GitHub: ${e.message}` : String((e as Error)?.message ?? e);
    svc.log.warn('webhook processing failed', { event: d.event, delivery: d.id, attempt, error });
    const r = await svc.ledger.inbox.fail(d.id, { error, retryAt, maxAttempts: INBOX_MAX_ATTEMPTS });
    return r === 'parked' ? 'parked' : r === 'retry' ? 'retry' : 'done';
  }
}
