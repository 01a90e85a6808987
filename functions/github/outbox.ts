import type { OutboxRow, SentEffect } from '../ledger/ledger.ts';
import type { OutboxKind } from '../ledger/outbox.ts';
import { GitHubError } from './client.ts';
import type { GitHubService } from './service.ts';
import type { OutboxSender } from './service-parts.ts';

/**
 * Sends the transactional outbox's GitHub side effects (docs/architecture.md "GitHub integration"; ADR
 * 0004) with retries, exponential backoff, `Retry-After` and rate-limit resets. Rows are
 * written by ledger commands (`functions/ledger/outbox.ts`) in the same transaction as the state
 * change that needs them.
 */

export type { OutboxKind };

/**
 * What a sender returns: a small, secret-free result, and what GitHub's answer means for the
 * ledger as a named effect the ledger applies with "sent", in the same transaction
 * (docs/adr/0260-outbox-and-sweeps-as-ledger-commands.md).
 */
export interface SendResult {
  result: Record<string, unknown>;
  effect?: SentEffect;
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
/** Rows a lane claims at once. */
const CLAIM_LIMIT = 25;
/** How often a sender looks for the claims of controller processes that are gone. */
const GONE_CHECK_MS = 5_000;
export const MAX_ATTEMPTS = 12;

/** Backoff after `attempts` failures: 2 s doubling, capped at 15 min, with jitter. */
export function backoffMs(attempts: number): number {
  const base = Math.min(15 * 60_000, 2000 * 2 ** Math.max(0, attempts - 1));
  return Math.round(base * (0.75 + Math.random() * 0.25));
}

/**
 * What a host waits on between its grant and its runner's start (ADR 0070): the dispatch, the
 * lookup of its run, the JIT registration, a CI task's clone token. They are sent in a lane of
 * their own, so a burst of check-run updates never queues in front of a runner
 * (docs/adr/0180-woken-not-polled-handover.md).
 */
export const HANDOVER_KINDS: readonly OutboxKind[] = [
  'dispatch',
  'find-run',
  'generate-jitconfig',
  'mint-clone-token',
];
const OTHER_KINDS: readonly OutboxKind[] = ['check-run', 'refusal-check', 'delete-runner', 'cancel-run'];
/**
 * The two lanes. Each sends one request at a time, in row order (a dispatch before the
 * registration that needs its run), so at most two requests of this process are in flight:
 * GitHub asks integrators to avoid concurrent requests for secondary rate limits ("Best practices
 * for using the REST API": https://docs.github.com/en/rest/using-the-rest-api/best-practices-for-using-the-rest-api#avoid-concurrent-requests;
 * the documented ceiling is 100 concurrent requests,
 * https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api#about-secondary-rate-limits).
 */
const LANES = [HANDOVER_KINDS, OTHER_KINDS] as const;

/**
 * Sends due outbox rows once each: one claim round per lane, the two lanes side by side. Rows are
 * claimed in a write transaction (claim token + expiry) so two controller processes never send
 * the same row at once; a crash mid-send leaves the claim to expire and the row is sent again,
 * which every sender tolerates (idempotent creates look up what a lost response may already have
 * made).
 */
export async function drainOutbox(
  svc: GitHubService,
  senders: Record<OutboxKind, Sender>,
  opts: { limit?: number } = {},
): Promise<DrainResult> {
  const out: DrainResult = { sent: 0, retried: 0, failed: 0 };
  // a cheap read first: most ticks find nothing due and should not take the write lock
  if (!(await svc.ledger.outbox.due())) return out;
  await Promise.all(LANES.map((kinds) => drainLane(svc, senders, kinds, opts.limit ?? CLAIM_LIMIT, out)));
  return out;
}

/** One claim round of one lane; returns how many rows it claimed. */
async function drainLane(
  svc: GitHubService,
  senders: Record<OutboxKind, Sender>,
  kinds: readonly OutboxKind[],
  limit: number,
  out: DrainResult,
): Promise<number> {
  const { ledger } = svc;
  const claimed = await ledger.outbox.claimDue(svc.workerId, CLAIM_MS, limit, kinds);

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
      await ledger.outbox.markSent(row, svc.workerId, res.result, res.effect);
      out.sent++;
    } catch (e) {
      const gh = e instanceof GitHubError ? e : null;
      if (!gh) svc.log.error('outbox send failed', { id: row.id, kind: row.kind, error: String(e) });
      const attempts = row.attempts + 1;
      const retryable = gh ? gh.retryable : true;
      const final = !retryable || attempts >= MAX_ATTEMPTS;
      const message = (e as Error).message.slice(0, 500);
      await ledger.outbox.markFailed(row, svc.workerId, {
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
  return claimed.length;
}

export type { OutboxSender } from './service-parts.ts';

/** Longest a timer is set for (setTimeout's limit is 2^31 − 1 ms); the module tick covers the rest. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * The outbox sender of `svc`, built once with it (`create-service.ts`): its lanes, timer and
 * subscription belong to that service, so two controllers in one process never share them.
 */
export function createOutboxSender(svc: GitHubService, senders: Record<OutboxKind, Sender>): OutboxSender {
  let started = false;
  let timer: ReturnType<typeof setTimeout> | null = null;
  // each lane drains on its own: a dispatch queued while the other lane works through a burst of
  // check-run updates is sent at once, not after them
  const lanes = LANES.map((kinds) => ({ kinds, running: null as Promise<void> | null, again: false }));

  /** Arms the timer for the next pending row that no commit will announce (a retry, a reset). */
  const armTimer = async () => {
    if (!started) return;
    const next = await svc.ledger.outbox.nextAttemptAt();
    if (timer) clearTimeout(timer);
    timer = null;
    // due now but not claimable (a check run of the same reservation in flight, a claim of ours):
    // the send that ends it notifies `outbox`, which drains again
    const wait = next == null ? null : next - svc.ledger.clock();
    if (wait == null || wait <= 0 || !started) return;
    timer = setTimeout(
      () => {
        timer = null;
        void drain();
      },
      Math.min(wait, MAX_TIMER_MS),
    );
    timer.unref?.();
  };
  // one read of the next attempt for both lanes: a lane that goes idle while the other works
  // leaves it to the other, and a plan asked for while one runs reads again after it, so a retry
  // committed during that read still gets its timer (docs/adr/0315-outbox-sender-wakes.md)
  let planning: Promise<void> | null = null;
  let replan = false;
  const plan = (): Promise<void> => {
    if (planning) {
      replan = true;
      return planning;
    }
    planning = (async () => {
      try {
        do {
          replan = false;
          await armTimer();
        } while (replan);
      } finally {
        planning = null;
      }
    })();
    return planning;
  };

  const runLane = (lane: (typeof lanes)[number]): Promise<void> => {
    if (lane.running) {
      lane.again = true;
      return lane.running;
    }
    lane.running = (async () => {
      const total: DrainResult = { sent: 0, retried: 0, failed: 0 };
      try {
        for (;;) {
          lane.again = false;
          // an exact read before each claim round, outside any transaction: a notice for a row
          // already sent, in flight, of the other lane or queued behind a check run in flight,
          // and the end of a burst, take no write lock (docs/adr/0315-outbox-sender-wakes.md);
          // a round that claims nothing (paused, taken by another process) ends the loop
          while (await svc.ledger.outbox.claimable(lane.kinds)) {
            if ((await drainLane(svc, senders, lane.kinds, CLAIM_LIMIT, total)) === 0) break;
          }
          if (lane.again) continue;
          // the last lane to go idle arms the timer (or asks the plan under way to read again)
          if (planning || lanes.every((l) => l === lane || !l.running)) await plan();
          // a notice that came while planning would otherwise wait for the module tick
          if (!lane.again) break;
        }
      } catch (e) {
        // the ledger or GitHub is unreachable: the rows stay pending, the module tick tries again
        svc.log.warn('GitHub outbox: drain failed', { error: String(e) });
      } finally {
        lane.running = null;
      }
    })();
    return lane.running;
  };

  // a killed controller's claims would hold its rows (and later check-run updates of their
  // reservations) until they expire: the first drain, and one every few seconds after, release them
  let goneCheckedAt = Number.NEGATIVE_INFINITY;
  const releaseGoneClaims = async () => {
    if (!svc.identity.canTellGone || svc.ledger.clock() - goneCheckedAt < GONE_CHECK_MS) return;
    goneCheckedAt = svc.ledger.clock();
    try {
      const rows = await svc.ledger.outbox.releaseGoneClaims((w) => svc.identity.isGone(w));
      if (rows)
        svc.log.info('GitHub outbox: released the claims of a controller process that is gone', { rows });
    } catch (e) {
      svc.log.warn('GitHub outbox: could not release the claims of a gone process', { error: String(e) });
    }
  };

  const drain = async (): Promise<void> => {
    if (!svc.client.configured) return;
    await releaseGoneClaims();
    await Promise.all(lanes.map(runLane));
  };

  return {
    kick() {
      void drain();
    },
    drain,
    async settle() {
      await Promise.all(lanes.map((l) => l.running));
    },
    start() {
      started = true;
      const unsubscribe = svc.ledger.subscribe((topic) => {
        if (topic === 'outbox' && started) queueMicrotask(() => void drain());
      });
      void drain();
      return async () => {
        started = false;
        unsubscribe();
        if (timer) clearTimeout(timer);
        timer = null;
        await Promise.all(lanes.map((l) => l.running));
      };
    },
  };
}

const FINAL_FAILURE_WHAT: Record<string, string> = {
  dispatch: 'workflow dispatch',
  'find-run': 'lookup of the dispatched run',
  'generate-jitconfig': 'runner registration',
};

/** A dispatch, run lookup or runner registration that can never succeed must not strand the hosts. */
async function onFinalFailure(svc: GitHubService, row: OutboxRow, message: string) {
  if (!row.reservationId || !['dispatch', 'find-run', 'generate-jitconfig'].includes(row.kind)) return;
  await svc.ledger.github.releaseAfterFailedSend(
    row.reservationId,
    `GitHub ${FINAL_FAILURE_WHAT[row.kind] ?? row.kind} failed: ${message}`,
  );
}
