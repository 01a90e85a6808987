import { sql } from 'drizzle-orm';
import type { SparkConfig } from '../../core/config.ts';
import type { LedgerEventType, LedgerSubjectType } from '../../core/events.ts';
import { type AdmissionPassStats, newAdmissionPassStats } from './admission-pass-stats.ts';
import { countEvents } from './counters.ts';
import { CHECKPOINT_BUSY_MS, type LedgerDb, LOCAL_BUSY_TIMEOUT_MS, type Tx } from './db.ts';
import type { ReservationRow } from './rows.ts';
import * as t from './schema.ts';
import { isLedgerUnavailable } from './unavailable.ts';

/**
 * Why a ledger write failed when the ledger itself was the trouble, not the command: `storage`
 * (read-only file or mount, full disk, I/O error: unavailable.ts) or `busy` (the lock wait ran
 * out). A command's own refusal (an ApiError thrown inside the transaction) is neither.
 */
export type WriteErrorCause = 'storage' | 'busy';

export function writeErrorCause(e: unknown): WriteErrorCause | null {
  if (isLedgerUnavailable(e)) return 'storage';
  for (let cur: unknown = e, depth = 0; cur && depth < 6; depth++) {
    const err = cur as { code?: unknown; message?: unknown; cause?: unknown };
    if (
      /SQLITE_BUSY|SQLITE_LOCKED|database is locked/i.test(
        `${String(err.code ?? '')} ${String(err.message ?? '')}`,
      )
    )
      return 'busy';
    cur = err.cause;
  }
  return null;
}

const INSERT_EVENTS = `INSERT INTO events (at, subject_type, subject_id, type, from_state, to_state, cause, actor, data_json) SELECT e.value ->> 0, e.value ->> 1, e.value ->> 2, e.value ->> 3, e.value ->> 4, e.value ->> 5, e.value ->> 6, e.value ->> 7, e.value ->> 8 FROM json_each(?) AS e`;

/** One row of the append-only history, as written. */
export interface LedgerEvent {
  subjectType: LedgerSubjectType;
  subjectId: string;
  type: LedgerEventType;
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
export type TransitionHook = (tx: Tx, event: LedgerEvent, ctx: HookContext) => Promise<void>;

/** What a hook is told beside the event. */
export interface HookContext {
  now: number;
  /**
   * The reservation the event is about, as the recording command holds it at that moment, when
   * the command passes it (the admission pass does): a hook need not read it back, which a
   * batched pass could not (docs/adr/0185-admission-pass-in-two-round-trips.md).
   */
  reservation?: ReservationRow;
}

export type Clock = () => number;

/** The change topics of each write transaction in flight, so a command can add one ({@link noteChange}). */
const openChanges = new WeakMap<Tx, Set<string>>();

/**
 * Adds a change topic to the notices `tx` sends after it commits (nothing if it never commits):
 * for a command that only has the transaction, e.g. an outbox row queued by a hook, which wakes
 * the outbox sender with the commit that filled it (docs/adr/0180-woken-not-polled-handover.md).
 */
export function noteChange(tx: Tx, topic: string): void {
  openChanges.get(tx)?.add(topic);
}

export interface LedgerOptions {
  config: SparkConfig;
  clock?: Clock;
  hooks?: TransitionHook[];
  /**
   * Whether each recorded event also queues its GitHub outbox rows (check sync, dispatch, JIT or
   * clone-token work, runner deletes, run cancel): on where the GitHub part is mounted
   * (docs/adr/0220-one-ledger-front-door.md). Also set later by {@link LedgerStore.recordGitHubEffectsFromNowOn}.
   */
  githubEffects?: boolean;
}

/** A buffered history row, with its data as recorded (the counters read it without parsing). */
type EventInsert = typeof t.events.$inferInsert & { data?: Record<string, unknown> | null };
type Listener = (topic: string) => void;
/** What a write transaction hands its body: the transaction, its clock reading, change topics. */
export type WriteBody<T> = (tx: Tx, now: number, changed: Set<string>) => Promise<T>;

/**
 * The ledger's write path: one write transaction per command, an event buffer flushed just
 * before commit, transition hooks run in the same transaction, and in-process change notices
 * sent only after commit. Every command in `functions/ledger/` runs through {@link within}.
 */
export class LedgerStore {
  readonly config: SparkConfig;
  readonly clock: Clock;
  private readonly hooks: TransitionHook[];
  private githubEffects: boolean;
  private readonly listeners = new Set<Listener>();
  private readonly eventBuffers = new WeakMap<Tx, EventInsert[]>();
  private readonly changedSets = new WeakMap<Tx, Set<string>>();
  private readonly writeErrorObservers = new Set<(cause: WriteErrorCause) => void>();
  private changeCount = 0;
  /** How this store's admission passes went (`admission-pass.ts` counts, benches and tests read). */
  readonly passStats: AdmissionPassStats = newAdmissionPassStats();

