/** What the GitHub client reports after each call (status 0: GitHub not reached). */
export interface GitHubCallObservation {
  status: number;
  headers: Headers | null;
}

/**
 * This process's view of its GitHub API calls: errors by status and the primary rate
 * limit GitHub last reported per resource (`x-ratelimit-*` headers, REST docs "Rate limits for
 * the REST API"). Process-local on purpose: each process counts only its own calls, so a sum
 * over instances is right for the counters; the rate-limit gauges are one shared budget seen by
 * each process, aggregated with `min()` (docs/metrics.md).
 */
export class GitHubApiStats {
  readonly errorsByStatus = new Map<string, number>();
  calls = 0;
  readonly rateLimit = new Map<string, { limit: number; remaining: number; resetS: number }>();

  observe(o: GitHubCallObservation): void {
    this.calls += 1;
    if (o.status === 0 || o.status >= 400) {
      const key = o.status === 0 ? 'unreachable' : String(o.status);
      this.errorsByStatus.set(key, (this.errorsByStatus.get(key) ?? 0) + 1);
    }
    const h = o.headers;
    if (!h) return;
    const remaining = Number(h.get('x-ratelimit-remaining') ?? Number.NaN);
    const limit = Number(h.get('x-ratelimit-limit') ?? Number.NaN);
    const resetS = Number(h.get('x-ratelimit-reset') ?? Number.NaN);
    if (!Number.isFinite(remaining) || !Number.isFinite(resetS)) return;
    // the resource name becomes a label value: keep only what GitHub documents (core, search, …)
    const raw = h.get('x-ratelimit-resource') ?? 'core';
    const resource = /^[a-z_]{1,40}$/.test(raw) ? raw : 'other';
    this.rateLimit.set(resource, { limit: Number.isFinite(limit) ? limit : Number.NaN, remaining, resetS });
  }
}
