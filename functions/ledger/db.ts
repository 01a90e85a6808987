import type { Client, InArgs, InStatement, ResultSet, Transaction, TransactionMode } from '@libsql/client';
import { sql } from 'drizzle-orm';
import { drizzle, type LibSQLDatabase } from 'drizzle-orm/libsql';
import { BINDING_LEASE_STATUSES } from '../../core/model.ts';
import { leases } from './schema.ts';

/**
 * The drizzle handle, without drizzle's relational query API (`db.query.*`, unused here): given a
 * schema, drizzle builds a query builder per table for every transaction it opens, which cost an
 * admission pass ~3 % of its time. Queries name their tables (`schema.ts`).
 */
export type Db = LibSQLDatabase;
/** The drizzle handle inside a write transaction. */
export type Tx = Parameters<Parameters<Db['transaction']>[0]>[0];

/** A ledger connection: the drizzle handle plus its libSQL client. */
export interface LedgerDb {
  db: Db;
  client: Client;
  /** True for an embedded `file:` ledger (WAL, shared by local processes). */
  local: boolean;
  /**
   * Runs `fn` in one write transaction (BEGIN IMMEDIATE on a local file, an interactive write
   * transaction on sqld/Turso). Writers in this process are serialized first so they queue here
   * instead of spinning on SQLITE_BUSY; writers in other processes are serialized by the
   * database lock, retried on BUSY with backoff.
   */
  write<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
  /**
   * One raw autocommit statement (its own write transaction) in the same in-process queue as
   * {@link write}: the hot paths (webhook insert) skip drizzle's query building, and a
   * statement never waits in SQLite's busy handler, which would block the event loop while
   * this process's own transaction holds the lock.
   */
  exec(stmt: string, args: InArgs): Promise<ResultSet>;
  /** Several statements on one connection, in the same queue as {@link exec} (no busy retry). */
  execScript(script: string): Promise<void>;
  /**
   * Hand-written SQL with positional arguments inside `tx` (a transaction {@link write} opened),
   * or outside any transaction without one: the hot paths (admission pass, heartbeat) skip
   * drizzle's query building, which cost more than running the statement once it is kept
   * prepared (docs/adr/0065-cached-statements-local-client.md).
   */
  raw(tx: Tx | undefined): RawSql;
  /**
   * Several reads as one snapshot in one request: `batch(…, 'read')`, one transaction on the
   * server. On a remote ledger every statement of an interactive transaction is a round trip; a
   * batch is one (docs/adr/0185-admission-pass-in-two-round-trips.md).
   */
  readBatch(stmts: InStatement[]): Promise<ResultSet[]>;
  /**
   * Runs `fn` against a write transaction that sends nothing until `fn` returns: its writes are
   * collected and sent as one `batch(…, 'write')` (one transaction, one request; a statement that
   * fails rolls back every one), in the same in-process queue as {@link write}. A statement whose
   * answer `fn` needs (a read, `RETURNING`, a row count) cannot wait for the batch: it throws
   * {@link DeferredReadError} and nothing is sent. For remote ledgers
   * (docs/adr/0185-admission-pass-in-two-round-trips.md).
   */
  writeBatch<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
  close(): void;
}

/**
 * A statement inside {@link LedgerDb.writeBatch} needed its answer before the batch was sent (a
 * read, `RETURNING`, a row count). The caller runs the same work as an interactive transaction.
 */
export class DeferredReadError extends Error {
  constructor(what: string) {
    super(`a batched write cannot answer ${what} before the batch is sent`);
    this.name = 'DeferredReadError';
  }
}

/** Whether a statement only writes and its caller needs no answer: INSERT/UPDATE/DELETE/REPLACE without RETURNING. */
function isDeferrableWrite(sqlText: string): boolean {
  const head = /^\s*([A-Za-z]+)/.exec(sqlText)?.[1]?.toLowerCase();
  if (head !== 'insert' && head !== 'update' && head !== 'delete' && head !== 'replace') return false;
  return !/\breturning\b/i.test(sqlText);
}

/** The answer of a statement that has not run yet: no rows, and no count to read. */
function deferredResult(): ResultSet {
  const unknown = (what: string) => () => {
    throw new DeferredReadError(what);
  };
  const rs = { columns: [], columnTypes: [], rows: [], toJSON: () => ({}) };
  Object.defineProperty(rs, 'rowsAffected', { get: unknown('a row count') });
  Object.defineProperty(rs, 'lastInsertRowid', { get: unknown('a row id') });
  return rs as unknown as ResultSet;
}

/**
 * The `Transaction` drizzle is handed inside {@link LedgerDb.writeBatch}: `execute` collects a
 * write and answers {@link deferredResult}; `commit` sends everything as one write batch.
 */
class CollectingTransaction implements Transaction {
  readonly statements: { sql: string; args: InArgs }[] = [];
  closed = false;

  constructor(private readonly client: Client) {}

