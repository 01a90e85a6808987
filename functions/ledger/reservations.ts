import { and, eq, inArray, sql } from 'drizzle-orm';
import type { TokenLimit } from '../../core/config.ts';
import { reservationEvent } from '../../core/events.ts';
import {
  endsDone,
  executorPhrase,
  type HostFacts,
  hostsNeeded,
  isActiveStatus,
  isNotRunOutcome,
  isReleasableStatus,
  OPEN_STATUSES,
  type Outcome,
  type ReservationKind,
  type ReservationStatus,
  type Suite,
  servesDevelopment,
  type Topology,
} from '../../core/model.ts';
import { assertReservationTransition } from '../../core/state-machines.ts';
import { ApiError, conflict, notFound } from '../errors.ts';
import type { Tx } from './db.ts';
import { getHost, setHostPhase } from './hosts.ts';
import { leasesOf, setLeaseStatus } from './leases.ts';
import type { ReservationRow } from './rows.ts';
import * as t from './schema.ts';
import type { LedgerStore } from './store.ts';

/**
 * Reservation lifecycle commands. Each rule has one home here: ONE cancel (outcome `cancelled`),
 * ONE supersede (outcome `superseded`), one way to start a release; the webhook paths, the
 * operator API, the agent reports and the model test all call these.
 */

export interface NewReservation {
  kind: ReservationKind;
  topology: Topology;
  pool?: string | undefined;
  targetHost?: string | null | undefined;
  repo?: string | null | undefined;
  pr?: number | null | undefined;
  headSha?: string | null | undefined;
  suite?: Suite | null | undefined;
  requester: string;
  ttlS?: number | null | undefined;
  priority?: number | undefined;
  meta?: Record<string, unknown> | undefined;
}

type ReservationPatch = Partial<typeof t.reservations.$inferInsert>;

export async function getReservation(
  s: LedgerStore,
  tx: Tx | undefined,
  id: string,
): Promise<ReservationRow | null> {
  const rows = await (tx ?? s.db).select().from(t.reservations).where(eq(t.reservations.id, id));
  return rows[0] ?? null;
}

function defaultPool(s: LedgerStore, targetHost: string | null): string {
  if (targetHost) {
    const h = s.config.hosts.find((x) => x.id === targetHost);
    if (h) return h.pool;
  }
  return s.config.hosts[0]!.pool;
}

/** Persists a reservation before any runner exists (rule 7). Admission runs separately. */
export function createReservation(
  s: LedgerStore,
  input: NewReservation,
  actor: string,
  tx?: Tx,
): Promise<ReservationRow> {
  return s.within(tx, async (tx, now, changed) => {
    const pool = input.pool ?? defaultPool(s, input.targetHost ?? null);
    if (!s.config.hosts.some((h) => h.pool === pool)) {
      throw new ApiError(400, 'invalid_request', `unknown pool "${pool}"`);
    }
    if (input.targetHost) {
      const target = s.config.hosts.find((h) => h.id === input.targetHost);
      if (!target) throw new ApiError(400, 'invalid_request', `unknown host "${input.targetHost}"`);
    }
    const [{ next }] = (await tx.all<{ next: number }>(
      sql`SELECT coalesce(max(seq), 0) + 1 AS next FROM reservations`,
    )) as [{ next: number }];
    const row: typeof t.reservations.$inferInsert = {
      id: `r-${next}`,
      seq: next,
      kind: input.kind,
      priority: input.priority ?? s.config.priorities[input.kind],
      topology: input.topology,
      pool,
      targetHost: input.targetHost ?? null,
      repo: input.repo ?? null,
      pr: input.pr ?? null,
      headSha: input.headSha ?? null,
      suite: input.suite ?? null,
      requester: input.requester,
      status: 'queued',
      reason: 'waiting for the next admission pass',
      createdAt: now,
      updatedAt: now,
      queueDeadline: now + s.config.timings.queueTimeoutS * 1000,
      ttlS: input.ttlS ?? null,
      metaJson: input.meta ? JSON.stringify(input.meta) : null,
    };
    await tx.insert(t.reservations).values(row);
    await s.record(tx, now, {
      subjectType: 'reservation',
      subjectId: row.id!,
      type: 'reservation.queued',
      toState: 'queued',
      cause: `${input.kind} request`,
      actor,
      data: {
        kind: input.kind,
        topology: input.topology,
        repo: row.repo,
        pr: row.pr,
        headSha: row.headSha,
        suite: row.suite,
        targetHost: row.targetHost,
      },
    });
    changed.add('reservation');
    return (await getReservation(s, tx, row.id!))!;
  });
}

