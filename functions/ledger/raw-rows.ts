import type { InArgs } from '@libsql/client';
import { ACTIVE_STATUSES, BINDING_LEASE_STATUSES, OPEN_STATUSES } from '../../core/model.ts';
import type { RawSql } from './db.ts';
import type { HostRow, LeaseRow, RepositoryRow, ReservationRow } from './rows.ts';
import { BUILD_KEY_SQL } from './schema.ts';

/**
 * Hand-written reads of the admission pass's inputs: the same rows drizzle
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

/** Each column's position in a column list (`json_array` keeps the order). */
export function indicesOf<C extends string>(columns: readonly C[]): Record<C, number> {
  return Object.fromEntries(columns.map((c, i) => [c, i])) as Record<C, number>;
}

export const num = (v: unknown): number => v as number;
export const numOrNull = (v: unknown): number | null => (v == null ? null : (v as number));
export const str = (v: unknown): string => v as string;
export const strOrNull = (v: unknown): string | null => (v == null ? null : (v as string));

const HOST_COLS = [
  'id',
  'pool',
  'gpus',
  'home_service',
  'managed',
  'phase',
  'last_heartbeat_at',
  'facts_json',
  'fencing_token',
  'restore_attempts',
  'restore_not_before',
  'note',
  'updated_at',
] as const;
const HOST_COLUMNS = HOST_COLS.join(', ');
const H = indicesOf(HOST_COLS);

function hostOf(v: readonly unknown[]): HostRow {
  return {
    id: str(v[H.id]),
    pool: str(v[H.pool]),
    gpus: num(v[H.gpus]),
    homeService: strOrNull(v[H.home_service]),
    managed: v[H.managed] === 1,
    phase: str(v[H.phase]),
    lastHeartbeatAt: numOrNull(v[H.last_heartbeat_at]),
    factsJson: strOrNull(v[H.facts_json]),
    fencingToken: num(v[H.fencing_token]),
    restoreAttempts: num(v[H.restore_attempts]),
    restoreNotBefore: numOrNull(v[H.restore_not_before]),
    note: strOrNull(v[H.note]),
    updatedAt: num(v[H.updated_at]),
  };
}

const LEASE_COLS = [
  'id',
  'reservation_id',
  'host_id',
  'fencing_token',
  'status',
  'lend',
  'granted_at',
  'expires_at',
  'released_at',
  'job_token_hash',
  'prepared_at',
  'runner_started_at',
  'runner_exited_at',
  'exit_code',
  'evidence_json',
] as const;
const LEASE_COLUMNS = LEASE_COLS.join(', ');
const L = indicesOf(LEASE_COLS);

function leaseOf(v: readonly unknown[]): LeaseRow {
  return {
    id: str(v[L.id]),
    reservationId: str(v[L.reservation_id]),
    hostId: str(v[L.host_id]),
    fencingToken: num(v[L.fencing_token]),
    status: str(v[L.status]),
    lend: v[L.lend] === 1,
    grantedAt: num(v[L.granted_at]),
    expiresAt: num(v[L.expires_at]),
    releasedAt: numOrNull(v[L.released_at]),
    jobTokenHash: strOrNull(v[L.job_token_hash]),
    preparedAt: numOrNull(v[L.prepared_at]),
    runnerStartedAt: numOrNull(v[L.runner_started_at]),
    runnerExitedAt: numOrNull(v[L.runner_exited_at]),
    exitCode: numOrNull(v[L.exit_code]),
    evidenceJson: strOrNull(v[L.evidence_json]),
  };
}

const RESERVATION_COLS = [
  'id',
  'seq',
  'kind',
  'priority',
  'topology',
  'pool',
  'target_host',
  'repo',
  'pr',
  'head_sha',
  'suite',
  'requester',
  'status',
  'reason',
  'position',
  'wait_code',
  'outcome',
  'created_at',
  'updated_at',
  'queue_deadline',
  'granted_at',
  'ended_at',
  'ttl_s',
  'attempt',
  'retry_not_before',
  'check_run_id',
  'receipt_json',
  'meta_json',
] as const;
const RESERVATION_COLUMNS = RESERVATION_COLS.join(', ');
const R = indicesOf(RESERVATION_COLS);

