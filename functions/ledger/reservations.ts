import { and, eq, inArray, sql } from 'drizzle-orm';
import type { TokenLimit } from '../../core/config.ts';
import {
  executorPhrase,
  type HostFacts,
  hostsNeeded,
  OPEN_STATUSES,
  type ReservationKind,
  type Suite,
  servesDevelopment,
  type Topology,
} from '../../core/model.ts';
import { ApiError, conflict, notFound } from '../errors.ts';
import { type Tx, txSql } from './db.ts';
import { openReservationsOfPrRows } from './raw-rows.ts';
import {
  getReservation,
  insertReservationRow,
  nextReservationSeq,
  transitionReservation,
} from './reservation-status.ts';
import type { ReservationRow } from './rows.ts';
import * as t from './schema.ts';
import type { LedgerStore } from './store.ts';

// the reservation commands are split by concept; callers keep reaching them here
export {
  mergeReservationMeta,
  noteReservation,
  recordJobOutcome,
  setCheckRunId,
  setRunnerAttempt,
  storeReceipts,
  withdrawBeforeDispatch,
  writeReservationMeta,
} from './reservation-records.ts';
export {
  beginRelease,
  cancelReservation,
  FOREIGN_JOB_REASON,
  type RecoveryResult,
  recoverReservation,
  releaseLostLease,
  stopForeignJob,
  terminateReservation,
} from './reservation-release.ts';
export { getReservation, transitionReservation } from './reservation-status.ts';

/**
 * Reservation lifecycle commands. Each rule has one home: ONE cancel (outcome `cancelled`), ONE
 * supersede (outcome `superseded`), one way to start a release; the webhook paths, the operator
 * API, the agent reports and the model test all call these. Creation, supersede and the queue's
 * reads are here; the status move is in `reservation-status.ts`, ending work (cancel, release,
 * recovery) in `reservation-release.ts`, what a reservation records beside its status in
 * `reservation-records.ts` — all reachable from here.
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
    // kept statements, not drizzle's query building: an intake creates one for most deliveries
    // (docs/adr/0290-outbox-kept-statements.md)
    const q = txSql(tx);
    const next = await nextReservationSeq(q);
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
    await insertReservationRow(q, row);
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
 * Creates a development reservation for API token `tokenId` within its `tokenLimits`: hosts it may use (403), longest TTL (403), and hosts held or waited for at once
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
    // before anything is queued: a lease nobody can use is never made (ADR 0176); a restore drill
    // is used by nobody (it lends the host's service and is released once prepared)
    if (input.meta?.drill !== true) await requireDevelopmentHosts(s, tx, input);
    return createReservation(s, { ...input, meta: { ...input.meta, tokenId } }, actor, tx);
  });
}

/** Which queued work a new commit supersedes. */
export type SupersedeScope =
  | { repo: string; pr: number }
  | { repo: string; kind: ReservationKind; pr?: undefined };

/**
 * A new head SHA: queued requests in `scope` for another SHA are superseded (outcome
 * `superseded`); active work keeps the SHA it actually tests (docs/architecture.md "GitHub integration").
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
  // kept statement: every pull_request and /spark delivery reads them
  // (docs/adr/0270-inbox-path-kept-statements.md)
  return openReservationsOfPrRows(s.store.raw(tx), repo, pr);
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
 * nothing else waits, i.e. while the fleet would otherwise idle.
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