/**
 * Creates a development reservation for API token `tokenId` within its `tokenLimits` (issue 11
 * item 9): hosts it may use (403), longest TTL (403), and hosts held or waited for at once
 * (409; a pair counts 2). Counting and inserting share one write transaction, so concurrent
 * requests from one token cannot both slip under the limit.
 */
function servingIds(
  s: LedgerStore,
  pool: string,
  factsOf: (id: string) => { id: string; facts: HostFacts | null },
): string {
  const ids = s.config.hosts
    .filter((h) => h.pool === pool && servesDevelopment(factsOf(h.id)))
    .map((h) => h.id);
  return ids.length ? ids.join(', ') : 'none';
}

/** Where every development refusal starts: the spec's words for what development needs (ADR 0176). */
export const DEVELOPMENT_NEEDS_DSTACK = 'development needs the dstack executor';

/**
 * Refuses at once a development request no host can serve (ADR 0176): a development lease is used
 * through the dstack dev environment made for it, so it needs a host whose agent runs the `dstack`
 * executor — the named one, or for any host enough of its pool for the topology (as each host's
 * last heartbeat says). A host of another backend would hold a lease nobody can attach to.
 */
async function requireDevelopmentHosts(
  s: LedgerStore,
  tx: Tx,
  input: Pick<NewReservation, 'topology' | 'targetHost' | 'pool'>,
): Promise<void> {
  const target = input.targetHost ? s.config.hosts.find((h) => h.id === input.targetHost) : undefined;
  // an unknown host is createReservation's to refuse (400), like any other request's
  if (input.targetHost && !target) return;
  const pool = target?.pool ?? input.pool ?? defaultPool(s, null);
  const rows = new Map((await tx.select().from(t.hosts)).map((h) => [h.id, h]));
  const factsOf = (id: string): { id: string; facts: HostFacts | null } => {
    const json = rows.get(id)?.factsJson;
    try {
      return { id, facts: json ? (JSON.parse(json) as HostFacts) : null };
    } catch {
      return { id, facts: null };
    }
  };
  const see = 'see docs/executors.md';
  if (target) {
    const h = factsOf(target.id);
    if (servesDevelopment(h)) return;
    throw conflict(
      'development_needs_dstack',
      `${DEVELOPMENT_NEEDS_DSTACK}: a development lease is used through the dstack dev environment made for it, and ${executorPhrase(h)} (hosts of pool ${pool} running dstack: ${servingIds(s, pool, factsOf)}); ${see}`,
    );
  }
  const pooled = s.config.hosts.filter((h) => h.pool === pool).map((h) => factsOf(h.id));
  const serving = pooled.filter(servesDevelopment);
  const need = hostsNeeded(input.topology);
  if (serving.length >= need) return;
  const others = pooled
    .filter((h) => !servesDevelopment(h))
    .map(executorPhrase)
    .join(', ');
  throw conflict(
    'development_needs_dstack',
    serving.length === 0
      ? `${DEVELOPMENT_NEEDS_DSTACK}: a development lease is used through the dstack dev environment made for it, and no host of pool ${pool} runs dstack (${others}); ${see}`
      : `${DEVELOPMENT_NEEDS_DSTACK}: a pair needs 2 hosts of pool ${pool} that run dstack, and ${serving.length} does (${serving.map((h) => h.id).join(', ')}; ${others}); ${see}`,
  );
}

