import { and, asc, desc, eq, gt, inArray, sql } from 'drizzle-orm';
import { type AdmissionPlan, planAdmission } from '../../core/admission.ts';
import type { SparkConfig } from '../../core/config.ts';
import {
  ACTIVE_STATUSES,
  BINDING_LEASE_STATUSES,
  type HostFacts,
  type HostPhase,
  type HostRecord,
  type LeaseRecord,
  type LeaseStatus,
  type ReservationKind,
  type ReservationRecord,
  type ReservationStatus,
  type Suite,
  type Topology,
} from '../../core/model.ts';
import {
  assertHostTransition,
  assertLeaseTransition,
  assertReservationTransition,
} from '../../core/state-machines.ts';
import { ApiError, conflict, notFound, staleFencingToken } from '../errors.ts';
import type { LedgerDb, Tx } from './db.ts';
import * as t from './schema.ts';

/** One row of the append-only history, as written. */
export interface LedgerEvent {
  subjectType: 'reservation' | 'lease' | 'host' | 'token' | 'repository' | 'webhook' | 'audit' | 'outbox';
  subjectId: string;
  type: string;
  fromState?: string | null;
  toState?: string | null;
  cause: string;
  actor: string;
  data?: Record<string, unknown> | null;
}

/**
 * Called inside the same write transaction as every recorded event, so side effects (check runs,
 * dispatch, JIT config) land in the outbox atomically with the state change.
 */
export type TransitionHook = (tx: Tx, event: LedgerEvent, ctx: { now: number }) => Promise<void>;

export type Clock = () => number;

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

export type ReservationRow = typeof t.reservations.$inferSelect;
type EventInsert = typeof t.events.$inferInsert;
export type LeaseRow = typeof t.leases.$inferSelect;
export type HostRow = typeof t.hosts.$inferSelect;

/** Result of one admission pass as applied to the ledger. */
export interface PassResult {
  plan: AdmissionPlan;
  granted: { reservationId: string; leases: { leaseId: string; hostId: string; fencingToken: number }[] }[];
}

export interface LedgerOptions {
  config: SparkConfig;
  clock?: Clock;
  hooks?: TransitionHook[];
}

const CI_KINDS: readonly ReservationKind[] = ['manual', 'merge', 'benchmark', 'background'];

function parseFacts(json: string | null): HostFacts | null {
  if (!json) return null;
  try {
    return JSON.parse(json) as HostFacts;
  } catch {
    return null;
  }
}

export function toHostRecord(h: HostRow): HostRecord {
  return {
    id: h.id,
    pool: h.pool,
    gpus: h.gpus,
    homeService: h.homeService,
    managed: h.managed,
    phase: h.phase as HostPhase,
    lastHeartbeatAt: h.lastHeartbeatAt,
    facts: parseFacts(h.factsJson),
  };
}

export function toReservationRecord(r: ReservationRow): ReservationRecord {
  return {
    id: r.id,
    seq: r.seq,
    kind: r.kind as ReservationKind,
    priority: r.priority,
    topology: r.topology as Topology,
    pool: r.pool,
    targetHost: r.targetHost,
    repo: r.repo,
    pr: r.pr,
    headSha: r.headSha,
    suite: r.suite as Suite | null,
    requester: r.requester,
    status: r.status as ReservationStatus,
    createdAt: r.createdAt,
    queueDeadline: r.queueDeadline,
    ttlS: r.ttlS,
  };
}

export function toLeaseRecord(l: LeaseRow): LeaseRecord {
  return {
    id: l.id,
    reservationId: l.reservationId,
    hostId: l.hostId,
    fencingToken: l.fencingToken,
    status: l.status as LeaseStatus,
    grantedAt: l.grantedAt,
    expiresAt: l.expiresAt,
  };
}

type Listener = (topic: string) => void;

/**
 * The reservation ledger: every state change is one write transaction that checks the
 * transition table, writes the new state, appends the event and runs the outbox hooks.
 */
export class Ledger {
  readonly config: SparkConfig;
  readonly clock: Clock;
  private readonly hooks: TransitionHook[];
  private readonly listeners = new Set<Listener>();
  private readonly eventBuffers = new WeakMap<Tx, EventInsert[]>();
  private readonly passObservers = new Set<(durationMs: number) => void>();

  constructor(
    readonly store: LedgerDb,
    opts: LedgerOptions,
  ) {
    this.config = opts.config;
    this.clock = opts.clock ?? Date.now;
    this.hooks = [...(opts.hooks ?? [])];
  }

  get db() {
    return this.store.db;
  }

  addHook(hook: TransitionHook): void {
    this.hooks.push(hook);
  }

