/**
 * GitHub's time, modelled for the fake GitHub (server.ts `latency`): how long GitHub takes to
 * answer a REST call, and how long after an event its webhook reaches the receiver. Off by
 * default (the tests want no waiting); the agent bench turns it on, so its handover runs at the
 * pace it would against github.com (docs/adr/0181-modelled-github-latency.md).
 *
 * Where the default values come from:
 * - REST calls: a log-normal distribution with a median of 206 ms and σ = 0.6, the measurement
 *   of 10,000 GitHub API requests published by Mike Bostock ("Gist API Latency",
 *   https://gist.github.com/mbostock/5503544: mode 120–140 ms, median 206 ms, the middle 80 % in
 *   114–527 ms, "roughly follows a log-normal distribution"; σ = ln(527 / 114) / (2 · 1.2816)).
 *   It is a single-resource GET seen from a host near GitHub; no public measurement of the write
 *   calls a handover makes (dispatch, JIT registration) exists that we could find, so they take
 *   the same distribution.
 * - Webhook deliveries: 5 s after the event, fixed. GitHub states no delivery time ("Webhook
 *   deliveries can take a few minutes to be delivered",
 *   https://docs.github.com/en/webhooks/testing-and-troubleshooting-webhooks/troubleshooting-webhooks);
 *   GitHub's summary of its 18 March 2026 webhook incident gives "a typical baseline of
 *   approximately 5 seconds" of average delivery latency (retold at
 *   https://devactivity.com/insights/github-webhook-incident-lessons-in-performance-engineering-software),
 *   and Mergify measured a steady-state p95 under 60 s
 *   (https://mergify.com/blog/what-github-webhook-latency-actually-looks-like/).
 */

export interface GitHubLatencyOptions {
  /** Median time GitHub takes to answer a REST call (ms); 0 answers at once. */
  restMedianMs?: number;
  /** σ of the log-normal around that median; 0 makes every call take the median exactly. */
  restSigma?: number;
  /** Delay from an event on GitHub to its webhook delivery (ms). */
  webhookDelayMs?: number;
  /** Seed of the pseudo-random draws, so two runs model the same GitHub. */
  seed?: number;
}

export const DEFAULT_GITHUB_LATENCY: Required<GitHubLatencyOptions> = {
  restMedianMs: 206,
  restSigma: 0.6,
  webhookDelayMs: 5000,
  seed: 28,
};

/** No single modelled call takes longer than this (a real one past GitHub's own timeouts fails). */
const MAX_REST_MS = 10_000;

export interface GitHubLatency {
  /** The values the model was built with (for a bench's results). */
  readonly options: Required<GitHubLatencyOptions>;
  /** The modelled time GitHub takes to answer one REST call (a fresh draw per call). */
  restMs(method: string, operation: string): number;
  /** The modelled delay of one webhook delivery of `event`. */
  webhookDelayMs(event: string): number;
}

/** mulberry32: a small seeded generator (uniform in [0, 1)); not for secrets. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = a;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

/** A latency model; unset options take {@link DEFAULT_GITHUB_LATENCY}. */
export function githubLatency(opts: GitHubLatencyOptions = {}): GitHubLatency {
  const o = { ...DEFAULT_GITHUB_LATENCY, ...opts };
  for (const [k, v] of Object.entries(o))
    if (!Number.isFinite(v) || v < 0) throw new TypeError(`GitHub latency ${k} must be ≥ 0, got ${v}`);
  const random = seeded(o.seed);
  const normal = () => {
    // Box–Muller; 1 − u keeps the logarithm finite
    const u = 1 - random();
    const v = random();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
  };
  return {
    options: o,
    restMs() {
      if (o.restMedianMs === 0) return 0;
      const ms = o.restSigma === 0 ? o.restMedianMs : o.restMedianMs * Math.exp(o.restSigma * normal());
      return Math.min(MAX_REST_MS, Math.round(ms));
    },
    webhookDelayMs() {
      return o.webhookDelayMs;
    },
  };
}
