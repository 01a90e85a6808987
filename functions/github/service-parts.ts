/**
 * The shapes of the per-service parts a {@link import('./service.ts').GitHubService} holds: its
 * outbox sender, inbox processor and redelivery-sweep state. They live here, apart from the
 * modules that build them, because those modules take the service itself and the service names
 * these shapes (one owner, no cycle; docs/adr/0215-controller-owns-its-services.md).
 */

/** The service's outbox sender: drains on demand and, on Node, by itself. */
export interface OutboxSender {
  /** Ask for a drain now, without waiting; calls coalesce with one running. */
  kick(): void;
  /**
   * Sends every due row, each lane until a round claims nothing, and resolves then (module tick,
   * cron, a Worker's `waitUntil`, tests). Joins a lane already draining, plus one more round.
   */
  drain(): Promise<void>;
  /** Resolves when the drains running now (if any) are done. */
  settle(): Promise<void>;
  /**
   * Node only: drains when a commit fills the outbox (the ledger's `outbox` notice, sent by
   * `enqueue`) and when the next pending row falls due (a retry's backoff, a rate-limit reset),
   * so nothing on a handover waits for the module tick. Returns the stop function.
   */
  start(): () => Promise<void>;
}

export interface InboxDrainResult {
  processed: number;
  retried: number;
  parked: number;
}

/** The service's webhook inbox processor. */
export interface InboxProcessor {
  /** Ask for a drain soon (after the requests in flight are answered); calls coalesce. */
  kick(): void;
  /** Drains every due delivery now and resolves when none is left (tests, cron, waitUntil). */
  drain(): Promise<InboxDrainResult>;
  /** Resolves when the drain running now (if any) is done. */
  settle(): Promise<void>;
}

/** What the missed-delivery sweep (`redeliver.ts`) remembers between ticks of one service. */
export interface RedeliveryState {
  /** Whether this service's start sweep already ran (a Node process sweeps once at start). */
  startSwept: boolean;
  /** The sweep time this service last read or wrote (another process may have swept since). */
  lastSweepSeen: number | null;
  /** The sweep running now, if any: sweeps of one service run one at a time. */
  inFlight: Promise<unknown>;
}

export function createRedeliveryState(): RedeliveryState {
  return { startSwept: false, lastSweepSeen: null, inFlight: Promise.resolve() };
}
