import { seriesKey } from '../ledger/ledger.ts';
import type { HistogramFamily, Labels, MetricFamily } from './prom-text.ts';

/** Every outbox status (functions/ledger/outbox.ts), exported even at 0 so alerts see the series. */
export const OUTBOX_STATUSES = ['pending', 'sent', 'failed'] as const;

/** A persistent counter row as the ledger stores it (functions/ledger/counters.ts). */
export interface CounterRow {
  name: string;
  series: string;
  value: number;
}

const PAIR = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

/** Parses the stored `k="v",…` label text back into labels. */
export function parseSeries(series: string): Labels {
  const out: Labels = {};
  for (const m of series.matchAll(PAIR)) {
    out[m[1]!] = m[2]!.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
  }
  return out;
}

/** A counter family from the persistent rows; `ensure` lists samples exported at 0 before the first bump. */
export function counterFamily(
  rows: readonly CounterRow[],
  f: { name: string; help: string; ensure?: readonly Labels[] },
): MetricFamily {
  const values = new Map<string, number>();
  for (const l of f.ensure ?? []) values.set(seriesKey(l), 0);
  for (const r of rows) if (r.name === f.name) values.set(r.series, r.value);
  return {
    name: f.name,
    help: f.help,
    type: 'counter',
    samples: [...values]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([s, value]) => ({ labels: parseSeries(s), value })),
  };
}

/** A histogram family from the persistent `_bucket`/`_sum`/`_count` rows. */
export function histogramFamily(
  rows: readonly CounterRow[],
  f: { name: string; help: string; buckets: readonly number[]; ensure?: readonly Labels[] },
): HistogramFamily {
  const series = new Map<string, { counts: number[]; sum: number; count: number }>();
  const get = (key: string) => {
    let s = series.get(key);
    if (!s) {
      s = { counts: f.buckets.map(() => 0), sum: 0, count: 0 };
      series.set(key, s);
    }
    return s;
  };
  for (const l of f.ensure ?? []) get(seriesKey(l));
  const index = new Map(f.buckets.map((b, i) => [String(b), i]));
  for (const r of rows) {
    if (r.name === `${f.name}_sum`) get(r.series).sum = r.value;
    else if (r.name === `${f.name}_count`) get(r.series).count = r.value;
    else if (r.name === `${f.name}_bucket`) {
      const labels = parseSeries(r.series);
      const le = labels.le;
      delete labels.le;
      const i = le == null ? undefined : index.get(le);
      if (i !== undefined) get(seriesKey(labels)).counts[i] = r.value;
    }
  }
  return {
    name: f.name,
    help: f.help,
    type: 'histogram',
    buckets: f.buckets,
    series: [...series]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([key, totals]) => (key ? { labels: parseSeries(key), totals } : { totals })),
  };
}