function reservationOf(v: readonly unknown[]): ReservationRow {
  return {
    id: str(v[R.id]),
    seq: num(v[R.seq]),
    kind: str(v[R.kind]),
    priority: num(v[R.priority]),
    topology: str(v[R.topology]),
    pool: str(v[R.pool]),
    targetHost: strOrNull(v[R.target_host]),
    repo: strOrNull(v[R.repo]),
    pr: numOrNull(v[R.pr]),
    headSha: strOrNull(v[R.head_sha]),
    suite: strOrNull(v[R.suite]),
    requester: str(v[R.requester]),
    status: str(v[R.status]),
    reason: strOrNull(v[R.reason]),
    position: numOrNull(v[R.position]),
    waitCode: strOrNull(v[R.wait_code]),
    outcome: strOrNull(v[R.outcome]),
    createdAt: num(v[R.created_at]),
    updatedAt: num(v[R.updated_at]),
    queueDeadline: num(v[R.queue_deadline]),
    grantedAt: numOrNull(v[R.granted_at]),
    endedAt: numOrNull(v[R.ended_at]),
    ttlS: numOrNull(v[R.ttl_s]),
    attempt: num(v[R.attempt]),
    retryNotBefore: numOrNull(v[R.retry_not_before]),
    checkRunId: numOrNull(v[R.check_run_id]),
    receiptJson: strOrNull(v[R.receipt_json]),
    metaJson: strOrNull(v[R.meta_json]),
  };
}

/**
 * The whole-table reads every admission pass makes come back as JSON: the native binding converts
 * each value of a result to JS separately (~0.25 µs a value: 16 reservations × 28 columns cost
 * 123 µs, as JSON text 40 µs), while V8 parses the text in a few µs. A point read is one
 * `json_array(…)` per row; a read of many rows is one text for all of them
 * (`json_group_array(json_array(…))`, {@link asJsonList}), since each row that crosses the binding
 * costs too (256 host rows: 0.42 ms as one text per row, 0.25 ms as one text, measured on the
 * scheduler bench's ledger; docs/adr/0250-scheduler-pass-reads-one-text.md). Exact for these
 * tables: integers, text and NULL, no reals or blobs; an integer beyond 2^53 is a RangeError, as
 * through the client. The result is read through the same mappers as a plain row.
 */
export const asJson = (columns: string, from: string) => `SELECT json_array(${columns}) AS j ${from}`;

/**
 * Every row `from` selects as one JSON text: an array of `json_array(columns)`. The aggregate's
 * order is not the subquery's by any guarantee SQLite gives, so a caller that needs an order sorts
 * the rows itself ({@link byAdmissionOrder}).
 */
const asJsonList = (columns: string, from: string) =>
  `SELECT json_group_array(json_array(${columns})) AS j FROM (SELECT ${columns} ${from})`;

/** The values of one `json_array` result, checked as the client checks integers. */
function checked(values: unknown[], names: readonly string[]): unknown[] {
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    // as the client does beyond 2^53 (these tables hold no reals): never a silent rounding
    if (typeof v === 'number' && !Number.isSafeInteger(v))
      throw new RangeError(`${names[i]} ${v} is not an integer JavaScript can hold exactly`);
  }
  return values;
}

export async function jsonRowsOf<T>(
  q: RawSql,
  sql: string,
  args: InArgs,
  names: readonly string[],
  map: (v: readonly unknown[]) => T,
): Promise<T[]> {
  const rs = await q.execute(sql, args);
  const out: T[] = new Array(rs.rows.length);
  for (let i = 0; i < rs.rows.length; i++)
    out[i] = map(checked(JSON.parse(rs.rows[i]!.j as string) as unknown[], names));
  return out;
}

