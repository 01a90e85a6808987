import { sql } from 'drizzle-orm';
import { index, integer, primaryKey, real, sqliteTable, text, uniqueIndex } from 'drizzle-orm/sqlite-core';

/**
 * The reservation ledger (docs/architecture.md: "Every decision lives in one ledger"). Times are epoch ms.
 * Migrations are generated from this file by drizzle-kit (`npm run db:generate`).
 */

export const hosts = sqliteTable('hosts', {
  id: text('id').primaryKey(),
  pool: text('pool').notNull(),
  gpus: integer('gpus').notNull().default(1),
  homeService: text('home_service'),
  managed: integer('managed', { mode: 'boolean' }).notNull().default(false),
  phase: text('phase').notNull().default('idle'),
  lastHeartbeatAt: integer('last_heartbeat_at'),
  factsJson: text('facts_json'),
  /** Last fencing token issued for this host; the next grant uses this + 1. */
  fencingToken: integer('fencing_token').notNull().default(0),
  restoreAttempts: integer('restore_attempts').notNull().default(0),
  /** When the next restore attempt may start (backoff after a failed restore). */
  restoreNotBefore: integer('restore_not_before'),
  note: text('note'),
  updatedAt: integer('updated_at').notNull(),
});

export const reservations = sqliteTable(
  'reservations',
  {
    id: text('id').primaryKey(),
    seq: integer('seq').notNull(),
    kind: text('kind').notNull(),
    priority: integer('priority').notNull(),
    topology: text('topology').notNull(),
    pool: text('pool').notNull(),
    targetHost: text('target_host'),
    repo: text('repo'),
    pr: integer('pr'),
    headSha: text('head_sha'),
    suite: text('suite'),
    requester: text('requester').notNull(),
    status: text('status').notNull(),
    /** Why it waits (queued) or how it ended (terminal), in words. */
    reason: text('reason'),
    position: integer('position'),
    /** Why a queued reservation waits, as a code (core/admission.ts `WaitCode`); null once granted or ended. */
    waitCode: text('wait_code'),
    /** How the reservation ended or is ending (core/model.ts `Outcome`); never a wait code. */
    outcome: text('outcome'),
    createdAt: integer('created_at').notNull(),
    updatedAt: integer('updated_at').notNull(),
    queueDeadline: integer('queue_deadline').notNull(),
    grantedAt: integer('granted_at'),
    endedAt: integer('ended_at'),
    ttlS: integer('ttl_s'),
    /** Runner start attempts (JIT runner not picked up → retried with backoff). */
    attempt: integer('attempt').notNull().default(0),
    retryNotBefore: integer('retry_not_before'),
    checkRunId: integer('check_run_id'),
    receiptJson: text('receipt_json'),
    /** Free-form data owned by the GitHub integration (delivery ids, label, installation). */
    metaJson: text('meta_json'),
  },
  (t) => [
    uniqueIndex('reservations_seq').on(t.seq),
    index('reservations_status').on(t.status, t.priority, t.seq),
    index('reservations_pr').on(t.repo, t.pr),
    // The admission pass reads the head of a long queue, not all of it
    // (docs/adr/0187-scheduler-pass-measured-whole.md): the queue in admission order, the queued
    // requests past their deadline, and the builds waiting in it. Only queued rows are indexed.
    index('reservations_queue').on(sql`${t.priority} DESC`, t.seq).where(sql`status = 'queued'`),
    index('reservations_queue_deadline').on(t.queueDeadline).where(sql`status = 'queued'`),
    // and `reservations_queue_builds` on BUILD_KEY_SQL over queued rows: hand-written in migration
    // 0008 (drizzle-kit splits an expression index's text at its commas)
  ],
);

/**
 * A reservation's build key in SQL, as `buildKeyOf` (raw-rows.ts) gives it: `pr <repo>#<pr> <sha>`
 * for a PR's build, `repo <repo> <sha>` for per-commit CI without a PR, NULL otherwise (a missing
 * repo or SHA makes the concatenation NULL). The queued-builds index is on exactly this text, so a
 * query must spell it the same way to use it.
 */
export const BUILD_KEY_SQL = `(CASE WHEN pr IS NOT NULL THEN 'pr ' || repo || '#' || pr || ' ' || head_sha WHEN kind IN ('merge', 'benchmark', 'background') THEN 'repo ' || repo || ' ' || head_sha END)`;

/**
 * Builds that had a lane granted (rule 6 between lanes): one row per build —
 * `pr <repo>#<pr> <sha>` for a PR's build (any kind), `repo <repo> <sha>` for a per-commit CI
 * build without a PR — written by the grant (`INSERT OR IGNORE`). Admission asks it whether a
 * queued build keeps its slot. It replaced an index on every reservation's (head SHA, repo, PR,
 * granted_at), which each grant and each new request rewrote (ADR 0101).
 */