export function createDevelopmentReservation(
  s: LedgerStore,
  input: NewReservation & { kind: 'development' },
  tokenId: string,
  limit: TokenLimit,
  actor: string,
): Promise<ReservationRow> {
  return s.write(async (tx) => {
    if (limit.hosts) {
      const allowed = limit.hosts;
      if (input.topology === 'pair') {
        const pool = input.pool ?? defaultPool(s, null);
        const needed = s.config.hosts.filter((h) => h.pool === pool).map((h) => h.id);
        const missing = needed.filter((h) => !allowed.includes(h));
        if (missing.length)
          throw new ApiError(
            403,
            'token_limit',
            `this token may use only hosts ${allowed.join(', ')} (tokenLimits hosts); a pair in pool ${pool} could take ${missing.join(', ')}`,
          );
      } else if (!input.targetHost || !allowed.includes(input.targetHost)) {
        throw new ApiError(
          403,
          'token_limit',
          `this token may use only hosts ${allowed.join(', ')} (tokenLimits hosts): ${input.targetHost ? `not ${input.targetHost}` : 'name one with --host'}`,
        );
      }
    }
    if (input.ttlS != null && input.ttlS > limit.maxTtlS)
      throw new ApiError(
        403,
        'token_limit',
        `ttl ${input.ttlS}s exceeds this token's tokenLimits maxTtlS of ${limit.maxTtlS}s; ask for less`,
      );
    const open = await tx
      .select({ topology: t.reservations.topology })
      .from(t.reservations)
      .where(
        and(
          eq(t.reservations.kind, 'development'),
          inArray(t.reservations.status, [...OPEN_STATUSES]),
          sql`json_extract(${t.reservations.metaJson}, '$.tokenId') = ${tokenId}`,
        ),
      );
    const held = open.reduce((n, r) => n + (r.topology === 'pair' ? 2 : 1), 0);
    const asked = input.topology === 'pair' ? 2 : 1;
    if (held + asked > limit.maxConcurrentLeases)
      throw new ApiError(
        409,
        'token_limit',
        `this token already holds or waits for ${held} host(s) and may have at most ${limit.maxConcurrentLeases} at once (tokenLimits maxConcurrentLeases); release one first`,
      );
    // before anything is queued: a lease nobody can use is never made (ADR 0176)
    await requireDevelopmentHosts(s, tx, input);
    return createReservation(s, { ...input, meta: { ...input.meta, tokenId } }, actor, tx);
  });
}

/**
 * Moves a reservation through the transition table and records why. Ending it clears the queue
 * position and wait code, so a finished reservation never reports how it once waited.
 */
export async function transitionReservation(
  s: LedgerStore,
  tx: Tx,
  now: number,
  r: ReservationRow,
  to: ReservationStatus,
  cause: string,
  actor: string,
  extra: ReservationPatch & { outcome?: Outcome | null } = {},
  data?: Record<string, unknown>,
): Promise<void> {
  assertReservationTransition(r.status as ReservationStatus, to);
  const terminal = ['done', 'cancelled', 'superseded', 'failed'].includes(to);
  const patch: ReservationPatch = {
    status: to,
    updatedAt: now,
    ...(terminal ? { endedAt: now, reason: cause, position: null, waitCode: null } : {}),
    ...extra,
  };
  // compare-and-set on the status read in this transaction
  await tx
    .update(t.reservations)
    .set(patch)
    .where(and(eq(t.reservations.id, r.id), eq(t.reservations.status, r.status)));
  await s.record(tx, now, {
    subjectType: 'reservation',
    subjectId: r.id,
    type: reservationEvent(to),
    fromState: r.status,
    toState: to,
    cause,
    actor,
    data: data ?? null,
  });
  Object.assign(r, patch);
}

/**
 * Cancels queued work only; active work must be released (DESIGN.md: cancelled only while
 * queued). The outcome is `cancelled`, whatever the request last waited on.
 */
export function cancelReservation(
  s: LedgerStore,
  id: string,
  actor: string,
  cause = 'cancelled by requester',
  tx?: Tx,
): Promise<ReservationRow> {
  return s.within(tx, async (tx, now, changed) => {
    const r = await getReservation(s, tx, id);
    if (!r) throw notFound(`reservation ${id}`);
    if (r.status !== 'queued') {
      throw conflict(
        'not_queued',
        `reservation ${id} is ${r.status}; only queued work can be cancelled${
          isActiveStatus(r.status) ? ' — release it instead' : ''
        }`,
      );
    }
    await transitionReservation(s, tx, now, r, 'cancelled', cause, actor, { outcome: 'cancelled' });
    changed.add('reservation');
    return r;
  });
}

/** Which queued work a new commit supersedes. */
export type SupersedeScope =
  | { repo: string; pr: number }
  | { repo: string; kind: ReservationKind; pr?: undefined };