/** The rows of an {@link asJsonList} read. */
async function jsonListOf<T>(
  q: RawSql,
  sql: string,
  args: InArgs,
  names: readonly string[],
  map: (v: readonly unknown[]) => T,
): Promise<T[]> {
  const rs = await q.execute(sql, args);
  const rows = JSON.parse((rs.rows[0]?.j as string | undefined) ?? '[]') as unknown[][];
  const out: T[] = new Array(rows.length);
  for (let i = 0; i < rows.length; i++) out[i] = map(checked(rows[i]!, names));
  return out;
}

/** Admission order (rule 1): priority descending, then FIFO by `seq`. */
const byAdmissionOrder = (a: ReservationRow, b: ReservationRow) => b.priority - a.priority || a.seq - b.seq;

const ALL_HOSTS = asJsonList(HOST_COLUMNS, 'FROM hosts');
// literal status lists: bound parameters would keep SQLite from the partial index (db.ts)
const BINDING_LEASES = asJsonList(
  LEASE_COLUMNS,
  `FROM leases WHERE status IN (${inlined(BINDING_LEASE_STATUSES)})`,
);
const OPEN_RESERVATIONS = asJsonList(
  RESERVATION_COLUMNS,
  `FROM reservations WHERE status IN (${inlined(OPEN_STATUSES)}) ORDER BY priority DESC, seq ASC`,
);

// The head of a long queue (docs/adr/0187-scheduler-pass-measured-whole.md), each read from a
// partial index over queued rows only (migration 0008). INDEXED BY: without table statistics
// SQLite's planner takes the status index instead and sorts a whole priority group — and builds
// each of its rows' JSON — before the LIMIT applies (measured at 10,000 queued).
const ACTIVE_RESERVATIONS = asJsonList(
  RESERVATION_COLUMNS,
  `FROM reservations WHERE status IN (${inlined(ACTIVE_STATUSES)})`,
);
const QUEUE_HEAD = asJsonList(
  RESERVATION_COLUMNS,
  `FROM reservations INDEXED BY reservations_queue WHERE status = 'queued' ORDER BY priority DESC, seq ASC LIMIT ?`,
);
const QUEUE_TIMED_OUT = asJsonList(
  RESERVATION_COLUMNS,
  `FROM reservations INDEXED BY reservations_queue_deadline WHERE status = 'queued' AND queue_deadline <= ?`,
);
// One queued lane of each build that already had a lane granted (rule 6 between lanes: its slot is
// kept). The builds waiting in the queue are walked on their index one seek at a time (a loose
// index scan: the next key above the last one), so the cost follows the number of builds queued,
// not the number of requests; `> ''` skips the requests that have no build (NULL key) by a seek too.
const NEXT_QUEUED_BUILD = `SELECT ${BUILD_KEY_SQL} FROM reservations INDEXED BY reservations_queue_builds WHERE status = 'queued' AND ${BUILD_KEY_SQL} > ? ORDER BY ${BUILD_KEY_SQL} LIMIT 1`;
const QUEUED_KEPT_LANES = asJsonList(
  RESERVATION_COLUMNS,
  `FROM reservations WHERE id IN (
    WITH RECURSIVE k(build) AS (
      SELECT (${NEXT_QUEUED_BUILD.replace('?', "''")})
      UNION ALL
      SELECT (${NEXT_QUEUED_BUILD.replace('?', 'k.build')}) FROM k WHERE k.build IS NOT NULL
    )
    SELECT (SELECT id FROM reservations INDEXED BY reservations_queue_builds WHERE status = 'queued' AND ${BUILD_KEY_SQL} = k.build LIMIT 1)
    FROM k WHERE k.build IN (SELECT build FROM granted_builds)
  )`,
);

/** Granted work: allocated, preparing, running, releasing. */
export const activeReservations = (q: RawSql): Promise<ReservationRow[]> =>
  jsonListOf(q, ACTIVE_RESERVATIONS, [], RESERVATION_COLS, reservationOf);

/** The first `limit` queued reservations in admission order (priority desc, then FIFO). */
export const queueHead = (q: RawSql, limit: number): Promise<ReservationRow[]> =>
  jsonListOf(q, QUEUE_HEAD, [limit], RESERVATION_COLS, reservationOf).then((rows) =>
    rows.sort(byAdmissionOrder),
  );

