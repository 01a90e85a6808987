import type { Row } from '@libsql/client';
import { BINDING_LEASE_STATUSES, OPEN_STATUSES } from '../../core/model.ts';
import type { RawSql } from './db.ts';
import type { HostRow, LeaseRow, ReservationRow } from './rows.ts';

/**
 * Hand-written reads of the admission pass's inputs (issue 13 item 2): the same rows drizzle
 * returns for `select().from(table)`, without building the query each time. Column lists are
 * spelled out (never `*`) so a kept statement's columns cannot change under it, and each mapper
 * reads exactly the columns its SELECT names. `test/integration/ledger-raw-rows.test.ts` checks
 * them against drizzle's rows for the same data.
 */

/** A vocabulary list as literal SQL (`'a', 'b'`): only plain lowercase words are accepted. */
export const inlined = (list: readonly string[]): string =>
  list
    .map((st) => {
      if (!/^[a-z_]+$/.test(st)) throw new TypeError(`status ${st} cannot be inlined into SQL`);
      return `'${st}'`;
    })
    .join(', ');

/** `?, ?, ?` for `n` arguments (statements are kept per distinct text, so per `n`). */
export function placeholders(n: number): string {
  return Array.from({ length: n }, () => '?').join(', ');
}

const num = (v: unknown): number => v as number;
const numOrNull = (v: unknown): number | null => (v == null ? null : (v as number));
const str = (v: unknown): string => v as string;
const strOrNull = (v: unknown): string | null => (v == null ? null : (v as string));

const HOST_COLUMNS =
  'id, pool, gpus, home_service, managed, phase, last_heartbeat_at, facts_json, fencing_token, restore_attempts, restore_not_before, note, updated_at';

function hostOf(r: Row): HostRow {
  return {
    id: str(r.id),
    pool: str(r.pool),
    gpus: num(r.gpus),
    homeService: strOrNull(r.home_service),
    managed: r.managed === 1,
    phase: str(r.phase),
    lastHeartbeatAt: numOrNull(r.last_heartbeat_at),
    factsJson: strOrNull(r.facts_json),
    fencingToken: num(r.fencing_token),
    restoreAttempts: num(r.restore_attempts),
    restoreNotBefore: numOrNull(r.restore_not_before),
    note: strOrNull(r.note),
    updatedAt: num(r.updated_at),
  };
}

const LEASE_COLUMNS =
  'id, reservation_id, host_id, fencing_token, status, lend, granted_at, expires_at, released_at, job_token_hash, prepared_at, runner_started_at, runner_exited_at, exit_code, evidence_json';

function leaseOf(r: Row): LeaseRow {
  return {
    id: str(r.id),
    reservationId: str(r.reservation_id),
    hostId: str(r.host_id),
    fencingToken: num(r.fencing_token),
    status: str(r.status),
    lend: r.lend === 1,
    grantedAt: num(r.granted_at),
    expiresAt: num(r.expires_at),
    releasedAt: numOrNull(r.released_at),
    jobTokenHash: strOrNull(r.job_token_hash),
    preparedAt: numOrNull(r.prepared_at),
    runnerStartedAt: numOrNull(r.runner_started_at),
    runnerExitedAt: numOrNull(r.runner_exited_at),
    exitCode: numOrNull(r.exit_code),
    evidenceJson: strOrNull(r.evidence_json),
  };
}

const RESERVATION_COLUMNS =
  'id, seq, kind, priority, topology, pool, target_host, repo, pr, head_sha, suite, requester, status, reason, position, wait_code, outcome, created_at, updated_at, queue_deadline, granted_at, ended_at, ttl_s, attempt, retry_not_before, check_run_id, receipt_json, meta_json';

function reservationOf(r: Row): ReservationRow {
  return {
    id: str(r.id),
    seq: num(r.seq),
    kind: str(r.kind),
    priority: num(r.priority),
    topology: str(r.topology),
    pool: str(r.pool),
    targetHost: strOrNull(r.target_host),
    repo: strOrNull(r.repo),
    pr: numOrNull(r.pr),
    headSha: strOrNull(r.head_sha),
    suite: strOrNull(r.suite),
    requester: str(r.requester),
    status: str(r.status),
    reason: strOrNull(r.reason),
    position: numOrNull(r.position),
    waitCode: strOrNull(r.wait_code),
    outcome: strOrNull(r.outcome),
    createdAt: num(r.created_at),
    updatedAt: num(r.updated_at),
    queueDeadline: num(r.queue_deadline),
    grantedAt: numOrNull(r.granted_at),
    endedAt: numOrNull(r.ended_at),
    ttlS: numOrNull(r.ttl_s),
    attempt: num(r.attempt),
    retryNotBefore: numOrNull(r.retry_not_before),
    checkRunId: numOrNull(r.check_run_id),
    receiptJson: strOrNull(r.receipt_json),
    metaJson: strOrNull(r.meta_json),
  };
}

/**
 * The whole-table reads every admission pass makes come back as one JSON array per row
 * (`json_array(…)`): the native binding converts each value of a result to JS separately
 * (~0.25 µs a value: 16 reservations × 28 columns cost 123 µs, as JSON text 40 µs), while V8
 * parses the text in a few µs. Exact for these tables: integers, text and NULL, no reals or blobs;
 * an integer beyond 2^53 is a RangeError, as through the client. The result is read through the
 * same mappers as a plain row.
 */