/**
 * A new head SHA: queued requests in `scope` for another SHA are superseded (outcome
 * `superseded`); active work keeps the SHA it actually tests (DESIGN.md "GitHub integration").
 * Returns the superseded rows.
 */
export function supersedeQueued(
  s: LedgerStore,
  scope: SupersedeScope,
  newSha: string,
  actor: string,
  cause = `new head ${newSha.slice(0, 7)} pushed`,
  tx?: Tx,
): Promise<ReservationRow[]> {
  return s.within(tx, async (tx, now, changed) => {
    const rows = await tx
      .select()
      .from(t.reservations)
      .where(
        and(
          eq(t.reservations.repo, scope.repo),
          scope.pr != null ? eq(t.reservations.pr, scope.pr) : eq(t.reservations.kind, scope.kind),
          eq(t.reservations.status, 'queued'),
        ),
      )
      .orderBy(t.reservations.seq);
    const out: ReservationRow[] = [];
    for (const r of rows) {
      if (r.headSha === newSha) continue;
      await transitionReservation(s, tx, now, r, 'superseded', cause, actor, { outcome: 'superseded' });
      out.push(r);
    }
    if (out.length) changed.add('reservation');
    return out;
  });
}

/** Queued and active reservations of one PR. */
export async function openReservationsOfPr(
  s: LedgerStore,
  tx: Tx | undefined,
  repo: string,
  pr: number,
): Promise<ReservationRow[]> {
  return (tx ?? s.db)
    .select()
    .from(t.reservations)
    .where(
      and(
        eq(t.reservations.repo, repo),
        eq(t.reservations.pr, pr),
        inArray(t.reservations.status, [...OPEN_STATUSES]),
      ),
    );
}

/** Queued reservations of a kind for a repository (merge CI, schedules). */
export async function queuedOfKind(
  s: LedgerStore,
  tx: Tx | undefined,
  repo: string,
  kind: ReservationKind,
): Promise<ReservationRow[]> {
  return (tx ?? s.db)
    .select()
    .from(t.reservations)
    .where(
      and(eq(t.reservations.repo, repo), eq(t.reservations.kind, kind), eq(t.reservations.status, 'queued')),
    );
}

/**
 * How many queued reservations of any class but `kind` wait: background CI is queued only while
 * nothing else waits, i.e. while the fleet would otherwise idle (issue 14 item 4).
 */
export async function countQueuedOtherThan(
  s: LedgerStore,
  tx: Tx | undefined,
  kind: ReservationKind,
): Promise<number> {
  const rows = await (tx ?? s.db)
    .select({ n: sql<number>`count(*)` })
    .from(t.reservations)
    .where(and(eq(t.reservations.status, 'queued'), sql`${t.reservations.kind} <> ${kind}`));
  return Number(rows[0]?.n ?? 0);
}

/** Moves a granted reservation forward (allocated → preparing → running). */
export function advanceReservation(
  s: LedgerStore,
  id: string,
  to: 'preparing' | 'running',
  cause: string,
  actor: string,
  tx?: Tx,
): Promise<ReservationRow> {
  return s.within(tx, async (tx, now, changed) => {
    const r = await getReservation(s, tx, id);
    if (!r) throw notFound(`reservation ${id}`);
    if (r.status === to) return r;
    await transitionReservation(s, tx, now, r, to, cause, actor);
    changed.add('reservation');
    return r;
  });
}

/**
 * Starts releasing an active reservation: its leases go to `releasing` and its hosts to
 * `cleaning`. Hosts are freed only when the agent confirms cleanup ({@link confirmReleased}).
 * With `showCause` the cause also becomes the reservation's reason: its check run and the views
 * say why while it releases, and a failed release ends with it (a pair node lost, a task never
 * started, a foreign job, work withdrawn before dispatch) instead of `ended: <outcome>`.
 */