  async execute(stmt: InStatement): Promise<ResultSet> {
    const { sql: text, args } = typeof stmt === 'string' ? { sql: stmt, args: [] } : stmt;
    if (!isDeferrableWrite(text)) throw new DeferredReadError(`"${text.slice(0, 60)}"`);
    this.statements.push({ sql: text, args: args ?? [] });
    return deferredResult();
  }
  async batch(stmts: InStatement[]): Promise<ResultSet[]> {
    const out: ResultSet[] = [];
    for (const st of stmts) out.push(await this.execute(st));
    return out;
  }
  async executeMultiple(): Promise<void> {
    throw new DeferredReadError('a script');
  }
  async commit(): Promise<void> {
    this.closed = true;
    if (this.statements.length) await this.client.batch(this.statements, 'write');
  }
  async rollback(): Promise<void> {
    this.closed = true;
    this.statements.length = 0;
  }
  close(): void {
    this.closed = true;
  }
}

/** Raw SQL on one connection: a transaction's, or the client's (autocommit reads). */
export interface RawSql {
  execute(sql: string, args?: InArgs): Promise<ResultSet>;
}

export interface OpenOptions {
  url: string;
  authToken?: string | undefined;
  /** Injected so the Worker can pass `@libsql/client/web`'s createClient. */
  createClient: (cfg: { url: string; authToken?: string; timeout?: number; concurrency?: number }) => Client;
}

function isBusy(e: unknown): boolean {
  const err = e as { code?: string; message?: string; cause?: { code?: string } } | null;
  const text = `${err?.code ?? ''} ${err?.cause?.code ?? ''} ${err?.message ?? ''}`;
  return /SQLITE_BUSY|database is locked/i.test(text);
}

/** SQLite's busy timeout on a local ledger's connections: writers in other processes wait this long. */
export const LOCAL_BUSY_TIMEOUT_MS = 5000;

/**
 * The busy timeout a WAL TRUNCATE checkpoint runs under (`LedgerStore.checkpointWal`): it holds
 * the writer lock while it waits, so it gives up quickly instead of stalling every writer.
 */
export const CHECKPOINT_BUSY_MS = 100;

/** Connections the libSQL client keeps for a local file (its `concurrency`). */
export const POOL_SIZE = 4;

/**
 * Per-connection settings for a local ledger. `synchronous = NORMAL` is safe in WAL mode (a
 * power loss can lose the last commits, never corrupt the file) and spares an fsync per commit;
 * `temp_store` keeps sort scratch in memory; `cache_size` (-KiB) holds the whole hot ledger.
 */
export const CONNECTION_PRAGMAS = [
  'PRAGMA synchronous = NORMAL',
  'PRAGMA temp_store = MEMORY',
  'PRAGMA cache_size = -16000',
] as const;

/**
 * Applies {@link CONNECTION_PRAGMAS} to every pooled connection (set on one connection,
 * 56 % of commits still fsynced as FULL). The client opens connections lazily and has no
 * per-connection hook, and `synchronous` cannot change inside a transaction, so this opens
 * {@link POOL_SIZE} deferred transactions at once (one connection each, no lock taken), then
 * hands them back one at a time: the pool lends the connection just returned to the next
 * `execute`, which sets the pragmas on it. `test/integration/ledger-pragmas.test.ts` reads the
 * setting back through {@link POOL_SIZE} concurrent transactions, so a client that pools
 * differently fails there instead of silently running FULL.
 */
async function applyConnectionPragmas(client: Client): Promise<void> {
  const held = await Promise.all(Array.from({ length: POOL_SIZE }, () => client.transaction('deferred')));
  for (const tx of held) {
    tx.close();
    for (const p of CONNECTION_PRAGMAS) await client.execute(p);
  }
}

/**
 * `leases.status in ('active', 'expired', 'releasing')` as literal SQL: bound parameters would
 * keep SQLite from matching the partial index `leases_one_binding_per_host` (same literal list),
 * and the query would scan every lease ever granted (138 µs at 850 leases → 1 ms at
 * 5,100). Built from {@link BINDING_LEASE_STATUSES} so the vocabulary has one home.
 */
export const bindingLeases = sql`${leases.status} in (${sql.raw(
  BINDING_LEASE_STATUSES.map((st) => {
    if (!/^[a-z_]+$/.test(st)) throw new TypeError(`lease status ${st} cannot be inlined into SQL`);
    return `'${st}'`;
  }).join(', '),
)})`;

/**
 * The libSQL transaction beside each drizzle write transaction of every ledger
 * ({@link LedgerDb.write}, {@link LedgerDb.writeBatch}), for {@link txSql}. Keyed by the drizzle
 * handle, which belongs to one ledger and one transaction.
 */
const anyRawOf = new WeakMap<Tx, Pick<Transaction, 'execute'>>();

const rawSqlOf = (ltx: Pick<Transaction, 'execute'>): RawSql => ({
  execute: (sql, args) => ltx.execute({ sql, args: args ?? [] }),
});

/**
 * Hand-written SQL inside `tx`, for a command that holds only the transaction: the same as
 * `raw(tx)` of the ledger that opened it (docs/adr/0270-inbox-path-kept-statements.md).
 */