export const grantedBuilds = sqliteTable('granted_builds', {
  build: text('build').primaryKey(),
  /** When the build's first lane was granted. */
  grantedAt: integer('granted_at').notNull(),
});

export const leases = sqliteTable(
  'leases',
  {
    id: text('id').primaryKey(),
    reservationId: text('reservation_id')
      .notNull()
      .references(() => reservations.id),
    hostId: text('host_id')
      .notNull()
      .references(() => hosts.id),
    fencingToken: integer('fencing_token').notNull(),
    status: text('status').notNull(),
    lend: integer('lend', { mode: 'boolean' }).notNull().default(false),
    grantedAt: integer('granted_at').notNull(),
    expiresAt: integer('expires_at').notNull(),
    releasedAt: integer('released_at'),
    /** SHA-256 of the short-lived per-lease token the runner uses for preflight and receipts. */
    jobTokenHash: text('job_token_hash'),
    /** Agent progress on this lease (each set once, by a report carrying the current token). */
    preparedAt: integer('prepared_at'),
    runnerStartedAt: integer('runner_started_at'),
    runnerExitedAt: integer('runner_exited_at'),
    exitCode: integer('exit_code'),
    /** Compact evidence kept for the report: exit status, last log lines (never secrets). */
    evidenceJson: text('evidence_json'),
  },
  (t) => [
    uniqueIndex('leases_host_token').on(t.hostId, t.fencingToken),
    // Rule 2 enforced by the database itself: at most one binding lease per host, whichever
    // process writes it.
    uniqueIndex('leases_one_binding_per_host')
      .on(t.hostId)
      .where(sql`status in ('active', 'expired', 'releasing')`),
    index('leases_reservation').on(t.reservationId),
  ],
);

/**
 * The host's evidence of a lease's run (ADR 0160), one row per lease: what its agent observed
 * itself (preflight before the start, the runner's job result, the commit in the work tree after
 * the job; JSON owned by core/protocol/host-evidence.ts), written once with the agent's
 * `runner_exited` report. The check run's verdict comes from these rows, never from a receipt the
 * job posted (`reservations.receipt_json`, detail only). No field of it is a secret.
 */
export const hostEvidence = sqliteTable(
  'host_evidence',
  {
    leaseId: text('lease_id')
      .primaryKey()
      .references(() => leases.id),
    reservationId: text('reservation_id').notNull(),
    hostId: text('host_id').notNull(),
    fencingToken: integer('fencing_token').notNull(),
    evidenceJson: text('evidence_json').notNull(),
    recordedAt: integer('recorded_at').notNull(),
  },
  (t) => [index('host_evidence_reservation').on(t.reservationId)],
);

/** Append-only history: every transition with its cause. Never updated or deleted. */
export const events = sqliteTable(
  'events',
  {
    id: integer('id').primaryKey({ autoIncrement: true }),
    at: integer('at').notNull(),
    subjectType: text('subject_type').notNull(),
    subjectId: text('subject_id').notNull(),
    type: text('type').notNull(),
    fromState: text('from_state'),
    toState: text('to_state'),
    cause: text('cause').notNull(),
    actor: text('actor').notNull(),
    dataJson: text('data_json'),
  },
  (t) => [index('events_subject').on(t.subjectType, t.subjectId, t.id)],
);

/**
 * The webhook inbox: one row per delivery id, inserted by the webhook route in one
 * statement before it answers 202, then processed in arrival order (rowid) per `order_key`.
 * `state`: `pending` (waiting or retrying), `done` (its result recorded), `parked` (failed
 * `attempts` times; visible to operators and retryable). The raw body is kept until done.
 */
export const webhookDeliveries = sqliteTable(
  'webhook_deliveries',
  {
    deliveryId: text('delivery_id').primaryKey(),
    event: text('event').notNull(),
    action: text('action'),
    receivedAt: integer('received_at').notNull(),
    result: text('result').notNull(),
    state: text('state').notNull().default('done'),
    /** `owner/repo#pr` (or `owner/repo`): deliveries with the same key are processed in order. */
    orderKey: text('order_key'),
    body: text('body'),
    attempts: integer('attempts').notNull().default(0),
    nextAttemptAt: integer('next_attempt_at'),
    lastError: text('last_error'),
    processedAt: integer('processed_at'),
  },
  (t) => [index('webhook_deliveries_open').on(t.state).where(sql`state <> 'done'`)],
);