export function beginRelease(
  s: LedgerStore,
  id: string,
  outcome: Outcome,
  cause: string,
  actor: string,
  tx?: Tx,
  opts: { showCause?: boolean } = {},
): Promise<ReservationRow> {
  return s.within(tx, async (tx, now, changed) => {
    const r = await getReservation(s, tx, id);
    if (!r) throw notFound(`reservation ${id}`);
    if (r.status === 'releasing') return r;
    if (!isReleasableStatus(r.status)) {
      throw conflict('not_active', `reservation ${id} is ${r.status}; only active work can be released`);
    }
    // work that never ran says so in the history's public words too (ADR 0177)
    await transitionReservation(
      s,
      tx,
      now,
      r,
      'releasing',
      cause,
      actor,
      { outcome },
      isNotRunOutcome(outcome) ? { outcome } : undefined,
    );
    if (opts.showCause) {
      r.reason = cause.slice(0, 500);
      await tx.update(t.reservations).set({ reason: r.reason }).where(eq(t.reservations.id, id));
    }
    for (const lease of await leasesOf(s, tx, id)) {
      if (lease.status === 'active' || lease.status === 'expired') {
        await setLeaseStatus(s, tx, now, lease, 'releasing', cause, actor);
        const host = await getHost(s, tx, lease.hostId);
        if (host && host.phase === 'allocated') {
          await setHostPhase(s, tx, now, host, 'cleaning', `release of ${id}`, actor);
        }
        changed.add(`host:${lease.hostId}`);
      }
    }
    changed.add('reservation');
    return r;
  });
}

/**
 * A CI lease expired — its host stopped heartbeating, so nothing renewed it — before its runner or
 * task started (ADR 0177): nothing of the PR ran, and nothing of it can now. The work is released at
 * once with outcome `lease_lost`, its cause shown on the check. A host whose facts are stale stays
 * `release-required` (never inferred clean): its agent, once back, stops what it started for the
 * lease and confirms before the host is freed, as for a pair node that lost contact.
 */
export async function releaseLostLease(
  s: LedgerStore,
  tx: Tx,
  now: number,
  a: { r: ReservationRow; hostId: string; processesUnknown: boolean; actor: string },
): Promise<void> {
  const host = await getHost(s, tx, a.hostId);
  // `cleaning`: the other node of its pair expired first in the same pass and began the release
  if (host && a.processesUnknown && (host.phase === 'allocated' || host.phase === 'cleaning')) {
    await setHostPhase(
      s,
      tx,
      now,
      host,
      'release-required',
      'lease lost before its work started: the host must confirm cleanup before it is freed',
      a.actor,
    );
  }
  await beginRelease(
    s,
    a.r.id,
    'lease_lost',
    `the lease on ${a.hostId} was lost before its work started: no heartbeat renewed it within ${s.config.timings.ciLeaseTtlS} s`,
    a.actor,
    tx,
    { showCause: true },
  );
}

/**
 * The GitHub job's result (`workflow_job` completed). A failure is sticky: a late success from
 * the healthy half of a failed pair must not turn the reservation's result into a pass. `keep`
 * keeps the current outcome too: the caller knows the report is the echo of the controller's
 * own cancellation of the run of work that already ended (ADR 0095).
 */
export async function recordJobOutcome(
  s: LedgerStore,
  tx: Tx,
  r: ReservationRow,
  reported: 'passed' | 'failed' | 'cancelled',
  cause: string,
  data: Record<string, unknown>,
  keep = false,
): Promise<Outcome> {
  const now = s.clock();
  // a pair failed as a unit stays failed for the node that lost contact (issue 14 item 1); a
  // foreign job's incident stays one when its admitted run is cancelled afterwards (ADR 0090)
  const sticky =
    (keep && r.outcome != null) ||
    r.outcome === 'failed' ||
    r.outcome === 'pair_node_lost' ||
    r.outcome === 'foreign_job' ||
    // work that never ran stays not-run: a late job result is not the PR's (ADR 0177)
    isNotRunOutcome(r.outcome);
  const outcome: Outcome = sticky ? (r.outcome as Outcome) : reported;
  await tx.update(t.reservations).set({ outcome, updatedAt: now }).where(eq(t.reservations.id, r.id));
  r.outcome = outcome;
  await s.record(tx, now, {
    subjectType: 'reservation',
    subjectId: r.id,
    type: 'reservation.job_completed',
    cause,
    actor: 'github',
    data: { outcome, ...data },
  });
  return outcome;
}

/** Records a fact about a reservation that changes no state (audited in its history). */
export async function noteReservation(
  s: LedgerStore,
  tx: Tx,
  r: Pick<ReservationRow, 'id'>,
  type: 'reservation.unwanted_while_active' | 'reservation.job_mismatch',
  cause: string,
  actor: string,
  data?: Record<string, unknown>,
): Promise<void> {
  await s.record(tx, s.clock(), {
    subjectType: 'reservation',
    subjectId: r.id,
    type,
    cause,
    actor,
    data: data ?? null,
  });
}