  /** Subscribe to in-process change notices (`reservation`, `host:<id>`, `outbox`). */
  subscribe(fn: Listener): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  notify(...topics: string[]): void {
    for (const topic of topics) for (const fn of this.listeners) fn(topic);
  }

  /** Runs `fn` in one write transaction; change notices go out only after commit. */
  async write<T>(fn: (tx: Tx, now: number, changed: Set<string>) => Promise<T>): Promise<T> {
    const changed = new Set<string>();
    const result = await this.store.write(async (tx) => {
      changed.clear();
      const buffer: EventInsert[] = [];
      this.eventBuffers.set(tx, buffer);
      try {
        const out = await fn(tx, this.clock(), changed);
        await this.flushEvents(tx, buffer);
        return out;
      } finally {
        this.eventBuffers.delete(tx);
      }
    });
    if (changed.size) this.notify(...changed);
    return result;
  }

  /**
   * Appends one event and lets the hooks enqueue its side effects in the same transaction.
   * Inside {@link write} the event rows are buffered and inserted in one statement just before
   * commit (same transaction, same order), which keeps a busy admission pass to a few statements.
   */
  async record(tx: Tx, now: number, ev: LedgerEvent): Promise<void> {
    const row: EventInsert = {
      at: now,
      subjectType: ev.subjectType,
      subjectId: ev.subjectId,
      type: ev.type,
      fromState: ev.fromState ?? null,
      toState: ev.toState ?? null,
      cause: ev.cause,
      actor: ev.actor,
      dataJson: ev.data ? JSON.stringify(ev.data) : null,
    };
    const buffer = this.eventBuffers.get(tx);
    if (buffer) buffer.push(row);
    else await tx.insert(t.events).values(row);
    for (const hook of this.hooks) await hook(tx, ev, { now });
  }

  private async flushEvents(tx: Tx, buffer: EventInsert[]): Promise<void> {
    // 9 columns per row keeps each statement far below SQLite's bound-parameter limit
    for (let i = 0; i < buffer.length; i += 100) await tx.insert(t.events).values(buffer.slice(i, i + 100));
    buffer.length = 0;
  }

  // ---------------------------------------------------------------- hosts

  /** Makes the ledger's host rows match the config (new hosts start unadopted). */
  async syncHosts(): Promise<void> {
    await this.write(async (tx, now) => {
      const existing = new Map((await tx.select().from(t.hosts)).map((h) => [h.id, h]));
      for (const h of this.config.hosts) {
        const row = existing.get(h.id);
        if (!row) {
          await tx.insert(t.hosts).values({
            id: h.id,
            pool: h.pool,
            gpus: h.gpus,
            homeService: h.homeService,
            managed: false,
            phase: 'idle',
            updatedAt: now,
          });
          await this.record(tx, now, {
            subjectType: 'host',
            subjectId: h.id,
            type: 'host.registered',
            toState: 'unknown',
            cause: 'listed in configuration',
            actor: 'controller',
          });
        } else if (row.pool !== h.pool || row.gpus !== h.gpus || row.homeService !== h.homeService) {
          await tx
            .update(t.hosts)
            .set({ pool: h.pool, gpus: h.gpus, homeService: h.homeService, updatedAt: now })
            .where(eq(t.hosts.id, h.id));
        }
      }
    });
  }

  async getHost(tx: Tx | undefined, id: string): Promise<HostRow | null> {
    const rows = await (tx ?? this.db).select().from(t.hosts).where(eq(t.hosts.id, id));
    return rows[0] ?? null;
  }

  /** Moves a host's persisted phase through the transition table and records it. */
  async setHostPhase(tx: Tx, now: number, host: HostRow, to: HostPhase, cause: string, actor: string) {
    if (host.phase === to) return;
    assertHostTransition(host.phase as HostPhase, to);
    await tx.update(t.hosts).set({ phase: to, updatedAt: now }).where(eq(t.hosts.id, host.id));
    await this.record(tx, now, {
      subjectType: 'host',
      subjectId: host.id,
      type: 'host.phase',
      fromState: host.phase,
      toState: to,
      cause,
      actor,
    });
    host.phase = to;
  }

  /** Adopt (or un-adopt) a host: only adopted hosts are ever granted (rule 2). */
  async setManaged(id: string, managed: boolean, actor: string): Promise<HostRow> {
    return this.write(async (tx, now, changed) => {
      const host = await this.getHost(tx, id);
      if (!host) throw notFound(`host ${id}`);
      if (host.managed === managed) return host;
      await tx.update(t.hosts).set({ managed, updatedAt: now }).where(eq(t.hosts.id, id));
      await this.record(tx, now, {
        subjectType: 'host',
        subjectId: id,
        type: managed ? 'host.adopted' : 'host.unadopted',
        cause: managed ? 'operator adopted the host' : 'operator removed the host from scheduling',
        actor,
      });
      changed.add('reservation').add(`host:${id}`);
      return { ...host, managed };
    });
  }

