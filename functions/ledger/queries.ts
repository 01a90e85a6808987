import { and, asc, count, desc, eq, inArray, isNotNull, isNull, min, or, sql } from 'drizzle-orm';
import { type LedgerSubjectType, leaseGrantsOf } from '../../core/events.ts';
import type { ReservationStatus } from '../../core/model.ts';
import { bindingLeases, type Tx } from './db.ts';
import { enabledRepositoryRow } from './raw-rows.ts';
import type {
  ApiTokenRow,
  EventRow,
  HandoffRow,
  LeaseRow,
  OutboxRow,
  RepositoryRow,
  ReservationRow,
} from './rows.ts';
import * as t from './schema.ts';
import type { LedgerStore } from './store.ts';

/**
 * Every read model the controller serves from the ledger (views, describe, dashboard, metrics,
 * GitHub sweeps, tokens). Reads only: writes are commands in the modules beside this one.
 */

type Query = Tx | LedgerStore['db'];

// ---------------------------------------------------------------- history

/**
 * One subject's history, oldest first. A lease's history starts with its grant: since ADR 0100
 * that is its reservation's `reservation.allocated` row (which lists the lease), included here;
 * an older ledger's `lease.granted` row is the lease's own and comes with the rest.
 */
export async function history(
  s: LedgerStore,
  subjectType: LedgerSubjectType,
  subjectId: string,
  limit = 200,
): Promise<EventRow[]> {
  const own = await s.db
    .select()
    .from(t.events)
    .where(and(eq(t.events.subjectType, subjectType), eq(t.events.subjectId, subjectId)))
    .orderBy(asc(t.events.id))
    .limit(limit);
  if (subjectType !== 'lease') return own;
  const grant = await leaseGrantRow(s, subjectId);
  if (!grant || own.some((e) => e.id === grant.id)) return own;
  return [grant, ...own].sort((a, b) => a.id - b.id).slice(0, limit);
}

/** The `reservation.allocated` row that granted a lease (ADR 0100), or null (unknown lease, old ledger). */
export async function leaseGrantRow(s: LedgerStore, leaseId: string): Promise<EventRow | null> {
  const lease = (
    await s.db
      .select({ reservationId: t.leases.reservationId })
      .from(t.leases)
      .where(eq(t.leases.id, leaseId))
  )[0];
  if (!lease) return null;
  // a reservation is granted once (queued → allocated only), so this is one row, or none before ADR 0100
  const rows = await s.db
    .select()
    .from(t.events)
    .where(
      and(
        eq(t.events.subjectType, 'reservation'),
        eq(t.events.subjectId, lease.reservationId),
        eq(t.events.type, 'reservation.allocated'),
      ),
    )
    .orderBy(asc(t.events.id));
  return rows.find((e) => leaseGrantsOf(e).some((g) => g.leaseId === leaseId)) ?? null;
}

export async function recentEvents(s: LedgerStore, limit = 50): Promise<EventRow[]> {
  return s.db.select().from(t.events).orderBy(desc(t.events.id)).limit(limit);
}

/** Newest events about the given subjects (the dashboard shows only public subjects). */
export async function recentEventsOf(
  s: LedgerStore,
  subjects: readonly LedgerSubjectType[],
  limit: number,
): Promise<EventRow[]> {
  return s.db
    .select()
    .from(t.events)
    .where(inArray(t.events.subjectType, [...subjects]))
    .orderBy(desc(t.events.id))
    .limit(limit);
}

/** A reservation's history with its leases' events, oldest first. */
export async function reservationHistory(
  s: LedgerStore,
  id: string,
  leaseIds: readonly string[],
  limit = 1000,
): Promise<EventRow[]> {
  return s.db
    .select()
    .from(t.events)
    .where(
      or(
        and(eq(t.events.subjectType, 'reservation'), eq(t.events.subjectId, id)),
        leaseIds.length
          ? and(eq(t.events.subjectType, 'lease'), inArray(t.events.subjectId, [...leaseIds]))
          : undefined,
      ),
    )
    .orderBy(asc(t.events.id))
    .limit(limit);
}

// ---------------------------------------------------------------- reservations

/** Loads reservations (newest first) with their leases (one query each). */
export async function loadReservations(
  s: LedgerStore,
  filter: { ids?: string[]; statuses?: readonly ReservationStatus[]; limit?: number },
): Promise<{ row: ReservationRow; leases: LeaseRow[] }[]> {
  const where = filter.ids
    ? inArray(t.reservations.id, filter.ids)
    : filter.statuses
      ? inArray(t.reservations.status, [...filter.statuses])
      : undefined;
  const rows = await s.db
    .select()
    .from(t.reservations)
    .where(where)
    .orderBy(desc(t.reservations.seq))
    .limit(filter.limit ?? 200);
  if (rows.length === 0) return [];
  const leaseRows = await s.db
    .select()
    .from(t.leases)
    .where(
      inArray(
        t.leases.reservationId,
        rows.map((r) => r.id),
      ),
    );
  return rows.map((row) => ({
    row,
    leases: leaseRows
      .filter((l) => l.reservationId === row.id)
      .sort((a, b) => a.hostId.localeCompare(b.hostId, 'en', { numeric: true })),
  }));
}