/**
 * Replaces the integration-owned `meta_json` of a reservation (the GitHub part keeps its facts
 * there: delivery, label, current head, check-run state).
 */
export async function writeReservationMeta(tx: Tx, r: ReservationRow, json: string): Promise<void> {
  await tx.update(t.reservations).set({ metaJson: json }).where(eq(t.reservations.id, r.id));
  r.metaJson = json;
}

/**
 * Merges a JSON object into the integration-owned `meta_json` on the ledger's side
 * (`json_patch`, RFC 7396): nothing is read first, so a batched write can carry it, and fields
 * another writer changed meanwhile are kept (docs/adr/0185-admission-pass-in-two-round-trips.md).
 * With `unlessField`, a meta that already has that field is left as it is.
 */
export async function mergeReservationMeta(
  tx: Tx,
  id: string,
  patch: Record<string, unknown>,
  unlessField?: string,
): Promise<void> {
  if (unlessField !== undefined && !/^[A-Za-z]+$/.test(unlessField))
    throw new TypeError(`meta field ${unlessField} cannot name a JSON path`);
  const guard = unlessField ? sql` AND json_extract(meta_json, ${`$.${unlessField}`}) IS NULL` : sql``;
  await tx.run(
    sql`UPDATE reservations SET meta_json = json_patch(meta_json, ${JSON.stringify(patch)}) WHERE id = ${id} AND meta_json IS NOT NULL${guard}`,
  );
}

/** Remembers the GitHub check run that shows this reservation. */
export async function setCheckRunId(tx: Tx, r: ReservationRow, checkRunId: number): Promise<void> {
  await tx.update(t.reservations).set({ checkRunId }).where(eq(t.reservations.id, r.id));
  r.checkRunId = checkRunId;
}

/**
 * Work that is no longer wanted before dispatch (PR closed, head moved, label removed) is
 * released with outcome `withdrawn`, and the check run says why in words.
 */
export function withdrawBeforeDispatch(s: LedgerStore, id: string, why: string, tx?: Tx): Promise<void> {
  return s.within(tx, async (tx) => {
    const cur = await getReservation(s, tx, id);
    if (!cur || !isReleasableStatus(cur.status)) return;
    const cause = `no longer wanted before dispatch: ${why}`;
    await beginRelease(s, id, 'withdrawn', cause, 'github', tx, { showCause: true });
  });
}

/** Runner start attempt `attempt` for a reservation whose runner was not picked up. */
export async function setRunnerAttempt(tx: Tx, id: string, attempt: number): Promise<void> {
  await tx.update(t.reservations).set({ attempt }).where(eq(t.reservations.id, id));
}

const iso = (ms: number | null) => (ms == null ? null : new Date(ms).toISOString());

/** What an operator's recovery did. */
export interface RecoveryResult {
  action: 'cancelled' | 'release-requested' | 'already-ended';
  awaitingHosts: string[];
  message: string;
}

/**
 * Why a releasing reservation is still releasing, host by host (ADR 0156): only its agent confirms
 * a release (rule 7), so recovery has nothing to do; the words say what will end it.
 */
async function releasingWhy(s: LedgerStore, tx: Tx, now: number, id: string): Promise<string> {
  const why: string[] = [];
  for (const l of (await leasesOf(s, tx, id)).filter((x) => x.status !== 'released')) {
    const h = await getHost(s, tx, l.hostId);
    if (!h) continue;
    const hb = h.lastHeartbeatAt;
    if (hb == null || now - hb > s.config.timings.offlineAfterS * 1000) {
      why.push(
        `${h.id}: its agent has not been heard from ${hb == null ? 'yet' : `since ${iso(hb)}`}, and only the agent confirms a release`,
      );
    } else if (h.phase === 'release-required') {
      why.push(`${h.id}: processes outlived the lease and are never killed; end them on the host`);
    } else {
      why.push(
        `${h.id} is ${h.phase}: its agent is cleaning up; a cleanup that keeps failing quarantines the host with the reason after the agent's timeouts.cleanupS (default 300 s), which ends this reservation`,
      );
    }
  }
  return why.join('; ') || 'no host is left to confirm';
}

