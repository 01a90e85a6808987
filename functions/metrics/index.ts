import type { AppModule } from '../app.ts';
import { requirePublicRead } from '../auth/public-read.ts';
import { badRequest } from '../errors.ts';
import type { Ledger } from '../ledger/ledger.ts';
import type { WriteErrorCause } from '../ledger/store.ts';
import { ADMISSION_BUCKETS_S, collectLedgerMetrics } from './collect.ts';
import { githubApiStats } from './github-api.ts';
import { collectProcessMetrics, WRITE_ERROR_CAUSES } from './process.ts';
import { formatPrometheus, LiveHistogram, PROM_CONTENT_TYPE } from './prom-text.ts';

const instrumented = new WeakMap<Ledger, LiveHistogram>();
const writeErrors = new WeakMap<Ledger, Map<WriteErrorCause, number>>();

/** Counts this process's failed ledger writes by cause (one counter set per ledger instance). */
export function instrumentWriteErrors(ledger: Ledger): ReadonlyMap<WriteErrorCause, number> {
  const existing = writeErrors.get(ledger);
  if (existing) return existing;
  const counts = new Map<WriteErrorCause, number>(WRITE_ERROR_CAUSES.map((c) => [c, 0]));
  ledger.observeWriteErrors((cause) => counts.set(cause, (counts.get(cause) ?? 0) + 1));
  writeErrors.set(ledger, counts);
  return counts;
}

/** Times every admission pass of this ledger instance (one histogram per ledger). */
export function instrumentAdmission(ledger: Ledger): LiveHistogram {
  const existing = instrumented.get(ledger);
  if (existing) return existing;
  const hist = new LiveHistogram(ADMISSION_BUCKETS_S);
  ledger.observePasses((ms) => hist.observe(ms / 1000));
  instrumented.set(ledger, hist);
  return hist;
}

const SCOPES = ['all', 'ledger', 'process'] as const;

/**
 * Issue 6/16: `GET /metrics` in the Prometheus text format (sanitized aggregates only).
 * `?scope=ledger` serves only the ledger-wide series (identical from every process on one
 * ledger: scrape them once), `?scope=process` only this process's own; the default serves both,
 * right for a single process (docs/metrics.md, docs/adr/0045-persistent-metric-counters.md).
 */
export const metricsModule: AppModule = {
  name: 'metrics',
  hooks(ctx) {
    instrumentAdmission(ctx.ledger);
    instrumentWriteErrors(ctx.ledger);
    return [];
  },
  routes(app, ctx) {
    app.get('/metrics', requirePublicRead(ctx), async (c) => {
      const scope = c.req.query('scope') ?? 'all';
      if (!(SCOPES as readonly string[]).includes(scope)) {
        throw badRequest(
          `scope must be one of ${SCOPES.join(', ')}; got "${scope.slice(0, 40)}"`,
          'bad_scope',
        );
      }
      const families = [
        ...(scope === 'process' ? [] : await collectLedgerMetrics(ctx.ledger)),
        ...(scope === 'ledger'
          ? []
          : collectProcessMetrics({
              admission: instrumented.get(ctx.ledger) ?? null,
              github: githubApiStats(ctx.ledger),
              runtime: ctx.runtime,
              buckets: ADMISSION_BUCKETS_S,
              writeErrors: instrumentWriteErrors(ctx.ledger),
            })),
      ];
      return c.body(formatPrometheus(families), 200, {
        'content-type': PROM_CONTENT_TYPE,
        'cache-control': 'no-store',
      });
    });
  },
};