/** Queued reservations whose queue deadline is `now` or earlier. */
export const queuedTimedOut = (q: RawSql, now: number): Promise<ReservationRow[]> =>
  jsonListOf(q, QUEUE_TIMED_OUT, [now], RESERVATION_COLS, reservationOf);

/** One queued lane of each build that already had a lane granted (`granted_builds`). */
export const queuedKeptLanes = (q: RawSql): Promise<ReservationRow[]> =>
  jsonListOf(q, QUEUED_KEPT_LANES, [], RESERVATION_COLS, reservationOf);

const HOST_BY_ID = asJson(HOST_COLUMNS, 'FROM hosts WHERE id = ?');

/** One host, or null. */
export async function hostById(q: RawSql, id: string): Promise<HostRow | null> {
  return (await jsonRowsOf(q, HOST_BY_ID, [id], HOST_COLS, hostOf))[0] ?? null;
}

const BINDING_LEASE_OF_HOST = asJson(
  LEASE_COLUMNS,
  `FROM leases WHERE host_id = ? AND status IN (${inlined(BINDING_LEASE_STATUSES)})`,
);

/** The lease binding `hostId` now (active, expired or releasing), or null. */
export async function bindingLeaseOfHost(q: RawSql, hostId: string): Promise<LeaseRow | null> {
  return (await jsonRowsOf(q, BINDING_LEASE_OF_HOST, [hostId], LEASE_COLS, leaseOf))[0] ?? null;
}

const RESERVATION_BY_ID = asJson(RESERVATION_COLUMNS, 'FROM reservations WHERE id = ?');

/** One reservation, or null. */
export async function reservationById(q: RawSql, id: string): Promise<ReservationRow | null> {
  return (await jsonRowsOf(q, RESERVATION_BY_ID, [id], RESERVATION_COLS, reservationOf))[0] ?? null;
}

// the statuses bound, as drizzle's `inArray` bound them: the same plan, so the same row order
const OPEN_OF_PR = asJson(
  RESERVATION_COLUMNS,
  `FROM reservations WHERE repo = ? AND pr = ? AND status IN (${placeholders(OPEN_STATUSES.length)})`,
);

/** The open reservations of one pull request. */
export const openReservationsOfPrRows = (q: RawSql, repo: string, pr: number): Promise<ReservationRow[]> =>
  jsonRowsOf(q, OPEN_OF_PR, [repo, pr, ...OPEN_STATUSES], RESERVATION_COLS, reservationOf);

const LEASES_OF_RESERVATION = asJson(LEASE_COLUMNS, 'FROM leases WHERE reservation_id = ? ORDER BY host_id');

/** The leases of a reservation, by host id. */
export const leasesOfReservation = (q: RawSql, reservationId: string): Promise<LeaseRow[]> =>
  jsonRowsOf(q, LEASES_OF_RESERVATION, [reservationId], LEASE_COLS, leaseOf);

const REPOSITORY_COLS = [
  'full_name',
  'installation_id',
  'default_branch',
  'pair_enabled',
  'workflow',
  'enabled_at',
  'disabled_at',
] as const;
const P = indicesOf(REPOSITORY_COLS);
const ENABLED_REPOSITORY = asJson(
  REPOSITORY_COLS.join(', '),
  'FROM repositories WHERE lower(full_name) = lower(?) AND disabled_at IS NULL',
);

function repositoryOf(v: readonly unknown[]): RepositoryRow {
  return {
    fullName: str(v[P.full_name]),
    installationId: numOrNull(v[P.installation_id]),
    defaultBranch: str(v[P.default_branch]),
    pairEnabled: v[P.pair_enabled] === 1,
    workflow: strOrNull(v[P.workflow]),
    enabledAt: num(v[P.enabled_at]),
    disabledAt: numOrNull(v[P.disabled_at]),
  };
}