/** Reservations in `statuses` that GitHub created (repository set), optionally with a head SHA. */
export async function githubReservations(
  s: LedgerStore,
  statuses: readonly ReservationStatus[],
  opts: { withHeadSha?: boolean } = {},
): Promise<ReservationRow[]> {
  return s.db
    .select()
    .from(t.reservations)
    .where(
      and(
        inArray(t.reservations.status, [...statuses]),
        isNotNull(t.reservations.repo),
        opts.withHeadSha ? isNotNull(t.reservations.headSha) : undefined,
      ),
    );
}

// ---------------------------------------------------------------- leases and runners

/** The lease binding `hostId` now (active, expired or releasing), or null. */
export async function bindingLease(q: Query, hostId: string): Promise<LeaseRow | null> {
  const rows = await q
    .select()
    .from(t.leases)
    .where(and(eq(t.leases.hostId, hostId), bindingLeases));
  return rows[0] ?? null;
}

/** The newest runner handoff of a lease that was not deregistered. */
export async function currentHandoff(q: Query, leaseId: string): Promise<HandoffRow | null> {
  const rows = await q
    .select()
    .from(t.jitHandoffs)
    .where(and(eq(t.jitHandoffs.leaseId, leaseId), isNull(t.jitHandoffs.deletedAt)))
    .orderBy(desc(t.jitHandoffs.attempt), desc(t.jitHandoffs.createdAt))
    .limit(1);
  return rows[0] ?? null;
}

/** The JIT runner registered under `runnerName` (any reservation, any attempt), or null. */
export async function handoffByRunnerName(q: Query, runnerName: string): Promise<HandoffRow | null> {
  const rows = await q.select().from(t.jitHandoffs).where(eq(t.jitHandoffs.runnerName, runnerName));
  return rows[0] ?? null;
}

/** Every runner handoff (registration) of a reservation, deregistered ones included. */
export async function handoffsOf(q: Query, reservationId: string): Promise<HandoffRow[]> {
  return q.select().from(t.jitHandoffs).where(eq(t.jitHandoffs.reservationId, reservationId));
}

// ---------------------------------------------------------------- outbox

/** Outbox rows per kind and status (for tests and the bench). */
export async function outboxCounts(s: LedgerStore) {
  return s.db
    .select({ kind: t.outbox.kind, status: t.outbox.status, n: sql<number>`count(*)` })
    .from(t.outbox)
    .groupBy(t.outbox.kind, t.outbox.status);
}

/** Check-run outbox rows of the given reservations (id, reservation, status). */
export async function checkRunRowsOf(
  s: LedgerStore,
  reservationIds: string[],
): Promise<Pick<OutboxRow, 'id' | 'reservationId' | 'status'>[]> {
  if (!reservationIds.length) return [];
  return s.db
    .select({ id: t.outbox.id, reservationId: t.outbox.reservationId, status: t.outbox.status })
    .from(t.outbox)
    .where(and(eq(t.outbox.kind, 'check-run'), inArray(t.outbox.reservationId, reservationIds)));
}

// ---------------------------------------------------------------- metrics

/** The aggregate reads behind `/metrics`: no identities, only times and counts. */
export async function metricsReads(s: LedgerStore) {
  const [granted, started, outboxRows, leaseRows] = await Promise.all([
    s.db
      .select({
        kind: t.reservations.kind,
        createdAt: t.reservations.createdAt,
        grantedAt: t.reservations.grantedAt,
      })
      .from(t.reservations)
      .where(isNotNull(t.reservations.grantedAt))
      .orderBy(sql`${t.reservations.seq} desc`)
      .limit(10000),
    s.db
      .select({ preparedAt: t.leases.preparedAt, runnerStartedAt: t.leases.runnerStartedAt })
      .from(t.leases)
      .where(and(isNotNull(t.leases.preparedAt), isNotNull(t.leases.runnerStartedAt)))
      .limit(10000),
    s.db
      .select({ status: t.outbox.status, n: count(), oldest: min(t.outbox.createdAt) })
      .from(t.outbox)
      .groupBy(t.outbox.status),
    s.db
      .select({ status: t.leases.status, n: count() })
      .from(t.leases)
      .where(bindingLeases)
      .groupBy(t.leases.status),
  ]);
  return { granted, started, outboxRows, leaseRows };
}

// ---------------------------------------------------------------- repositories, tokens, deliveries