  /**
   * Stores a heartbeat: facts, freshness, the home service's serving state, and renews the TTL
   * of CI leases on the host (DESIGN.md: a lease's TTL is renewed by heartbeats).
   */
  async recordHeartbeat(hostId: string, facts: HostFacts, actor = `agent:${hostId}`): Promise<void> {
    await this.write(async (tx, now, changed) => {
      const host = await this.getHost(tx, hostId);
      if (!host) throw notFound(`host ${hostId}`);
      const wasFresh =
        host.lastHeartbeatAt != null &&
        now - host.lastHeartbeatAt <= this.config.timings.offlineAfterS * 1000;
      await tx
        .update(t.hosts)
        .set({ factsJson: JSON.stringify(facts), lastHeartbeatAt: now, updatedAt: now })
        .where(eq(t.hosts.id, hostId));
      if (!wasFresh) {
        await this.record(tx, now, {
          subjectType: 'host',
          subjectId: hostId,
          type: 'host.online',
          fromState: 'offline',
          cause: 'heartbeat received',
          actor,
        });
      }
      if (host.homeService) {
        if (host.phase === 'idle' && facts.serviceState === 'serving') {
          await this.setHostPhase(tx, now, host, 'service', `${host.homeService} reported serving`, actor);
        } else if (
          host.phase === 'service' &&
          (facts.serviceState === 'stopped' || facts.serviceState === 'failed')
        ) {
          await this.setHostPhase(
            tx,
            now,
            host,
            'idle',
            `${host.homeService} reported ${facts.serviceState}`,
            actor,
          );
        }
      }
      const ttl = this.config.timings.ciLeaseTtlS * 1000;
      const bound = await tx
        .select({ lease: t.leases, kind: t.reservations.kind })
        .from(t.leases)
        .innerJoin(t.reservations, eq(t.reservations.id, t.leases.reservationId))
        .where(and(eq(t.leases.hostId, hostId), eq(t.leases.status, 'active'), gt(t.leases.expiresAt, now)));
      for (const { lease, kind } of bound) {
        if (CI_KINDS.includes(kind as ReservationKind)) {
          await tx
            .update(t.leases)
            .set({ expiresAt: Math.max(lease.expiresAt, now + ttl) })
            .where(eq(t.leases.id, lease.id));
        }
      }
      changed.add('reservation').add(`host:${hostId}`);
    });
  }

  // ---------------------------------------------------------------- reservations

  async getReservation(tx: Tx | undefined, id: string): Promise<ReservationRow | null> {
    const rows = await (tx ?? this.db).select().from(t.reservations).where(eq(t.reservations.id, id));
    return rows[0] ?? null;
  }