export const outbox = sqliteTable(
  'outbox',
  {
    id: integer('id').primaryKey({ autoIncrement: true }),
    kind: text('kind').notNull(),
    /** Same key = same side effect; a second enqueue is ignored. */
    idempotencyKey: text('idempotency_key').notNull(),
    reservationId: text('reservation_id'),
    payloadJson: text('payload_json').notNull(),
    status: text('status').notNull().default('pending'),
    attempts: integer('attempts').notNull().default(0),
    nextAttemptAt: integer('next_attempt_at').notNull(),
    /** Claim token + expiry so two controller processes never send the same item at once. */
    claimedBy: text('claimed_by'),
    claimedUntil: integer('claimed_until'),
    lastError: text('last_error'),
    resultJson: text('result_json'),
    createdAt: integer('created_at').notNull(),
    sentAt: integer('sent_at'),
  },
  (t) => [
    uniqueIndex('outbox_key').on(t.idempotencyKey),
    index('outbox_due').on(t.status, t.nextAttemptAt),
    // a reservation's check-run rows: the check-sync insert counts them and a claim skips a check run
    // while another of its reservation's is in flight (docs/adr/0315-outbox-sender-wakes.md)
    index('outbox_reservation').on(t.reservationId, t.kind),
  ],
);

export const agentTokens = sqliteTable('agent_tokens', {
  id: text('id').primaryKey(),
  hostId: text('host_id')
    .notNull()
    .references(() => hosts.id),
  tokenHash: text('token_hash').notNull().unique(),
  createdAt: integer('created_at').notNull(),
  revokedAt: integer('revoked_at'),
  lastUsedAt: integer('last_used_at'),
});

export const apiTokens = sqliteTable('api_tokens', {
  id: text('id').primaryKey(),
  name: text('name').notNull(),
  /** Comma-separated scopes: develop, operate, emergency. */
  scopes: text('scopes').notNull(),
  tokenHash: text('token_hash').notNull().unique(),
  createdAt: integer('created_at').notNull(),
  revokedAt: integer('revoked_at'),
  lastUsedAt: integer('last_used_at'),
  /** When the token stops working (epoch ms); null = until revoked. */
  expiresAt: integer('expires_at'),
});

/** Repositories an operator enabled (docs/architecture.md: enabling is explicit). */
export const repositories = sqliteTable('repositories', {
  fullName: text('full_name').primaryKey(),
  installationId: integer('installation_id'),
  defaultBranch: text('default_branch').notNull().default('main'),
  pairEnabled: integer('pair_enabled', { mode: 'boolean' }).notNull().default(false),
  workflow: text('workflow'),
  enabledAt: integer('enabled_at').notNull(),
  disabledAt: integer('disabled_at'),
});

/** Small key/value state (sequence counters, cron last-run marks). */
export const meta = sqliteTable('meta', {
  key: text('key').primaryKey(),
  value: text('value').notNull(),
});

/**
 * JIT runner configs waiting to be handed to an agent. The config is written by the GitHub
 * outbox when the host is prepared and is nulled in the same transaction that hands it over, so
 * it is given exactly once and never rendered anywhere (docs/architecture.md "Relay agent protocol").
 */
export const jitHandoffs = sqliteTable(
  'jit_handoffs',
  {
    /** The runner name registered on GitHub (unique per attempt). */
    runnerName: text('runner_name').primaryKey(),
    leaseId: text('lease_id')
      .notNull()
      .references(() => leases.id),
    reservationId: text('reservation_id').notNull(),
    hostId: text('host_id').notNull(),
    /** Runner start attempt (a runner not picked up in time is replaced, up to the retry limit). */
    attempt: integer('attempt').notNull().default(0),
    runnerId: integer('runner_id'),
    jitConfig: text('jit_config'),
    createdAt: integer('created_at').notNull(),
    consumedAt: integer('consumed_at'),
    /** Set when the runner was deregistered on GitHub (release or pickup timeout). */
    deletedAt: integer('deleted_at'),
  },
  (t) => [index('jit_handoffs_lease').on(t.leaseId, t.attempt)],
);

/**
 * Persistent Prometheus aggregates: counters and cumulative histogram buckets, bumped
 * by the ledger in the same transaction as the event they count, so they only grow for the life
 * of the ledger and every controller process reads the same value. `series` is the sample's
 * label set as sorted `k="v"` text (e.g. `kind="merge",le="60"`), `''` when it has none.
 */
export const metricCounters = sqliteTable(
  'metric_counters',
  {
    name: text('name').notNull(),
    series: text('series').notNull(),
    value: real('value').notNull().default(0),
  },
  (t) => [primaryKey({ columns: [t.name, t.series] })],
);