/** An enabled repository by name (case-insensitive, as GitHub treats names), or null. */
export async function enabledRepository(
  s: LedgerStore,
  fullName: string,
  tx?: Tx,
): Promise<RepositoryRow | null> {
  // kept statement: every pull_request and issue_comment delivery asks
  // (docs/adr/0270-inbox-path-kept-statements.md)
  return enabledRepositoryRow(s.store.raw(tx), fullName);
}

export async function listRepositories(s: LedgerStore): Promise<RepositoryRow[]> {
  return s.db.select().from(t.repositories);
}

export async function listApiTokens(s: LedgerStore): Promise<ApiTokenRow[]> {
  return s.db.select().from(t.apiTokens).orderBy(asc(t.apiTokens.createdAt));
}

/** True when a webhook delivery id was already recorded. */
export async function deliverySeen(s: LedgerStore, id: string): Promise<boolean> {
  const rows = await s.db
    .select({ id: t.webhookDeliveries.deliveryId })
    .from(t.webhookDeliveries)
    .where(eq(t.webhookDeliveries.deliveryId, id));
  return rows.length > 0;
}

// ---------------------------------------------------------------- queue ETA

/**
 * The newest finished host occupancies (grant to last host released) per reservation, with the
 * class the estimator groups them by (core/eta.ts). Bounded: the recent past predicts best.
 */
export async function occupancyHistory(s: LedgerStore, limit = 2000) {
  const rows = await s.db
    .select({
      kind: t.reservations.kind,
      topology: t.reservations.topology,
      suite: t.reservations.suite,
      grantedAt: t.reservations.grantedAt,
      releasedAt: sql<number>`max(${t.leases.releasedAt})`,
    })
    .from(t.reservations)
    .innerJoin(t.leases, eq(t.leases.reservationId, t.reservations.id))
    .where(and(isNotNull(t.reservations.grantedAt), isNotNull(t.leases.releasedAt)))
    .groupBy(t.reservations.id)
    .orderBy(desc(sql`max(${t.leases.releasedAt})`))
    .limit(limit);
  return rows.map((r) => ({
    kind: r.kind,
    topology: r.topology,
    suite: r.suite,
    heldS: Math.max(0, (r.releasedAt - (r.grantedAt ?? r.releasedAt)) / 1000),
  }));
}

/** Every persistent counter and histogram-bucket sample (functions/ledger/counters.ts). */
export async function metricCounterRows(s: LedgerStore) {
  return s.db.select().from(t.metricCounters);
}

/** Binding leases with the class of what holds them (lease expiry on /metrics and the dashboard). */
export async function bindingLeaseHolders(s: LedgerStore) {
  return s.db
    .select({
      hostId: t.leases.hostId,
      status: t.leases.status,
      expiresAt: t.leases.expiresAt,
      kind: t.reservations.kind,
      requester: t.reservations.requester,
    })
    .from(t.leases)
    .innerJoin(t.reservations, eq(t.leases.reservationId, t.reservations.id))
    .where(bindingLeases);
}

// ---------------------------------------------------------------- rollout readiness (ADR 0165)

/** Every host row (facts, heartbeat, phase, note) for the readiness checks. */
export async function hostRows(s: LedgerStore) {
  return s.db.select().from(t.hosts).orderBy(asc(t.hosts.id));
}

/**
 * The evidence that `hostId`'s home service came back after it was lent: the newest released
 * lease that lent it (drained, stopped, GPU verified free), and the first `restoring → service`
 * transition after that release (only a passing model-ready check makes it,
 * functions/ledger/hosts.ts `recordRestore`), or null when there is none yet.
 */
export async function restoreEvidence(
  s: LedgerStore,
  hostId: string,
): Promise<{
  lend: { leaseId: string; reservationId: string; releasedAt: number } | null;
  restored: { at: number; cause: string } | null;
}> {
  const [lend] = await s.db
    .select({ leaseId: t.leases.id, reservationId: t.leases.reservationId, releasedAt: t.leases.releasedAt })
    .from(t.leases)
    .where(and(eq(t.leases.hostId, hostId), eq(t.leases.lend, true), isNotNull(t.leases.releasedAt)))
    .orderBy(desc(t.leases.releasedAt), desc(t.leases.fencingToken))
    .limit(1);
  if (!lend?.releasedAt) return { lend: null, restored: null };
  const [restored] = await s.db
    .select({ at: t.events.at, cause: t.events.cause })
    .from(t.events)
    .where(
      and(
        eq(t.events.subjectType, 'host'),
        eq(t.events.subjectId, hostId),
        eq(t.events.type, 'host.phase'),
        eq(t.events.fromState, 'restoring'),
        eq(t.events.toState, 'service'),
        sql`${t.events.at} >= ${lend.releasedAt}`,
      ),
    )
    .orderBy(asc(t.events.id))
    .limit(1);
  return {
    lend: { leaseId: lend.leaseId, reservationId: lend.reservationId, releasedAt: lend.releasedAt },
    restored: restored ?? null,
  };
}
