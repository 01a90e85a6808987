import type { AppModule } from '../app.ts';
import { requirePublicRead } from '../auth/public-read.ts';
import { badRequest } from '../errors.ts';
import { ADMISSION_BUCKETS_S, collectLedgerMetrics } from './collect.ts';
import { collectProcessMetrics } from './process.ts';
import { formatPrometheus, PROM_CONTENT_TYPE } from './prom-text.ts';

const SCOPES = ['all', 'ledger', 'process'] as const;

/**
 * `GET /metrics` in the Prometheus text format (sanitized aggregates only).
 * `?scope=ledger` serves only the ledger-wide series (identical from every process on one
 * ledger: scrape them once), `?scope=process` only this process's own; the default serves both,
 * right for a single process (docs/metrics.md, docs/adr/0045-persistent-metric-counters.md).
 */
export const metricsModule: AppModule = {
  name: 'metrics',
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
        ...(scope === 'process' ? [] : await collectLedgerMetrics(ctx.ledger, ctx.services.views)),
        ...(scope === 'ledger'
          ? []
          : collectProcessMetrics({
              admission: ctx.services.metrics.admission,
              github: ctx.services.metrics.github,
              runtime: ctx.runtime,
              buckets: ADMISSION_BUCKETS_S,
              writeErrors: ctx.services.metrics.writeErrors,
            })),
      ];
      return c.body(formatPrometheus(families), 200, {
        'content-type': PROM_CONTENT_TYPE,
        'cache-control': 'no-store',
      });
    });
  },
};