/**
 * Operator recovery of expired or stuck work: queued → cancelled; granted → release requested
 * (hosts freed only once the agent confirms, rule 7). Work already releasing is refused with why it
 * still is, host by host — recovery never answers "done" having changed nothing; ending it without
 * the agent's confirmation is the emergency terminate. A live lease is refused: that is a
 * release, not a recovery.
 */
export function recoverReservation(s: LedgerStore, id: string, actor: string): Promise<RecoveryResult> {
  return s.write(async (tx, now, changed) => {
    const r = await getReservation(s, tx, id);
    if (!r) throw notFound(`reservation ${id}`);
    const leases = await leasesOf(s, tx, id);
    const live = leases.filter((l) => l.status === 'active' && l.expiresAt > now);
    if (live.length) {
      throw conflict(
        'live_lease',
        `${id} holds a live lease on ${live.map((l) => l.hostId).join(', ')} (expires ${iso(
          Math.min(...live.map((l) => l.expiresAt)),
        )}); recovery is for expired or stuck work — release it instead (sparkctl release ${id})`,
      );
    }
    const note = async (action: string, message: string) => {
      await s.record(tx, now, {
        subjectType: 'reservation',
        subjectId: id,
        type: 'reservation.recovery',
        fromState: r.status,
        toState: r.status,
        cause: message,
        actor,
        data: { action },
      });
    };
    if (r.status === 'queued') {
      await cancelReservation(s, id, actor, 'operator recovery: cancelled while queued', tx);
      return { action: 'cancelled', awaitingHosts: [], message: `${id} was queued; cancelled` };
    }
    if (isReleasableStatus(r.status)) {
      await beginRelease(
        s,
        id,
        'recovered',
        'operator recovery: lease no longer live; agent asked to stop what it owns',
        actor,
        tx,
      );
      const hosts = (await leasesOf(s, tx, id)).filter((l) => l.status !== 'released').map((l) => l.hostId);
      for (const h of hosts) changed.add(`host:${h}`);
      const message = `${id} marked for release; hosts ${hosts.join(', ')} are freed only after their agent confirms termination`;
      await note('release-requested', message);
      return { action: 'release-requested', awaitingHosts: hosts, message };
    }
    if (r.status === 'releasing') {
      throw conflict(
        'awaiting_agent',
        `${id} is already releasing; recovery has nothing to do: ${await releasingWhy(s, tx, now, id)}. To end it without the agent's confirmation (its hosts are then quarantined): sparkctl emergency terminate ${id} --reason …`,
      );
    }
    return {
      action: 'already-ended',
      awaitingHosts: [],
      message: `${id} already ended (${r.status}); nothing to recover`,
    };
  });
}

/**
 * Ends work that is releasing without its agents' confirmation (ADR 0156): every lease not yet
 * released is released, and its host — whose agent has not confirmed that nothing of the lease
 * runs or is left — is quarantined until an operator clears it, so nothing is granted there
 * meanwhile (rule 7 holds for the host, not for the stuck reservation). The agent, when it next
 * polls, still stops and removes what it started for the lease.
 */
async function endReleasingUnconfirmed(
  s: LedgerStore,
  tx: Tx,
  now: number,
  r: ReservationRow,
  why: string,
  actor: string,
): Promise<void> {
  for (const l of await leasesOf(s, tx, r.id)) {
    if (l.status === 'released') continue;
    const cause = `${why}; termination not confirmed by the agent of ${l.hostId}`.slice(0, 500);
    if (l.status !== 'releasing') await setLeaseStatus(s, tx, now, l, 'releasing', cause, actor);
    await setLeaseStatus(s, tx, now, l, 'released', cause, actor);
    const h = await getHost(s, tx, l.hostId);
    if (h && h.phase !== 'quarantined') {
      const note =
        `${why}; not confirmed clean by its agent: check the host, then clear the quarantine`.slice(0, 500);
      if (h.phase === 'allocated') await setHostPhase(s, tx, now, h, 'cleaning', cause, actor);
      await tx.update(t.hosts).set({ note }).where(eq(t.hosts.id, h.id));
      await setHostPhase(s, tx, now, h, 'quarantined', note, actor);
    }
  }
  const outcome = (r.outcome as Outcome | null) ?? 'terminated';
  await transitionReservation(
    s,
    tx,
    now,
    r,
    endsDone(outcome) ? 'done' : 'failed',
    why.slice(0, 500),
    actor,
    {
      outcome,
    },
  );
}