export function txSql(tx: Tx): RawSql {
  const ltx = anyRawOf.get(tx);
  if (!ltx) throw new TypeError('txSql(tx): tx is not a write transaction of a ledger');
  return rawSqlOf(ltx);
}

/** Opens a ledger client; a `file:` URL gets WAL and a busy timeout for multi-process use. */
export async function openLedgerDb(opts: OpenOptions): Promise<LedgerDb> {
  const local = opts.url.startsWith('file:');
  const client = opts.createClient({
    url: opts.url,
    ...(opts.authToken ? { authToken: opts.authToken } : {}),
    // libsql's busy timeout (ms) for local files: writers in other processes wait for the lock
    ...(local ? { timeout: LOCAL_BUSY_TIMEOUT_MS, concurrency: POOL_SIZE } : {}),
  });
  if (local) {
    // journal_mode is stored in the file; the rest are per connection (below)
    await client.execute('PRAGMA journal_mode = WAL');
    await applyConnectionPragmas(client);
  }
  // drizzle opens each write transaction through this client; the libSQL transaction it gets is
  // kept beside drizzle's handle so raw SQL can run in the same transaction. Writers in this
  // process run one at a time (the queue below), so exactly one transaction is being opened when
  // drizzle calls back.
  let opening: Transaction | null = null;
  const rawOf = new WeakMap<Tx, Pick<Transaction, 'execute'>>();
  const forDrizzle = new Proxy(client, {
    get(target, prop, receiver) {
      if (prop === 'transaction') {
        return async (mode?: TransactionMode) => {
          const ltx = await target.transaction(mode);
          opening = ltx;
          return ltx;
        };
      }
      const v = Reflect.get(target, prop, receiver) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
  const db = drizzle(forDrizzle);

  // One writer at a time in this process. Two queues: single statements (the webhook insert)
  // go before waiting transactions (processing, admission passes), so acknowledging never queues
  // behind background work; transactions run in arrival order.
  const statements: Array<() => Promise<void>> = [];
  const transactions: Array<() => Promise<void>> = [];
  let busy = false;
  const pump = () => {
    if (busy) return;
    const job = statements.shift() ?? transactions.shift();
    if (!job) return;
    busy = true;
    void job().finally(() => {
      busy = false;
      pump();
    });
  };
  const enqueue = <T>(queue: Array<() => Promise<void>>, run: () => Promise<T>): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      queue.push(() => run().then(resolve, reject));
      pump();
    });
  const retryBusy = async <T>(fn: () => Promise<T>): Promise<T> => {
    for (let attempt = 0; ; attempt++) {
      try {
        return await fn();
      } catch (e) {
        if (!isBusy(e) || attempt >= 50) throw e;
        await new Promise((r) =>
          setTimeout(r, Math.min(200, 5 * 2 ** Math.min(attempt, 5)) * Math.random() + 1),
        );
      }
    }
  };
  const write = <T>(fn: (tx: Tx) => Promise<T>): Promise<T> =>
    enqueue(transactions, () =>
      retryBusy(() =>
        db.transaction((tx) => {
          const ltx = opening;
          opening = null;
          if (!ltx) throw new TypeError('drizzle opened a transaction without the ledger client');
          rawOf.set(tx, ltx);
          anyRawOf.set(tx, ltx);
          return fn(tx);
        }),
      ),
    );
  const raw = (tx: Tx | undefined): RawSql => {
    if (!tx) return { execute: (sql, args) => client.execute({ sql, args: args ?? [] }) };
    const ltx = rawOf.get(tx);
    if (!ltx) throw new TypeError('raw(tx): tx is not a write transaction of this ledger');
    return rawSqlOf(ltx);
  };
  // writeBatch: a second drizzle handle whose transactions collect their writes (drizzle opens
  // each through `transaction()` and ends it with `commit()` or `rollback()`)
  let collecting: CollectingTransaction | null = null;
  const collector = new Proxy(client, {
    get(target, prop, receiver) {
      if (prop === 'transaction') {
        return async () => {
          collecting = new CollectingTransaction(target);
          return collecting;
        };
      }
      const v = Reflect.get(target, prop, receiver) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
  const batchDb = drizzle(collector);
  const writeBatch = <T>(fn: (tx: Tx) => Promise<T>): Promise<T> =>
    enqueue(transactions, () =>
      batchDb.transaction((tx) => {
        const ctx = collecting;
        collecting = null;
        if (!ctx) throw new TypeError('drizzle opened a transaction without the ledger client');
        rawOf.set(tx, ctx);
        anyRawOf.set(tx, ctx);
        return fn(tx);
      }),
    );
  const readBatch = (stmts: InStatement[]): Promise<ResultSet[]> => client.batch(stmts, 'read');

  const exec = (stmt: string, args: InArgs): Promise<ResultSet> =>
    enqueue(statements, () => retryBusy(() => client.execute({ sql: stmt, args })));

  const execScript = (script: string): Promise<void> =>
    enqueue(statements, () => client.executeMultiple(script));

  return {
    db,
    client,
    local,
    write,
    exec,
    execScript,
    raw,
    readBatch,
    writeBatch,
    close: () => client.close(),
  };
}
