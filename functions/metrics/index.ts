import type { AppModule } from '../app.ts';
import type { Ledger } from '../ledger/ledger.ts';
import { ADMISSION_BUCKETS_S, collectMetrics } from './collect.ts';
import { formatPrometheus, LiveHistogram, PROM_CONTENT_TYPE } from './prom-text.ts';

const instrumented = new WeakMap<Ledger, LiveHistogram>();

/**
 * Times every admission pass of this ledger instance. The admission loop (foundation) offers no
 * timing hook, so the pass method of this one instance is wrapped; the behaviour is unchanged.
 */
export function instrumentAdmission(ledger: Ledger): LiveHistogram {
  const existing = instrumented.get(ledger);
  if (existing) return existing;
  const hist = new LiveHistogram(ADMISSION_BUCKETS_S);
  const pass = ledger.admissionPass.bind(ledger);
  ledger.admissionPass = async (actor?: string) => {
    const start = performance.now();
    try {
      return await pass(actor);
    } finally {
      hist.observe((performance.now() - start) / 1000);
    }
  };
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
    app.get('/metrics', async (c) => {
      const text = formatPrometheus(await collectMetrics(ctx.ledger, instrumented.get(ctx.ledger) ?? null));
      return c.body(text, 200, { 'content-type': PROM_CONTENT_TYPE, 'cache-control': 'no-store' });
    });
  },
};