  constructor(
    readonly store: LedgerDb,
    opts: LedgerOptions,
  ) {
    this.config = opts.config;
    this.clock = opts.clock ?? Date.now;
    this.hooks = [...(opts.hooks ?? [])];
    this.githubEffects = opts.githubEffects ?? false;
    // every write path of the database (transactions, single statements, scripts) reports the
    // ledger's own failures to the observers (metrics: spark_ledger_write_errors_total)
    const observed =
      <A extends unknown[], R>(f: (...args: A) => Promise<R>) =>
      async (...args: A): Promise<R> => {
        try {
          return await f(...args);
        } catch (e) {
          const cause = writeErrorCause(e);
          if (cause) for (const fn of this.writeErrorObservers) fn(cause);
          throw e;
        }
      };
    this.store = {
      ...store,
      write: observed(store.write) as LedgerDb['write'],
      writeBatch: observed(store.writeBatch) as LedgerDb['writeBatch'],
      exec: observed(store.exec),
      execScript: observed(store.execScript),
    };
  }

  /** Observe writes that failed for the ledger's own reasons ({@link writeErrorCause}); returns an unsubscribe function. */
  observeWriteErrors(fn: (cause: WriteErrorCause) => void): () => void {
    this.writeErrorObservers.add(fn);
    return () => this.writeErrorObservers.delete(fn);
  }

  /** The read handle (queries only; writes go through {@link write}). */
  get db() {
    return this.store.db;
  }

  addHook(hook: TransitionHook): void {
    this.hooks.push(hook);
  }

  /**
   * From now on each recorded event also queues the GitHub outbox rows it needs, in its own
   * transaction (the GitHub part mounted: `functions/github/module.ts`). Without it no GitHub
   * effect is queued, as for a controller without the GitHub part.
   */
  recordGitHubEffectsFromNowOn(): void {
    this.githubEffects = true;
  }

  /** Whether {@link record} queues each event's GitHub outbox rows ({@link recordGitHubEffectsFromNowOn}). */
  get recordsGitHubEffects(): boolean {
    return this.githubEffects;
  }

  /**
   * The outbox rows an event needs beyond the hooks: none here. The {@link Ledger} (ledger.ts)
   * writes the GitHub ones (`github-effects.ts`); this file stays below the commands it runs.
   */
  protected async recordEffects(_tx: Tx, _ev: LedgerEvent, _ctx: HookContext): Promise<void> {}

  /** Subscribe to in-process change notices (`reservation`, `host:<id>`, `outbox`). */
  subscribe(fn: Listener): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  notify(...topics: string[]): void {
    if (topics.some((t) => t !== 'outbox')) this.changeCount++;
    for (const topic of topics) for (const fn of this.listeners) fn(topic);
  }

  /**
   * The ledger's version as this process knows it: bumped on every committed change to hosts,
   * leases or reservations notified here (not on outbox bookkeeping). Read models keyed by it
   * are computed once per change instead of once per request; a change made
   * by another process sharing the ledger cannot bump it, so such caches also bound their age.
   */
  get version(): number {
    return this.changeCount;
  }

  /** Runs `fn` in one write transaction; change notices go out only after commit. */
  write<T>(fn: WriteBody<T>): Promise<T> {
    return this.runWrite(this.store.write, () => this.clock(), fn);
  }

  /**
   * {@link write} as one write batch (`LedgerDb.writeBatch`): the body's statements, the events
   * it records and what the hooks add for them reach the ledger as one request, committed as one
   * transaction. For a remote ledger, where each statement of an interactive transaction is a
   * round trip (docs/adr/0185-admission-pass-in-two-round-trips.md). Nothing in the body may wait
   * for an answer (a read throws `DeferredReadError` and nothing is written). `now` is the clock
   * reading the body decided with.
   */
  writeBatched<T>(now: number, fn: WriteBody<T>): Promise<T> {
    return this.runWrite(this.store.writeBatch, () => now, fn);
  }

  private async runWrite<T>(
    open: (body: (tx: Tx) => Promise<T>) => Promise<T>,
    clock: () => number,
    fn: WriteBody<T>,
  ): Promise<T> {
    const changed = new Set<string>();
    const result = await open(async (tx) => {
      changed.clear();
      const buffer: EventInsert[] = [];
      this.eventBuffers.set(tx, buffer);
      this.changedSets.set(tx, changed);
      openChanges.set(tx, changed);
      try {
        const out = await fn(tx, clock(), changed);
        await this.flushEvents(tx, buffer);
        return out;
      } finally {
        this.eventBuffers.delete(tx);
        this.changedSets.delete(tx);
        openChanges.delete(tx);
      }
    });
    if (changed.size) this.notify(...changed);
    return result;
  }

  /**
   * Runs a command inside the caller's transaction when one is given (so several commands commit
   * as one, e.g. a webhook's delivery claim and its effects), else in a transaction of its own.
   */
  within<T>(tx: Tx | undefined, fn: WriteBody<T>): Promise<T> {
    if (!tx) return this.write(fn);
    return fn(tx, this.clock(), this.changedSets.get(tx) ?? new Set());
  }

