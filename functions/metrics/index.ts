import type { AppModule } from '../app.ts';
import { requirePublicRead } from '../auth/public-read.ts';
import type { Ledger } from '../ledger/ledger.ts';
import { ADMISSION_BUCKETS_S, collectMetrics } from './collect.ts';
import { formatPrometheus, LiveHistogram, PROM_CONTENT_TYPE } from './prom-text.ts';

const instrumented = new WeakMap<Ledger, LiveHistogram>();

/** Times every admission pass of this ledger instance (one histogram per ledger). */
export function instrumentAdmission(ledger: Ledger): LiveHistogram {
  const existing = instrumented.get(ledger);
  if (existing) return existing;
  const hist = new LiveHistogram(ADMISSION_BUCKETS_S);
  ledger.observePasses((ms) => hist.observe(ms / 1000));
  instrumented.set(ledger, hist);
  return hist;
}

/** Issue 6: `GET /metrics` in the Prometheus text format (sanitized aggregates only). */
export const metricsModule: AppModule = {
  name: 'metrics',
  hooks(ctx) {
    instrumentAdmission(ctx.ledger);
    return [];
  },
  routes(app, ctx) {
    app.get('/metrics', requirePublicRead(ctx), async (c) => {
      const text = formatPrometheus(await collectMetrics(ctx.ledger, instrumented.get(ctx.ledger) ?? null));
      return c.body(text, 200, { 'content-type': PROM_CONTENT_TYPE, 'cache-control': 'no-store' });
    });
  },
};
