import type { InValue } from '@libsql/client';
import { sql } from 'drizzle-orm';
import { isTerminalStatus } from '../../core/model.ts';
import type { RawSql, Tx } from './db.ts';
import { placeholders } from './raw-rows.ts';
import * as t from './schema.ts';

/**
 * Persistent Prometheus aggregates (issue 16, docs/adr/0045-persistent-metric-counters.md).
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

/** Adds `by` to one counter sample inside the caller's transaction. */
export async function bumpCounter(
  tx: Tx,
  name: string,
  labels: Record<string, string>,
  by = 1,
): Promise<void> {
  await tx
    .insert(t.metricCounters)
    .values({ name, series: seriesKey(labels), value: by })
    .onConflictDoUpdate({
      target: [t.metricCounters.name, t.metricCounters.series],
      set: { value: sql`${t.metricCounters.value} + excluded.value` },
    });
}

interface Bump {
  name: string;
  series: string;
  by: number;
}

async function bumpMany(q: RawSql, bumps: readonly Bump[]): Promise<void> {
  // merge same-sample bumps first: one upsert per sample keeps a busy pass to a few statements
  const merged = new Map<string, Bump>();
  for (const b of bumps) {
    const k = `${b.name}\u0000${b.series}`;
    const m = merged.get(k);
    if (m) m.by += b.by;
    else merged.set(k, { ...b });
  }
  const rows = [...merged.values()];
  // 3 columns per row keeps each statement far below SQLite's bound-parameter limit
  for (let i = 0; i < rows.length; i += 200) {
    const chunk = rows.slice(i, i + 200);
    await q.execute(
      `INSERT INTO metric_counters (name, series, value) VALUES ${chunk
        .map(() => '(?, ?, ?)')
        .join(', ')} ON CONFLICT (name, series) DO UPDATE SET value = value + excluded.value`,
      chunk.flatMap((b): InValue[] => [b.name, b.series, b.by]),
    );
  }
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
  const bumps: Bump[] = events.map((e) => ({
    name: LEDGER_COUNTERS.events,
    series: seriesKey({ type: e.type }),
    by: 1,
  }));
  // a grant row carries what its wait observation needs; older callers' rows are read back below
  const granted: string[] = [];
  for (const e of events) {
    if (e.type !== 'reservation.allocated') continue;
    const kind = e.data?.kind;
    const waitedMs = e.data?.waitedMs;
    if (typeof kind === 'string' && typeof waitedMs === 'number') {
      bumps.push(...histogramBumps(LEDGER_COUNTERS.wait, WAIT_BUCKETS_S, { kind }, waitedMs / 1000));
    } else granted.push(e.subjectId);
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
      bumps.push(
        ...histogramBumps(
          LEDGER_COUNTERS.wait,
          WAIT_BUCKETS_S,
          { kind: r.kind },
          (r.grantedAt - r.createdAt) / 1000,
        ),
      );
    }
    for (const id of ended) {
      const r = byId.get(id);
      if (!r) continue;
      bumps.push({
        name: LEDGER_COUNTERS.ended,
        series: seriesKey({ kind: r.kind, status: r.status, outcome: r.outcome ?? r.status }),
        by: 1,
      });
    }
  }
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
      bumps.push(
        ...histogramBumps(
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