/**
 * The separately authorized emergency operation (DESIGN.md rule 1): queued work is cancelled,
 * granted work is released with outcome `terminated`, and work already releasing — its agent not
 * confirming the cleanup (a trap in its work dir, an agent gone) — ends now with its hosts
 * quarantined (ADR 0156); each leaves an `alert.emergency_terminate`.
 */
export function terminateReservation(
  s: LedgerStore,
  id: string,
  reason: string,
  actor: string,
): Promise<void> {
  return s.write(async (tx, now, changed) => {
    const r = await getReservation(s, tx, id);
    if (!r) throw notFound(`reservation ${id}`);
    const from = r.status;
    let to: string = 'releasing';
    if (r.status === 'queued') {
      await cancelReservation(s, id, actor, `emergency: ${reason}`, tx);
      to = 'cancelled';
    } else if (isReleasableStatus(r.status)) {
      await beginRelease(s, id, 'terminated', `emergency terminate: ${reason}`, actor, tx);
    } else if (r.status === 'releasing') {
      await endReleasingUnconfirmed(s, tx, now, r, `emergency terminate by ${actor}: ${reason}`, actor);
      to = r.status;
    } else {
      throw conflict('not_active', `${id} already ended (${r.status}); nothing to terminate`);
    }
    await s.record(tx, now, {
      subjectType: 'reservation',
      subjectId: id,
      type: 'alert.emergency_terminate',
      fromState: from,
      toState: to,
      cause: `emergency terminate by ${actor}: ${reason}`,
      actor,
    });
    changed.add('reservation');
    for (const l of await leasesOf(s, tx, id)) changed.add(`host:${l.hostId}`);
  });
}

/** The check-run words for a reservation whose runner a foreign job took (issue 12 item 4). */
export const FOREIGN_JOB_REASON = 'runner taken by a foreign job — stopped';

/**
 * A job that is not the admitted one runs on this reservation's runner (issue 12 item 4): the
 * reservation is released with outcome `foreign_job` (the agent's desired state becomes `clean`,
 * which stops the runner it started and cleans the host), and an `alert.foreign_job` fires.
 * Returns false when the reservation already ended or is releasing (audited only).
 */
export async function stopForeignJob(
  s: LedgerStore,
  tx: Tx,
  id: string,
  detail: string,
  data: Record<string, unknown>,
): Promise<boolean> {
  const r = await getReservation(s, tx, id);
  if (!r) throw notFound(`reservation ${id}`);
  const acted = isReleasableStatus(r.status);
  if (acted) {
    await beginRelease(s, id, 'foreign_job', `${FOREIGN_JOB_REASON}: ${detail}`, 'github', tx, {
      showCause: true,
    });
  }
  await s.record(tx, s.clock(), {
    subjectType: 'reservation',
    subjectId: id,
    type: 'alert.foreign_job',
    fromState: r.status,
    toState: acted ? 'releasing' : r.status,
    cause: `${acted ? FOREIGN_JOB_REASON : 'foreign job on a runner of ended work'}: ${detail}`,
    actor: 'github',
    data,
  });
  return acted;
}

/** An operator's request to start a home service: one open request per host (find or create). */
export function requestServiceStart(
  s: LedgerStore,
  hostId: string,
  requester: string,
  meta: Record<string, unknown>,
): Promise<ReservationRow> {
  return s.write(async (tx) => {
    const open = await tx
      .select()
      .from(t.reservations)
      .where(
        and(
          eq(t.reservations.kind, 'deckard'),
          eq(t.reservations.targetHost, hostId),
          inArray(t.reservations.status, [...OPEN_STATUSES]),
        ),
      );
    if (open[0]) return open[0];
    return createReservation(
      s,
      { kind: 'deckard', topology: 'single', targetHost: hostId, requester, meta },
      requester,
      tx,
    );
  });
}

/** Stores the evidence receipts of a reservation (JSON owned by core/protocol/receipt.ts). */
export async function storeReceipts(s: LedgerStore, tx: Tx, id: string, json: string): Promise<void> {
  await tx
    .update(t.reservations)
    .set({ receiptJson: json, updatedAt: s.clock() })
    .where(eq(t.reservations.id, id));
}
