/**
 * A small Prometheus text-format (0.0.4) writer. Plain string building with no Node APIs, so the
 * same code serves /metrics on Node and on Workers.
 */

export type Labels = Record<string, string>;

export interface Sample {
  labels?: Labels;
  value: number;
}

export interface GaugeFamily {
  name: string;
  help: string;
  type: 'gauge' | 'counter';
  samples: Sample[];
}

export interface HistogramFamily {
  name: string;
  help: string;
  type: 'histogram';
  /** Upper bounds in ascending order; `+Inf` is added. */
  buckets: readonly number[];
  /**
   * Raw observations, cumulative counts kept by a {@link LiveHistogram}, or cumulative counts
   * read back from the ledger's persistent buckets (`counts` aligned with `buckets`).
   */
  series: (
    | { labels?: Labels; values: readonly number[] }
    | { labels?: Labels; live: LiveHistogram }
    | { labels?: Labels; totals: HistogramTotals }
  )[];
}

/** Cumulative bucket counts (aligned with the family's buckets), sum and count of one series. */
export interface HistogramTotals {
  counts: readonly number[];
  sum: number;
  count: number;
}

/** In-process histogram whose counts only grow (what Prometheus expects of a histogram). */
export class LiveHistogram {
  readonly counts: number[];
  sum = 0;
  count = 0;
  constructor(readonly buckets: readonly number[]) {
    this.counts = buckets.map(() => 0);
  }
  observe(v: number): void {
    this.buckets.forEach((b, i) => {
      if (v <= b) this.counts[i]! += 1;
    });
    this.sum += v;
    this.count += 1;
  }
}

export type MetricFamily = GaugeFamily | HistogramFamily;

/** The content type Prometheus expects for this format. */
export const PROM_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

function escapeHelp(s: string): string {
  return s.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
}

function escapeLabelValue(s: string): string {
  return s.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
}

/** Formats a sample value: integers as is, `+Inf`/`-Inf`/`NaN` as the format spells them. */
export function formatValue(v: number): string {
  if (Number.isNaN(v)) return 'NaN';
  if (v === Number.POSITIVE_INFINITY) return '+Inf';
  if (v === Number.NEGATIVE_INFINITY) return '-Inf';
  return String(v);
}

function formatLabels(labels: Labels | undefined): string {
  const entries = Object.entries(labels ?? {});
  if (entries.length === 0) return '';
  for (const [k] of entries)
    if (!LABEL.test(k) || k.startsWith('__')) throw new TypeError(`invalid label name "${k}"`);
  return `{${entries.map(([k, v]) => `${k}="${escapeLabelValue(v)}"`).join(',')}}`;
}

/** Cumulative bucket counts, sum and count of `values` for the given upper bounds. */
export function histogramOf(values: readonly number[], buckets: readonly number[]) {
  const counts = buckets.map((b) => values.filter((v) => v <= b).length);
  return { counts, sum: values.reduce((a, b) => a + b, 0), count: values.length };
}

/** Renders metric families to the exposition text, one `# HELP`/`# TYPE` block each. */
export function formatPrometheus(families: readonly MetricFamily[]): string {
  const out: string[] = [];
  const seen = new Set<string>();
  for (const f of families) {
    if (!NAME.test(f.name)) throw new TypeError(`invalid metric name "${f.name}"`);
    if (seen.has(f.name)) throw new TypeError(`metric "${f.name}" declared twice`);
    seen.add(f.name);
    out.push(`# HELP ${f.name} ${escapeHelp(f.help)}`, `# TYPE ${f.name} ${f.type}`);
    if (f.type === 'histogram') {
      for (let i = 1; i < f.buckets.length; i++) {
        if (!(f.buckets[i]! > f.buckets[i - 1]!)) throw new TypeError(`buckets of "${f.name}" must ascend`);
      }
      for (const s of f.series) {
        if ('live' in s && s.live.buckets !== f.buckets && s.live.buckets.join() !== f.buckets.join()) {
          throw new TypeError(`live histogram buckets differ from "${f.name}"`);
        }
        const h = 'live' in s ? s.live : 'totals' in s ? s.totals : histogramOf(s.values, f.buckets);
        f.buckets.forEach((b, i) => {
          out.push(`${f.name}_bucket${formatLabels({ ...s.labels, le: formatValue(b) })} ${h.counts[i]}`);
        });
        out.push(`${f.name}_bucket${formatLabels({ ...s.labels, le: '+Inf' })} ${h.count}`);
        out.push(`${f.name}_sum${formatLabels(s.labels)} ${formatValue(h.sum)}`);
        out.push(`${f.name}_count${formatLabels(s.labels)} ${h.count}`);
      }
    } else {
      for (const s of f.samples) out.push(`${f.name}${formatLabels(s.labels)} ${formatValue(s.value)}`);
    }
  }
  return `${out.join('\n')}\n`;
}
