import { ApiError } from '../errors.ts';
import type { Logger } from '../log.ts';

/**
 * The whole process's allowance of request-body bytes held before the caller is known
 * (docs/adr/0150-anonymous-body-budget.md). Every route that reads a body before it can tell who
 * sent it — `POST /github/webhooks` (the signature is checked over the body) and the in-job
 * leases API (the job token is resolved with the body's host id) — takes its declared
 * Content-Length (or its route's limit when the body is chunked) from this budget before it reads
 * a byte, and gives it back when it is done. Each body was already bounded; this bounds their sum,
 * so many concurrent partial bodies cannot hold the process's memory. GitHub's deliveries are a
 * few KiB to a few tens of KiB (the recorded examples: 6–26 KiB), so 8 MiB holds hundreds of
 * them at once, or four bodies at the 2 MiB webhook limit.
 */
export const ANONYMOUS_BODY_BUDGET_BYTES = 8 * 1024 * 1024;

/** What a caller refused past the budget is told to wait (seconds): bodies in flight end within the body deadline. */
export const ANONYMOUS_BODY_RETRY_AFTER_S = 5;

/** How long an anonymous body may take to arrive; GitHub itself gives up on a delivery after 10 s. */
export const ANONYMOUS_BODY_DEADLINE_MS = 10_000;

/** Refusals are logged at most this often (with how many there were), not one line each. */
const REFUSAL_LOG_EVERY_MS = 10_000;

export interface BodyBudget {
  readonly capacity: number;
  /** Bytes taken and not given back. */
  readonly inFlight: number;
  /** Requests refused because the budget was in use, since the process started. */
  readonly refused: number;
  /** Takes `bytes` if they fit; returns the function that gives them back (idempotent), else null. */
  tryTake(bytes: number): (() => void) | null;
}

export function createBodyBudget(capacity: number): BodyBudget {
  if (!Number.isSafeInteger(capacity) || capacity <= 0)
    throw new TypeError(`body budget capacity must be a positive integer, got ${capacity}`);
  let inFlight = 0;
  let refused = 0;
  return {
    capacity,
    get inFlight() {
      return inFlight;
    },
    get refused() {
      return refused;
    },
    tryTake(bytes) {
      if (!Number.isSafeInteger(bytes) || bytes < 0) throw new TypeError(`cannot take ${bytes} bytes`);
      if (inFlight + bytes > capacity) {
        refused += 1;
        return null;
      }
      inFlight += bytes;
      let given = false;
      return () => {
        if (given) return;
        given = true;
        inFlight -= bytes;
      };
    },
  };
}

/**
 * This process's budget (on Workers: this isolate's, whose memory the platform bounds per
 * isolate in the same way).
 */
export const anonymousBodies: BodyBudget = createBodyBudget(ANONYMOUS_BODY_BUDGET_BYTES);

let loggedAt = Number.NEGATIVE_INFINITY;
let refusedAtLog = 0;

/**
 * The 503 past the budget: nothing of the body was read, and the caller may retry shortly (a
 * GitHub delivery refused so is asked for again by the redelivery sweep, ADR 0091). Logged once
 * per {@link REFUSAL_LOG_EVERY_MS} with the count, so a flood does not flood the log too.
 */
export function bodyBudgetExhausted(log: Logger | undefined, path: string): ApiError {
  const now = performance.now();
  if (log && now - loggedAt >= REFUSAL_LOG_EVERY_MS) {
    log.warn('unauthenticated request bodies refused: their budget is in use', {
      path,
      refused: anonymousBodies.refused - refusedAtLog,
      inFlightBytes: anonymousBodies.inFlight,
      capacityBytes: anonymousBodies.capacity,
    });
    loggedAt = now;
    refusedAtLog = anonymousBodies.refused;
  }
  return new ApiError(
    503,
    'too_many_bodies',
    'too many request bodies from unauthenticated callers are arriving at once; retry shortly',
    { 'Retry-After': String(ANONYMOUS_BODY_RETRY_AFTER_S) },
  );
}