const asJson = (columns: string, from: string) => `SELECT json_array(${columns}) AS j ${from}`;
const namesOf = (columns: string) => columns.split(',').map((c) => c.trim());

async function jsonRowsOf<T>(
  q: RawSql,
  sql: string,
  names: readonly string[],
  map: (r: Row) => T,
): Promise<T[]> {
  const rs = await q.execute(sql, []);
  const out: T[] = [];
  for (const r of rs.rows) {
    const values = JSON.parse(r.j as string) as unknown[];
    const row: Record<string, unknown> = {};
    for (let i = 0; i < names.length; i++) {
      const v = values[i];
      // as the client does beyond 2^53 (these tables hold no reals): never a silent rounding
      if (typeof v === 'number' && !Number.isSafeInteger(v))
        throw new RangeError(`${names[i]} ${v} is not an integer JavaScript can hold exactly`);
      row[names[i]!] = v;
    }
    out.push(map(row as Row));
  }
  return out;
}

const HOST_NAMES = namesOf(HOST_COLUMNS);
const LEASE_NAMES = namesOf(LEASE_COLUMNS);
const RESERVATION_NAMES = namesOf(RESERVATION_COLUMNS);
const ALL_HOSTS = asJson(HOST_COLUMNS, 'FROM hosts');
// literal status lists: bound parameters would keep SQLite from the partial index (db.ts)
const BINDING_LEASES = asJson(
  LEASE_COLUMNS,
  `FROM leases WHERE status IN (${inlined(BINDING_LEASE_STATUSES)})`,
);
const OPEN_RESERVATIONS = asJson(
  RESERVATION_COLUMNS,
  `FROM reservations WHERE status IN (${inlined(OPEN_STATUSES)}) ORDER BY priority DESC, seq ASC`,
);

const HOST_BY_ID = `SELECT ${HOST_COLUMNS} FROM hosts WHERE id = ?`;

/** One host, or null. */
export async function hostById(q: RawSql, id: string): Promise<HostRow | null> {
  const rs = await q.execute(HOST_BY_ID, [id]);
  const row = rs.rows[0];
  return row ? hostOf(row) : null;
}

const BINDING_LEASE_OF_HOST = `SELECT ${LEASE_COLUMNS} FROM leases WHERE host_id = ? AND status IN (${inlined(
  BINDING_LEASE_STATUSES,
)})`;

/** The lease binding `hostId` now (active, expired or releasing), or null. */
export async function bindingLeaseOfHost(q: RawSql, hostId: string): Promise<LeaseRow | null> {
  const row = (await q.execute(BINDING_LEASE_OF_HOST, [hostId])).rows[0];
  return row ? leaseOf(row) : null;
}

const RESERVATION_BY_ID = `SELECT ${RESERVATION_COLUMNS} FROM reservations WHERE id = ?`;

/** One reservation, or null. */
export async function reservationById(q: RawSql, id: string): Promise<ReservationRow | null> {
  const row = (await q.execute(RESERVATION_BY_ID, [id])).rows[0];
  return row ? reservationOf(row) : null;
}

/** Every host. */
export const allHosts = (q: RawSql): Promise<HostRow[]> => jsonRowsOf(q, ALL_HOSTS, HOST_NAMES, hostOf);

/** Every lease that binds its host (active, expired, releasing). */
export const bindingLeaseRows = (q: RawSql): Promise<LeaseRow[]> =>
  jsonRowsOf(q, BINDING_LEASES, LEASE_NAMES, leaseOf);

/** Queued and active reservations in admission order (priority desc, then FIFO). */
export const openReservations = (q: RawSql): Promise<ReservationRow[]> =>
  jsonRowsOf(q, OPEN_RESERVATIONS, RESERVATION_NAMES, reservationOf);

const BUILD_CHECK = `(SELECT 1 FROM reservations r WHERE r.head_sha = j.value ->> 1 AND r.repo = j.value ->> 2 AND`;
// One statement for every build a pass asks about (issue 13 item 2: it was one per queued build):
// the builds come as one JSON argument, so the text — and the kept statement — never changes.
const BUILDS_GRANTED = `SELECT j.value ->> 0 AS k FROM json_each(?) j WHERE CASE WHEN j.value ->> 3 IS NOT NULL THEN EXISTS ${BUILD_CHECK} r.pr = j.value ->> 3 AND r.granted_at IS NOT NULL) ELSE EXISTS ${BUILD_CHECK} r.pr IS NULL AND r.granted_at IS NOT NULL AND r.kind IN (${inlined(
  ['merge', 'benchmark', 'background'],
)})) END`;

/** A build: a head SHA in a repository, for one PR or (`pr` null) for the repository itself. */
export interface Build {
  headSha: string;
  repo: string;
  pr: number | null;
}

/**
 * Which of `builds` already had a lane granted: same head SHA and same budget slot — the same PR
 * (any kind), or for work without a PR the same repository and a kind whose slot is per commit
 * (`core/admission.ts` `budgetSlot`). One statement; one seek on `reservations_build` per build.
 * Returns the indices into `builds` of those that did.
 */
export async function buildsHadGrant(q: RawSql, builds: readonly Build[]): Promise<Set<number>> {
  if (builds.length === 0) return new Set();
  const rs = await q.execute(BUILDS_GRANTED, [
    JSON.stringify(builds.map((b, i) => [i, b.headSha, b.repo, b.pr])),
  ]);
  return new Set(rs.rows.map((r) => Number(r.k)));
}
