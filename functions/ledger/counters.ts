import { isTerminalStatus } from '../../core/model.ts';
import { type RawSql, type Tx, txSql } from './db.ts';
import { placeholders } from './raw-rows.ts';

/**
 * Persistent Prometheus aggregates (docs/adr/0045-persistent-metric-counters.md).
 * Counters and histogram buckets are bumped in the same write transaction as the events they
 * count, so a rolled-back command counts nothing, nothing is counted twice when several
 * controller processes share the ledger, and every value only grows for the life of the ledger
 * (scrapes read the table; they never rebuild a histogram from a window of rows).
 */

/** Request-to-grant wait buckets (seconds): a grant within the second up to the 6 h queue timeout. */
export const WAIT_BUCKETS_S = [1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 21600] as const;
/** Host-prepared-to-runner-started buckets (seconds). */
export const RUNNER_START_BUCKETS_S = [1, 2, 5, 10, 20, 30, 60, 120, 300, 600] as const;

/** Counter and histogram families the ledger keeps (names without `_total`/`_bucket` suffixes). */
export const LEDGER_COUNTERS = {
  wait: 'spark_reservation_wait_seconds',
  runnerStartup: 'spark_runner_startup_seconds',
  ended: 'spark_reservations_ended_total',
  events: 'spark_ledger_events_total',
  deliveries: 'spark_webhook_deliveries_total',
} as const;

/** The Prometheus label text of a sample (`k="v"` pairs in the given order, values escaped). */
export function seriesKey(labels: Record<string, string>): string {
  return Object.entries(labels)
    .map(([k, v]) => `${k}="${v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"')}"`)
    .join(',');
}

const BUMP_ONE = `INSERT INTO metric_counters (name, series, value) VALUES (?, ?, ?)
  ON CONFLICT (name, series) DO UPDATE SET value = metric_counters.value + excluded.value`;

/** Adds `by` to one counter sample inside the caller's transaction. */
export async function bumpCounter(
  tx: Tx,
  name: string,
  labels: Record<string, string>,
  by = 1,
): Promise<void> {
  await txSql(tx).execute(BUMP_ONE, [name, seriesKey(labels), by]);
}

interface Bump {
  name: string;
  series: string;
  by: number;
}

/**
 * Bumps merged per sample as they are added: one upsert row per sample keeps a busy pass to a few
 * statements, and a burst of grants adds to a handful of samples instead of listing each bump.
 */
class Bumps {
  readonly samples = new Map<string, Map<string, number>>();
  add(name: string, series: string, by: number): void {
    let m = this.samples.get(name);
    if (!m) {
      m = new Map();
      this.samples.set(name, m);
    }
    m.set(series, (m.get(series) ?? 0) + by);
  }
  addAll(bumps: readonly Bump[]): void {
    for (const b of bumps) this.add(b.name, b.series, b.by);
  }
  rows(): Bump[] {
    const out: Bump[] = [];
    for (const [name, m] of this.samples) for (const [series, by] of m) out.push({ name, series, by });
    return out;
  }
}

// every bump as one JSON argument: one statement text whatever the number of series, so the local
// client keeps it prepared (a text per row count was prepared anew on most admission passes)
const BUMP_MANY = `INSERT INTO metric_counters (name, series, value) SELECT b.value ->> 0, b.value ->> 1, b.value ->> 2 FROM json_each(?) AS b WHERE true ON CONFLICT (name, series) DO UPDATE SET value = value + excluded.value`;

async function bumpMany(q: RawSql, bumps: Bumps): Promise<void> {
  const rows = bumps.rows();
  if (rows.length === 0) return;
  await q.execute(BUMP_MANY, [JSON.stringify(rows.map((b) => [b.name, b.series, b.by]))]);
}

/** The bumps one histogram observation makes: cumulative buckets, `+Inf`, `_sum`, `_count`. */
export function histogramBumps(
  name: string,
  buckets: readonly number[],
  labels: Record<string, string>,
  value: number,
): Bump[] {
  const v = Math.max(0, value);
  const base = seriesKey(labels);
  const withLe = (le: string) => (base ? `${base},le="${le}"` : `le="${le}"`);
  return [
    ...buckets
      .filter((b) => v <= b)
      .map((b) => ({ name: `${name}_bucket`, series: withLe(String(b)), by: 1 })),
    { name: `${name}_bucket`, series: withLe('+Inf'), by: 1 },
    { name: `${name}_sum`, series: base, by: v },
    { name: `${name}_count`, series: base, by: 1 },
  ];
}

/**
 * Observations of one histogram grouped by label set, turned into bumps once per group: a burst
 * of 16 grants of one kind makes one bump per bucket, not 16 (same totals as
 * {@link histogramBumps} per observation).
 */