  /**
   * Appends one event and queues its side effects in the same transaction: the hooks', then the
   * GitHub outbox rows when {@link recordsGitHubEffects}.
   * Inside {@link write} the event rows are buffered and inserted in one statement just before
   * commit (same transaction, same order), which keeps a busy admission pass to a few statements.
   */
  async record(tx: Tx, now: number, ev: LedgerEvent, reservation?: ReservationRow): Promise<void> {
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
      data: ev.data ?? null,
    };
    const buffer = this.eventBuffers.get(tx);
    if (buffer) buffer.push(row);
    else await this.flushEvents(tx, [row]);
    const ctx: HookContext = reservation ? { now, reservation } : { now };
    for (const hook of this.hooks) await hook(tx, ev, ctx);
    if (this.githubEffects) await this.recordEffects(tx, ev, ctx);
  }

  private async flushEvents(tx: Tx, buffer: EventInsert[]): Promise<void> {
    if (buffer.length === 0) return;
    // every row as one JSON argument: one statement text whatever the number of events, so the
    // local client keeps it prepared (a text per row count was prepared anew on most passes)
    await this.store
      .raw(tx)
      .execute(INSERT_EVENTS, [
        JSON.stringify(
          buffer.map((e) => [
            e.at,
            e.subjectType,
            e.subjectId,
            e.type,
            e.fromState ?? null,
            e.toState ?? null,
            e.cause,
            e.actor,
            e.dataJson ?? null,
          ]),
        ),
      ]);
    await countEvents(this.store.raw(tx), buffer);
    buffer.length = 0;
  }

  /** Reads a small key/value mark (sequence counters, cron last-run marks, rate-limit pauses). */
  async getMark(tx: Tx | undefined, key: string): Promise<string | null> {
    // kept statement: the outbox sender reads its pause mark on every wake
    // (docs/adr/0270-inbox-path-kept-statements.md)
    const rs = await this.store.raw(tx).execute('SELECT value FROM meta WHERE key = ?', [key]);
    const v = rs.rows[0]?.value;
    return v == null ? null : String(v);
  }

  /** Sets a key/value mark inside the caller's transaction. */
  async setMark(tx: Tx, key: string, value: string, opts: { onlyIfAbsent?: boolean } = {}): Promise<void> {
    const insert = tx.insert(t.meta).values({ key, value });
    if (opts.onlyIfAbsent) await insert.onConflictDoNothing();
    else await insert.onConflictDoUpdate({ target: t.meta.key, set: { value } });
  }

  /**
   * Write probe: one tiny write transaction on the `meta` table, so `/healthz`
   * and startup notice a ledger that can be read but not written (read-only file or mount, full
   * disk, I/O errors). Throws the storage error.
   */
  async probeWrite(): Promise<void> {
    await this.store.write(async (tx) => {
      await tx
        .insert(t.meta)
        .values({ key: 'health.write-probe', value: String(this.clock()) })
        .onConflictDoUpdate({ target: t.meta.key, set: { value: String(this.clock()) } });
    });
  }

  /**
   * Makes the transaction's connection zero the bytes of anything it deletes or overwrites
   * (`PRAGMA secure_delete`, a per-connection setting), so an erased secret does not linger in
   * the page's free space. Local ledgers only: a remote sqld keeps its own storage.
   */
  async secureErase(tx: Tx): Promise<void> {
    if (this.store.local) await tx.run(sql`PRAGMA secure_delete = ON`);
  }

  /**
   * Copies the WAL into the database and truncates it to zero bytes: a secret
   * erased in the last transaction (a handed-over JIT config) then survives in no older WAL frame.
   * Local ledgers only. Two bounds, both found under load: it runs in this process's writer queue
   * ({@link LedgerDb.execScript}) — SQLite's busy handler waits on the event loop's thread, so run
   * beside this process's own open transaction (a pair's two hand-overs at once) it blocked the
   * whole controller for the busy timeout while that transaction could not commit, heartbeats went
   * unanswered and the pair was failed as `pair_node_lost`; and it waits at most
   * {@link CHECKPOINT_BUSY_MS} for other processes — TRUNCATE holds the writer lock while it waits
   * for readers, and with the 5 s busy timeout one hand-over stalled every process's writes (the
   * load test's webhook inserts answered 503 SQLITE_BUSY). A checkpoint that cannot finish in time
   * is left to the next one (the WAL is truncated at the next successful TRUNCATE).
   */
  async checkpointWal(): Promise<void> {
    if (!this.store.local) return;
    // one connection for the three statements: the pool's busy timeout is restored on it
    await this.store.execScript(
      `PRAGMA busy_timeout = ${CHECKPOINT_BUSY_MS}; PRAGMA wal_checkpoint(TRUNCATE); PRAGMA busy_timeout = ${LOCAL_BUSY_TIMEOUT_MS};`,
    );
  }

  /** Cheap reachability probe for /healthz. */
  async ping(): Promise<void> {
    await this.store.client.execute('SELECT 1');
  }
}
