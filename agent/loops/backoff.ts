/** Full-jitter exponential backoff (AWS architecture blog): uniform in [ceiling/2, ceiling], ceiling = min(cap, base·2^n). */
export function backoffMs(failures: number, capMs: number, baseMs = 500): number {
  const ceiling = Math.min(capMs, baseMs * 2 ** Math.min(failures, 16));
  return Math.round(ceiling / 2 + (Math.random() * ceiling) / 2);
}

/** Longest delay a Node timer takes; a longer one fires at once (the 199-heartbeats-in-5-s bug). */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** The heartbeat period the agent uses: the controller's, within [1 s, 10 min] whatever it says. */
export function clampHeartbeatS(s: number): number {
  return Number.isFinite(s) ? Math.min(600, Math.max(1, s)) : 10;
}

/** A delay a timer can take: within [0, {@link MAX_TIMER_MS}], 0 for NaN. */
export function clampDelayMs(ms: number): number {
  return Number.isFinite(ms) ? Math.min(MAX_TIMER_MS, Math.max(0, ms)) : ms > 0 ? MAX_TIMER_MS : 0;
}