  /** Persists a reservation before any runner exists (rule 7). Admission runs separately. */
  async createReservation(input: NewReservation, actor: string, tx?: Tx): Promise<ReservationRow> {
    const run = async (tx: Tx, now: number, changed?: Set<string>) => {
      const pool = input.pool ?? this.defaultPool(input.targetHost ?? null);
      if (!this.config.hosts.some((h) => h.pool === pool)) {
        throw new ApiError(400, 'invalid_request', `unknown pool "${pool}"`);
      }
      if (input.targetHost) {
        const target = this.config.hosts.find((h) => h.id === input.targetHost);
        if (!target) throw new ApiError(400, 'invalid_request', `unknown host "${input.targetHost}"`);
      }
      const [{ next }] = (await tx.all<{ next: number }>(
        sql`SELECT coalesce(max(seq), 0) + 1 AS next FROM reservations`,
      )) as [{ next: number }];
      const row: typeof t.reservations.$inferInsert = {
        id: `r-${next}`,
        seq: next,
        kind: input.kind,
        priority: input.priority ?? this.config.priorities[input.kind],
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
        queueDeadline: now + this.config.timings.queueTimeoutS * 1000,
        ttlS: input.ttlS ?? null,
        metaJson: input.meta ? JSON.stringify(input.meta) : null,
      };
      await tx.insert(t.reservations).values(row);
      await this.record(tx, now, {
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
      changed?.add('reservation');
      return (await this.getReservation(tx, row.id!))!;
    };
    if (tx) return run(tx, this.clock());
    return this.write((tx, now, changed) => run(tx, now, changed));
  }

  private defaultPool(targetHost: string | null): string {
    if (targetHost) {
      const h = this.config.hosts.find((x) => x.id === targetHost);
      if (h) return h.pool;
    }
    return this.config.hosts[0]!.pool;
  }

  /** Moves a reservation through the transition table and records why. */
  async transitionReservation(
    tx: Tx,
    now: number,
    r: ReservationRow,
    to: ReservationStatus,
    cause: string,
    actor: string,
    extra: Partial<typeof t.reservations.$inferInsert> = {},
    data?: Record<string, unknown>,
  ): Promise<void> {
    assertReservationTransition(r.status as ReservationStatus, to);
    const terminal = ['done', 'cancelled', 'superseded', 'failed'].includes(to);
    const patch = {
      status: to,
      updatedAt: now,
      ...(terminal ? { endedAt: now, reason: cause, position: null } : {}),
      ...extra,
    };
    // compare-and-set on the status read in this transaction
    await tx
      .update(t.reservations)
      .set(patch)
      .where(and(eq(t.reservations.id, r.id), eq(t.reservations.status, r.status)));
    await this.record(tx, now, {
      subjectType: 'reservation',
      subjectId: r.id,
      type: `reservation.${to}`,
      fromState: r.status,
      toState: to,
      cause,
      actor,
      data: data ?? null,
    });
    Object.assign(r, patch);
  }

  /** Cancels queued work only; active work must be released (DESIGN.md: cancelled only while queued). */
  async cancelReservation(id: string, actor: string, cause = 'cancelled by requester', tx?: Tx) {
    const run = async (tx: Tx, now: number, changed?: Set<string>) => {
      const r = await this.getReservation(tx, id);
      if (!r) throw notFound(`reservation ${id}`);
      if (r.status !== 'queued') {
        throw conflict(
          'not_queued',
          `reservation ${id} is ${r.status}; only queued work can be cancelled${
            ACTIVE_STATUSES.includes(r.status as ReservationStatus) ? ' — release it instead' : ''
          }`,
        );
      }
      await this.transitionReservation(tx, now, r, 'cancelled', cause, actor);
      changed?.add('reservation');
      return r;
    };
    if (tx) return run(tx, this.clock());
    return this.write((tx, now, changed) => run(tx, now, changed));
  }

  /**
   * A new head SHA for a PR: queued requests for an older SHA are superseded; active work keeps
   * the SHA it actually tests (DESIGN.md "GitHub integration"). Returns the superseded rows.
   */
  async supersedeQueued(
    repo: string,
    pr: number,
    newSha: string,
    actor: string,
    tx?: Tx,
  ): Promise<ReservationRow[]> {
    const run = async (tx: Tx, now: number, changed?: Set<string>) => {
      const rows = await tx
        .select()
        .from(t.reservations)
        .where(
          and(eq(t.reservations.repo, repo), eq(t.reservations.pr, pr), eq(t.reservations.status, 'queued')),
        );
      const out: ReservationRow[] = [];
      for (const r of rows) {
        if (r.headSha === newSha) continue;
        await this.transitionReservation(
          tx,
          now,
          r,
          'superseded',
          `new head ${newSha.slice(0, 7)} pushed`,
          actor,
          {
            outcome: 'superseded',
          },
        );
        out.push(r);
      }
      if (out.length) changed?.add('reservation');
      return out;
    };
    if (tx) return run(tx, this.clock());
    return this.write((tx, now, changed) => run(tx, now, changed));
  }

  /** Active reservations and binding leases of a reservation. */
  async leasesOf(tx: Tx | undefined, reservationId: string): Promise<LeaseRow[]> {
    return (tx ?? this.db)
      .select()
      .from(t.leases)
      .where(eq(t.leases.reservationId, reservationId))
      .orderBy(asc(t.leases.hostId));
  }

  /**
   * Verifies that `fencingToken` is the current binding lease of `hostId`; throws a 409
   * `stale_fencing_token` otherwise. Every agent command/report, preflight and release calls it.
   */
  async requireCurrentLease(tx: Tx | undefined, hostId: string, fencingToken: number): Promise<LeaseRow> {
    const rows = await (tx ?? this.db)
      .select()
      .from(t.leases)
      .where(and(eq(t.leases.hostId, hostId), inArray(t.leases.status, [...BINDING_LEASE_STATUSES])));
    const lease = rows[0];
    if (!lease || lease.fencingToken !== fencingToken) {
      throw staleFencingToken(hostId, fencingToken, lease?.fencingToken ?? null);
    }
    return lease;
  }

  /** Moves a granted reservation forward (allocated → preparing → running). */
  async advanceReservation(id: string, to: 'preparing' | 'running', cause: string, actor: string, tx?: Tx) {
    const run = async (tx: Tx, now: number, changed?: Set<string>) => {
      const r = await this.getReservation(tx, id);
      if (!r) throw notFound(`reservation ${id}`);
      if (r.status === to) return r;
      await this.transitionReservation(tx, now, r, to, cause, actor);
      changed?.add('reservation');
      return r;
    };
    if (tx) return run(tx, this.clock());
    return this.write((tx, now, changed) => run(tx, now, changed));
  }

  /**
   * Starts releasing an active reservation: its leases go to `releasing` and its hosts to
   * `cleaning`. Hosts are freed only when the agent confirms cleanup ({@link confirmReleased}).
   */
  async beginRelease(
    id: string,
    outcome: string,
    cause: string,
    actor: string,
    tx?: Tx,
  ): Promise<ReservationRow> {
    const run = async (tx: Tx, now: number, changed?: Set<string>) => {
      const r = await this.getReservation(tx, id);
      if (!r) throw notFound(`reservation ${id}`);
      if (r.status === 'releasing') return r;
      if (!['allocated', 'preparing', 'running'].includes(r.status)) {
        throw conflict('not_active', `reservation ${id} is ${r.status}; only active work can be released`);
      }
      await this.transitionReservation(tx, now, r, 'releasing', cause, actor, { outcome });
      for (const lease of await this.leasesOf(tx, id)) {
        if (lease.status === 'active' || lease.status === 'expired') {
          await this.setLeaseStatus(tx, now, lease, 'releasing', cause, actor);
          const host = await this.getHost(tx, lease.hostId);
          if (host && host.phase === 'allocated') {
            await this.setHostPhase(tx, now, host, 'cleaning', `release of ${id}`, actor);
          }
          changed?.add(`host:${lease.hostId}`);
        }
      }
      changed?.add('reservation');
      return r;
    };
    if (tx) return run(tx, this.clock());
    return this.write((tx, now, changed) => run(tx, now, changed));
  }

  async setLeaseStatus(tx: Tx, now: number, lease: LeaseRow, to: LeaseStatus, cause: string, actor: string) {
    assertLeaseTransition(lease.status as LeaseStatus, to);
    await tx
      .update(t.leases)
      .set({ status: to, ...(to === 'released' ? { releasedAt: now } : {}) })
      .where(and(eq(t.leases.id, lease.id), eq(t.leases.status, lease.status)));
    await this.record(tx, now, {
      subjectType: 'lease',
      subjectId: lease.id,
      type: `lease.${to}`,
      fromState: lease.status,
      toState: to,
      cause,
      actor,
      data: { reservationId: lease.reservationId, hostId: lease.hostId, fencingToken: lease.fencingToken },
    });
    lease.status = to;
  }

  /**
   * The agent confirmed that the work under `fencingToken` is gone and the host is clean.
   * Frees the host (to `idle`, or `restoring` when its home service must come back) and ends the
   * reservation once every lease of it is released (rule 7).
   */
  async confirmReleased(
    hostId: string,
    fencingToken: number,
    actor: string,
    opts: { processesRemain?: boolean } = {},
    tx?: Tx,
  ): Promise<{ reservation: ReservationRow; lease: LeaseRow }> {
    const run = async (tx: Tx, now: number, changed?: Set<string>) => {
      const lease = await this.requireCurrentLease(tx, hostId, fencingToken);
      const r = (await this.getReservation(tx, lease.reservationId))!;
      const host = (await this.getHost(tx, hostId))!;
      if (opts.processesRemain) {
        await this.setHostPhase(tx, now, host, 'release-required', 'processes remain after cleanup', actor);
        changed?.add(`host:${hostId}`);
        return { reservation: r, lease };
      }
      if (lease.status !== 'releasing') {
        // the agent may report termination on its own (runner exited); start the release first
        if (['allocated', 'preparing', 'running'].includes(r.status)) {
          await this.beginRelease(r.id, r.outcome ?? 'released', 'agent reported termination', actor, tx);
          Object.assign(
            lease,
            (await this.leasesOf(tx, r.id)).find((l) => l.id === lease.id),
          );
          Object.assign(r, await this.getReservation(tx, r.id));
          Object.assign(host, await this.getHost(tx, hostId));
        } else {
          await this.setLeaseStatus(tx, now, lease, 'releasing', 'agent reported termination', actor);
        }
      }
      await this.setLeaseStatus(tx, now, lease, 'released', 'agent confirmed termination and cleanup', actor);
      if (host.phase === 'release-required') {
        await this.setHostPhase(tx, now, host, 'cleaning', 'processes gone', actor);
      }
      if (host.phase === 'allocated')
        await this.setHostPhase(tx, now, host, 'cleaning', 'cleanup confirmed', actor);
      await this.setHostPhase(
        tx,
        now,
        host,
        host.homeService ? 'restoring' : 'idle',
        host.homeService ? `cleaned; restoring ${host.homeService}` : 'cleaned',
        actor,
      );
      const remaining = (await this.leasesOf(tx, r.id)).filter((l) => l.status !== 'released');
      if (remaining.length === 0 && r.status === 'releasing') {
        const failed = r.outcome != null && !ENDS_DONE.includes(r.outcome);
        await this.transitionReservation(
          tx,
          now,
          r,
          failed ? 'failed' : 'done',
          failed ? `ended: ${r.outcome}` : 'released; termination confirmed on every host',
          actor,
        );
      }
      changed?.add('reservation').add(`host:${hostId}`);
      return { reservation: r, lease };
    };
    if (tx) return run(tx, this.clock());
    return this.write((tx, now, changed) => run(tx, now, changed));
  }

  /** The home service came back healthy (or failed to): restoring → service / retry / quarantined. */
  async recordRestore(hostId: string, ok: boolean, detail: string, actor: string): Promise<HostRow> {
    return this.write(async (tx, now, changed) => {
      const host = await this.getHost(tx, hostId);
      if (!host) throw notFound(`host ${hostId}`);
      if (host.phase !== 'restoring') {
        throw conflict('not_restoring', `host ${hostId} is ${host.phase}, not restoring`);
      }
      changed.add(`host:${hostId}`).add('reservation');
      if (ok) {
        await tx
          .update(t.hosts)
          .set({ restoreAttempts: 0, restoreNotBefore: null })
          .where(eq(t.hosts.id, hostId));
        await this.setHostPhase(
          tx,
          now,
          host,
          'service',
          `${host.homeService} model-ready health passed`,
          actor,
        );
        return host;
      }
      const attempts = host.restoreAttempts + 1;
      const { restoreRetries, restoreBackoffS } = this.config.timings;
      if (attempts > restoreRetries) {
        await tx
          .update(t.hosts)
          .set({ restoreAttempts: attempts, note: detail })
          .where(eq(t.hosts.id, hostId));
        await this.setHostPhase(
          tx,
          now,
          host,
          'quarantined',
          `restore failed ${attempts} times: ${detail}`.slice(0, 500),
          actor,
        );
        await this.record(tx, now, {
          subjectType: 'host',
          subjectId: hostId,
          type: 'alert.restore_failed',
          cause: `${host.homeService} restore failed after ${attempts} attempts; host quarantined`,
          actor,
          data: { attempts, detail: detail.slice(0, 2000) },
        });
        return host;
      }
      const notBefore = now + restoreBackoffS * 1000 * 2 ** (attempts - 1);
      await tx
        .update(t.hosts)
        .set({ restoreAttempts: attempts, restoreNotBefore: notBefore, note: detail.slice(0, 500) })
        .where(eq(t.hosts.id, hostId));
      await this.record(tx, now, {
        subjectType: 'host',
        subjectId: hostId,
        type: 'host.restore_retry',
        fromState: 'restoring',
        toState: 'restoring',
        cause: `restore attempt ${attempts} failed; retry after backoff`,
        actor,
        data: { attempts, notBefore },
      });
      return host;
    });
  }

  /** Operator clears quarantine; the host restores its service (or goes idle) before any grant. */
  async clearQuarantine(hostId: string, actor: string): Promise<HostRow> {
    return this.write(async (tx, now, changed) => {
      const host = await this.getHost(tx, hostId);
      if (!host) throw notFound(`host ${hostId}`);
      if (host.phase !== 'quarantined') throw conflict('not_quarantined', `host ${hostId} is ${host.phase}`);
      await tx
        .update(t.hosts)
        .set({ restoreAttempts: 0, restoreNotBefore: null, note: null })
        .where(eq(t.hosts.id, hostId));
      await this.setHostPhase(
        tx,
        now,
        host,
        host.homeService ? 'restoring' : 'idle',
        'operator cleared quarantine',
        actor,
      );
      changed.add(`host:${hostId}`).add('reservation');
      return host;
    });
  }

  // ---------------------------------------------------------------- admission

  /** Loads everything the admission engine needs, inside the caller's transaction. */
  async loadAdmissionInput(tx: Tx | undefined) {
    const q = tx ?? this.db;
    const [hostRows, leaseRows, resvRows] = await Promise.all([
      q.select().from(t.hosts),
      q
        .select()
        .from(t.leases)
        .where(inArray(t.leases.status, [...BINDING_LEASE_STATUSES])),
      q
        .select()
        .from(t.reservations)
        .where(inArray(t.reservations.status, ['queued', ...ACTIVE_STATUSES]))
        // admission order, so the engine need not sort (priority desc, then FIFO)
        .orderBy(desc(t.reservations.priority), asc(t.reservations.seq)),
    ]);
    return { hostRows, leaseRows, resvRows };
  }

  /**
   * One admission pass in one write transaction (ADR 0002): read the whole state, plan with the
   * pure engine, write grants with fresh fencing tokens. Another process's pass waits on the
   * write lock and then sees these grants, so two processes can never double-grant; the partial
   * unique index on leases is the last line of defence.
   */
  async admissionPass(actor = 'admission'): Promise<PassResult> {
    const started = performance.now();
    try {
      return await this.runAdmissionPass(actor);
    } finally {
      const ms = performance.now() - started;
      for (const fn of this.passObservers) fn(ms);
    }
  }

  /** Observe how long each admission pass takes (metrics); returns an unsubscribe function. */
  observePasses(fn: (durationMs: number) => void): () => void {
    this.passObservers.add(fn);
    return () => this.passObservers.delete(fn);
  }

  private async runAdmissionPass(actor: string): Promise<PassResult> {
    return this.write(async (tx, now, changed) => {
      const { hostRows, leaseRows, resvRows } = await this.loadAdmissionInput(tx);
      const plan = planAdmission({
        now,
        config: this.config,
        hosts: hostRows.map(toHostRecord),
        leases: leaseRows.map(toLeaseRecord),
        reservations: resvRows.map(toReservationRecord),
      });
      const resvById = new Map(resvRows.map((r) => [r.id, r]));
      const hostById = new Map(hostRows.map((h) => [h.id, h]));
      const leaseById = new Map(leaseRows.map((l) => [l.id, l]));
      const result: PassResult = { plan, granted: [] };

      for (const id of plan.queueTimeouts) {
        const r = resvById.get(id)!;
        await this.transitionReservation(
          tx,
          now,
          r,
          'failed',
          `queue timeout: waited ${Math.round((now - r.createdAt) / 60000)} min (limit ${Math.round(
            this.config.timings.queueTimeoutS / 60,
          )} min); last reason: ${r.reason ?? 'none'}`,
          actor,
          { outcome: 'queue_timeout' },
        );
        changed.add('reservation');
      }

      for (const id of plan.satisfied) {
        const r = resvById.get(id)!;
        // an explicit Deckard start whose host already serves: met without a lease
        await this.transitionReservation(tx, now, r, 'done', `${r.targetHost} already serving`, actor, {
          outcome: 'already_serving',
        });
        changed.add('reservation');
      }

      for (const ex of plan.expiries) {
        const lease = leaseById.get(ex.leaseId)!;
        await this.setLeaseStatus(tx, now, lease, 'expired', 'lease TTL passed without renewal', actor);
        const host = hostById.get(ex.hostId)!;
        if (ex.outcome === 'release-required') {
          if (host.phase === 'allocated') {
            await this.setHostPhase(
              tx,
              now,
              host,
              'release-required',
              'lease expired while processes remain (or are unknown): nothing killed, nothing admitted',
              actor,
            );
          }
        } else {
          const r = resvById.get(ex.reservationId);
          if (r && ['allocated', 'preparing', 'running'].includes(r.status)) {
            await this.beginRelease(
              r.id,
              'expired',
              'lease expired; agent asked to confirm termination',
              actor,
              tx,
            );
          }
        }
        changed.add(`host:${ex.hostId}`).add('reservation');
      }

      // Grants: a few set-based statements for the whole pass (not per grant) so a burst of
      // grants costs about as much as one; every transition is still checked and recorded.
      if (plan.grants.length) {
        const leaseRows: (typeof t.leases.$inferInsert)[] = [];
        const grantedHosts: string[] = [];
        for (const g of plan.grants) {
          const r = resvById.get(g.reservationId)!;
          const ttlS =
            r.ttlS ??
            (r.kind === 'development'
              ? this.config.timings.devLeaseDefaultTtlS
              : this.config.timings.ciLeaseTtlS);
          assertReservationTransition(r.status as ReservationStatus, 'allocated');
          await this.record(tx, now, {
            subjectType: 'reservation',
            subjectId: r.id,
            type: 'reservation.allocated',
            fromState: r.status,
            toState: 'allocated',
            cause: `granted ${g.hostIds.join(' + ')}${g.lend.length ? ` (lending ${g.lend.join(', ')})` : ''}`,
            actor,
            data: { hosts: g.hostIds, lend: g.lend },
          });
          Object.assign(r, {
            status: 'allocated',
            grantedAt: now,
            reason: null,
            position: null,
            updatedAt: now,
          });
          const leases: PassResult['granted'][number]['leases'] = [];
          for (const hostId of g.hostIds) {
            const host = hostById.get(hostId)!;
            assertHostTransition(host.phase as HostPhase, 'allocated');
            const token = host.fencingToken + 1;
            const leaseId = `l-${hostId}-${token}`;
            const lend = g.lend.includes(hostId);
            leaseRows.push({
              id: leaseId,
              reservationId: r.id,
              hostId,
              fencingToken: token,
              status: 'active',
              lend,
              grantedAt: now,
              expiresAt: now + ttlS * 1000,
            });
            await this.record(tx, now, {
              subjectType: 'lease',
              subjectId: leaseId,
              type: 'lease.granted',
              toState: 'active',
              cause: `admission granted ${r.id}`,
              actor,
              data: { reservationId: r.id, hostId, fencingToken: token, lend },
            });
            await this.record(tx, now, {
              subjectType: 'host',
              subjectId: hostId,
              type: 'host.phase',
              fromState: host.phase,
              toState: 'allocated',
              cause: `granted to ${r.id}`,
              actor,
            });
            host.fencingToken = token;
            host.phase = 'allocated';
            grantedHosts.push(hostId);
            leases.push({ leaseId, hostId, fencingToken: token });
            changed.add(`host:${hostId}`);
          }
          result.granted.push({ reservationId: r.id, leases });
        }
        const ids = plan.grants.map((g) => g.reservationId);
        // compare-and-set: only still-queued rows move (the write lock makes this exact)
        await tx
          .update(t.reservations)
          .set({
            status: 'allocated',
            grantedAt: now,
            updatedAt: now,
            reason: null,
            position: null,
            outcome: null,
          })
          .where(and(inArray(t.reservations.id, ids), eq(t.reservations.status, 'queued')));
        // each granted host's token goes up by exactly one: the value the lease rows carry
        await tx
          .update(t.hosts)
          .set({ fencingToken: sql`${t.hosts.fencingToken} + 1`, phase: 'allocated', updatedAt: now })
          .where(inArray(t.hosts.id, grantedHosts));
        for (let i = 0; i < leaseRows.length; i += 50)
          await tx.insert(t.leases).values(leaseRows.slice(i, i + 50));
        changed.add('reservation');
      }

      // Persist why each request waits; history gets a row only when the kind of wait changes.
      // Only the head of the queue is written each pass (a grant shifts every position behind it);
      // the rest is written as it moves up, and read paths compute live positions anyway.
      for (const w of plan.waits.slice(0, PERSISTED_WAITS_PER_PASS)) {
        const r = resvById.get(w.reservationId)!;
        if (r.reason === w.reason && r.position === w.position) continue;
        const prevCode = r.reason ? waitCodeOf(r) : null;
        await tx
          .update(t.reservations)
          .set({ reason: w.reason, position: w.position, outcome: w.code })
          .where(and(eq(t.reservations.id, r.id), eq(t.reservations.status, 'queued')));
        if (prevCode !== w.code) {
          await this.record(tx, now, {
            subjectType: 'reservation',
            subjectId: r.id,
            type: 'reservation.waiting',
            fromState: 'queued',
            toState: 'queued',
            cause: w.reason,
            actor,
            data: { code: w.code, position: w.position },
          });
        }
      }
      return result;
    });
  }

  // ---------------------------------------------------------------- reads

  async history(subjectType: LedgerEvent['subjectType'], subjectId: string, limit = 200) {
    return this.db
      .select()
      .from(t.events)
      .where(and(eq(t.events.subjectType, subjectType), eq(t.events.subjectId, subjectId)))
      .orderBy(asc(t.events.id))
      .limit(limit);
  }

  async recentEvents(limit = 50) {
    return this.db.select().from(t.events).orderBy(desc(t.events.id)).limit(limit);
  }

  /** Cheap reachability probe for /healthz. */
  async ping(): Promise<void> {
    await this.store.client.execute('SELECT 1');
  }
}

/**
 * Outcomes that end a reservation `done` rather than `failed`: a pass, an ordinary release, a
 * runner that exited cleanly before GitHub's job result arrived (the check run takes its
 * conclusion from `workflow_job`), and a development lease that expired with nothing left running.
 */
const ENDS_DONE: readonly string[] = ['passed', 'released', 'done', 'runner exited 0', 'expired'];

/** How many queued reservations get their position/reason written per pass. */
export const PERSISTED_WAITS_PER_PASS = 200;

/** The last wait code is kept in `outcome` while queued (it is overwritten when the work ends). */
function waitCodeOf(r: ReservationRow): string | null {
  return r.status === 'queued' ? r.outcome : null;
}
