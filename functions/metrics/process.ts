import pkg from '../../package.json' with { type: 'json' };
import { anonymousBodies, type BodyBudget } from '../api/anonymous-budget.ts';
import type { WriteErrorCause } from '../ledger/store.ts';
import type { GitHubApiStats } from './github-api.ts';
import type { LiveHistogram, MetricFamily } from './prom-text.ts';

/** Every cause a ledger write error is counted under, exported at 0 so an alert sees the series. */
export const WRITE_ERROR_CAUSES: readonly WriteErrorCause[] = ['storage', 'busy'];

/**
 * Series about this controller process only (docs/metrics.md): its build, its admission passes
 * and its own GitHub API calls. Summed over instances the counters are right; the rate-limit
 * gauges are one App-wide budget as each process last saw it (aggregate with `min`).
 */
export function collectProcessMetrics(o: {
  admission: LiveHistogram | null;
  github: GitHubApiStats;
  runtime: 'node' | 'worker';
  buckets: readonly number[];
  /** The budget for bodies read before the sender is known (docs/adr/0150-anonymous-body-budget.md); this process's by default. */
  bodies?: BodyBudget;
  /** This process's failed ledger writes by cause (a failed write cannot count itself in the ledger). */
  writeErrors?: ReadonlyMap<WriteErrorCause, number>;
}): MetricFamily[] {
  const bodies = o.bodies ?? anonymousBodies;
  const rl = [...o.github.rateLimit].sort(([a], [b]) => a.localeCompare(b));
  return [
    {
      name: 'spark_build_info',
      help: 'Build of this controller process (always 1).',
      type: 'gauge',
      samples: [
        {
          labels: {
            version: pkg.version,
            runtime: o.runtime,
            node: typeof process !== 'undefined' && process.versions?.node ? process.versions.node : 'none',
          },
          value: 1,
        },
      ],
    },
    {
      name: 'spark_admission_pass_seconds',
      help: 'Duration of admission passes run by this controller process.',
      type: 'histogram',
      buckets: o.buckets,
      series: o.admission ? [{ live: o.admission }] : [],
    },
    {
      name: 'spark_ledger_write_errors_total',
      help: 'Ledger writes by this process that failed for the ledger itself: storage (read-only, full disk, I/O) or busy (lock wait ran out).',
      type: 'counter',
      samples: WRITE_ERROR_CAUSES.map((cause) => ({
        labels: { cause },
        value: o.writeErrors?.get(cause) ?? 0,
      })),
    },
    {
      name: 'spark_anonymous_body_budget_bytes',
      help: 'Bytes of request bodies this process reads at once before their sender is known.',
      type: 'gauge',
      samples: [{ value: bodies.capacity }],
    },
    {
      name: 'spark_anonymous_body_bytes_in_flight',
      help: 'Bytes of that budget taken by bodies being read now.',
      type: 'gauge',
      samples: [{ value: bodies.inFlight }],
    },
    {
      name: 'spark_anonymous_bodies_refused_total',
      help: 'Requests answered 503 unread because the budget for unauthenticated bodies was in use.',
      type: 'counter',
      samples: [{ value: bodies.refused }],
    },
    {
      name: 'spark_github_api_requests_total',
      help: 'GitHub API requests made by this process.',
      type: 'counter',
      samples: [{ value: o.github.calls }],
    },
    {
      name: 'spark_github_api_errors_total',
      help: 'GitHub API requests by this process that failed, by HTTP status (unreachable: no answer).',
      type: 'counter',
      samples: [...o.github.errorsByStatus]
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([status, value]) => ({ labels: { status }, value })),
    },
    {
      name: 'spark_github_rate_limit_remaining',
      help: 'Requests left in the GitHub primary rate-limit window, as last reported to this process, by resource.',
      type: 'gauge',
      samples: rl.map(([resource, r]) => ({ labels: { resource }, value: r.remaining })),
    },
    {
      name: 'spark_github_rate_limit_limit',
      help: 'Size of the GitHub primary rate-limit window, as last reported to this process, by resource.',
      type: 'gauge',
      samples: rl
        .filter(([, r]) => Number.isFinite(r.limit))
        .map(([resource, r]) => ({ labels: { resource }, value: r.limit })),
    },
    {
      name: 'spark_github_rate_limit_reset_timestamp_seconds',
      help: 'When the GitHub primary rate-limit window resets (Unix time), as last reported to this process.',
      type: 'gauge',
      samples: rl.map(([resource, r]) => ({ labels: { resource }, value: r.resetS })),
    },
  ];
}