class Observations {
  private readonly groups = new Map<string, { values: number[] }>();
  constructor(
    private readonly name: string,
    private readonly buckets: readonly number[],
  ) {}
  add(labels: Record<string, string>, value: number): void {
    const k = seriesKey(labels);
    let g = this.groups.get(k);
    if (!g) {
      g = { values: [] };
      this.groups.set(k, g);
    }
    g.values.push(Math.max(0, value));
  }
  into(bumps: Bumps): void {
    for (const [base, g] of this.groups) {
      const withLe = (le: string) => (base ? `${base},le="${le}"` : `le="${le}"`);
      for (const b of this.buckets) {
        let n = 0;
        for (const v of g.values) if (v <= b) n++;
        if (n) bumps.add(`${this.name}_bucket`, withLe(String(b)), n);
      }
      bumps.add(`${this.name}_bucket`, withLe('+Inf'), g.values.length);
      bumps.add(
        `${this.name}_sum`,
        base,
        g.values.reduce((a, v) => a + v, 0),
      );
      bumps.add(`${this.name}_count`, base, g.values.length);
    }
  }
}

const typeSeries = new Map<string, string>();
/** `type="…"` for an event type (the vocabulary is small and fixed: built once per type). */
function typeSeriesOf(type: string): string {
  let k = typeSeries.get(type);
  if (k === undefined) {
    k = seriesKey({ type });
    if (typeSeries.size < 1000) typeSeries.set(type, k);
  }
  return k;
}

/** What the counters need of an event row (the buffered insert). */
export interface CountedEvent {
  subjectId: string;
  type: string;
  toState?: string | null;
  /** The event's data as recorded: a grant's row carries its `kind` and `waitedMs` (ADR 0100). */
  data?: Record<string, unknown> | null;
}

/**
 * Counts the events a transaction is about to commit: every event by type, each grant's wait,
 * each released lease's runner startup time (by host) and each reservation end (by class and outcome).
 * Runs just before commit, so the rows it reads already carry the command's changes.
 */
export async function countEvents(q: RawSql, events: readonly CountedEvent[]): Promise<void> {
  if (events.length === 0) return;
  const bumps = new Bumps();
  for (const e of events) bumps.add(LEDGER_COUNTERS.events, typeSeriesOf(e.type), 1);
  const waits = new Observations(LEDGER_COUNTERS.wait, WAIT_BUCKETS_S);
  // a grant row carries what its wait observation needs; older callers' rows are read back below
  const granted: string[] = [];
  for (const e of events) {
    if (e.type !== 'reservation.allocated') continue;
    const kind = e.data?.kind;
    const waitedMs = e.data?.waitedMs;
    if (typeof kind === 'string' && typeof waitedMs === 'number') waits.add({ kind }, waitedMs / 1000);
    else granted.push(e.subjectId);
  }
  const ended = events
    .filter((e) => e.type.startsWith('reservation.') && isTerminalStatus(e.type.slice(12)))
    .map((e) => e.subjectId);
  const resvIds = [...new Set([...granted, ...ended])];
  if (resvIds.length) {
    const rs = await q.execute(
      `SELECT id, kind, status, outcome, created_at, granted_at FROM reservations WHERE id IN (${placeholders(
        resvIds.length,
      )})`,
      resvIds,
    );
    const byId = new Map(
      rs.rows.map((r) => [
        r.id as string,
        {
          kind: r.kind as string,
          status: r.status as string,
          outcome: r.outcome as string | null,
          createdAt: r.created_at as number,
          grantedAt: r.granted_at as number | null,
        },
      ]),
    );
    for (const id of granted) {
      const r = byId.get(id);
      if (r?.grantedAt == null) continue;
      waits.add({ kind: r.kind }, (r.grantedAt - r.createdAt) / 1000);
    }
    for (const id of ended) {
      const r = byId.get(id);
      if (!r) continue;
      bumps.add(
        LEDGER_COUNTERS.ended,
        seriesKey({ kind: r.kind, status: r.status, outcome: r.outcome ?? r.status }),
        1,
      );
    }
  }
  waits.into(bumps);
  // observed at release, which happens once per lease (a runner start may be reported again)
  const started = [...new Set(events.filter((e) => e.type === 'lease.released').map((e) => e.subjectId))];
  if (started.length) {
    const rs = await q.execute(
      `SELECT host_id, prepared_at, runner_started_at FROM leases WHERE id IN (${placeholders(started.length)})`,
      started,
    );
    for (const l of rs.rows) {
      const preparedAt = l.prepared_at as number | null;
      const runnerStartedAt = l.runner_started_at as number | null;
      if (preparedAt == null || runnerStartedAt == null) continue;
      bumps.addAll(
        histogramBumps(
          LEDGER_COUNTERS.runnerStartup,
          RUNNER_START_BUCKETS_S,
          { host: l.host_id as string },
          (runnerStartedAt - preparedAt) / 1000,
        ),
      );
    }
  }
  await bumpMany(q, bumps);
}
