/**
 * A token bucket per key (the agent token id): `perMinute` requests a minute on average with a
 * burst of a tenth of a minute's worth (at least 5). In memory per process: on Workers each
 * isolate limits on its own, which still caps a runaway agent.
 */
export class RateLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  private readonly burst: number;

  constructor(
    private readonly perMinute: number,
    private readonly clock: () => number = Date.now,
  ) {
    if (!(perMinute > 0)) throw new TypeError(`perMinute must be positive, got ${perMinute}`);
    this.burst = Math.max(5, Math.ceil(perMinute / 10));
  }

  /** Takes one request; returns 0 when allowed, else the seconds to wait before retrying. */
  take(key: string): number {
    const now = this.clock();
    const rate = this.perMinute / 60_000;
    const b = this.buckets.get(key) ?? { tokens: this.burst, at: now };
    b.tokens = Math.min(this.burst, b.tokens + (now - b.at) * rate);
    b.at = now;
    this.buckets.set(key, b);
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil((1 - b.tokens) / rate / 1000));
  }
}