/** An enabled repository by name, compared case-insensitively as GitHub does, or null. */
export async function enabledRepositoryRow(q: RawSql, fullName: string): Promise<RepositoryRow | null> {
  return (await jsonRowsOf(q, ENABLED_REPOSITORY, [fullName], REPOSITORY_COLS, repositoryOf))[0] ?? null;
}

/** Every host. */
export const allHosts = (q: RawSql): Promise<HostRow[]> => jsonListOf(q, ALL_HOSTS, [], HOST_COLS, hostOf);

/** Every lease that binds its host (active, expired, releasing). */
export const bindingLeaseRows = (q: RawSql): Promise<LeaseRow[]> =>
  jsonListOf(q, BINDING_LEASES, [], LEASE_COLS, leaseOf);

/** Queued and active reservations in admission order (priority desc, then FIFO). */
export const openReservations = (q: RawSql): Promise<ReservationRow[]> =>
  jsonListOf(q, OPEN_RESERVATIONS, [], RESERVATION_COLS, reservationOf).then((rows) =>
    rows.sort(byAdmissionOrder),
  );

/**
 * The `granted_builds` key of a reservation's build (ADR 0101), or null when its budget slot is
 * not per build: a PR's build (`pr <repo>#<pr> <sha>`, any kind), or a per-commit CI build
 * without a PR (`repo <repo> <sha>`: merge, benchmark, background — `core/admission.ts`
 * `budgetSlot`). Migration 0006 backfills the same keys in SQL.
 */
export function buildKeyOf(r: {
  repo: string | null;
  pr: number | null;
  headSha: string | null;
  kind: string;
}): string | null {
  if (r.repo == null || r.headSha == null) return null;
  if (r.pr != null) return `pr ${r.repo}#${r.pr} ${r.headSha}`;
  if (r.kind === 'merge' || r.kind === 'benchmark' || r.kind === 'background')
    return `repo ${r.repo} ${r.headSha}`;
  return null;
}

// one statement whatever the number of builds (a JSON array argument): the text, and so the kept
// statement, never changes
const BUILDS_GRANTED = 'SELECT build FROM granted_builds WHERE build IN (SELECT value FROM json_each(?))';
const RECORD_BUILDS =
  'INSERT OR IGNORE INTO granted_builds (build, granted_at) SELECT value, ? FROM json_each(?)';

/** Which of the build keys ({@link buildKeyOf}) already had a lane granted. One statement. */
export async function buildsHadGrant(q: RawSql, keys: readonly string[]): Promise<Set<string>> {
  if (keys.length === 0) return new Set();
  const rs = await q.execute(BUILDS_GRANTED, [JSON.stringify(keys)]);
  return new Set(rs.rows.map((r) => r.build as string));
}

// the key buildKeyOf gives, in SQL (migration 0006 backfilled granted_builds with the same)
const QUEUED_BUILDS_GRANTED = `SELECT build FROM granted_builds WHERE build IN (SELECT CASE WHEN pr IS NOT NULL THEN 'pr ' || repo || '#' || pr || ' ' || head_sha ELSE 'repo ' || repo || ' ' || head_sha END FROM reservations WHERE status = 'queued' AND repo IS NOT NULL AND head_sha IS NOT NULL AND (pr IS NOT NULL OR kind IN ('merge', 'benchmark', 'background')))`;

/**
 * Which builds of queued reservations already had a lane granted, without being told the keys
 * first: for a read batch, where nothing can wait for the reservations' own read.
 */
export async function queuedBuildsHadGrant(q: RawSql): Promise<Set<string>> {
  const rs = await q.execute(QUEUED_BUILDS_GRANTED);
  return new Set(rs.rows.map((r) => r.build as string));
}

/**
 * Records builds granted now (inside the granting transaction). A build already recorded is left
 * as it is — so a later lane of a known build writes no page at all.
 */
export async function recordGrantedBuilds(q: RawSql, keys: readonly string[], now: number): Promise<void> {
  if (keys.length) await q.execute(RECORD_BUILDS, [now, JSON.stringify(keys)]);
}
