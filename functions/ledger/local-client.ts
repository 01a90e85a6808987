import type {
  Client,
  InArgs,
  InStatement,
  InValue,
  Replicated,
  ResultSet,
  Row,
  Transaction,
  TransactionMode,
  Value,
} from '@libsql/client';
import { LibsqlBatchError, LibsqlError } from '@libsql/client';
import Database from 'libsql';

/**
 * A `@libsql/client` `Client` for an embedded `file:` ledger that keeps its prepared statements
 * (issue 13 item 2, docs/adr/0065-cached-statements-local-client.md). `@libsql/client` 0.18
 * prepares every statement anew (`executeStmt`: `db.prepare(sql)`, `columns()` twice, one
 * `Object.defineProperty` per value): 53 µs for a point select that a kept statement answers in
 * 8 µs, measured here. This client is the same pool of native `libsql` connections with, per
 * connection, the statements it prepared (keyed by SQL text, least recently used dropped first),
 * their column names, and one row prototype per statement. drizzle builds the same text for the
 * same query shape, so every ledger query benefits, not only the hand-written hot paths.
 *
 * Behaviour kept from `@libsql/client/sqlite3` (the tests run against this client): rows have
 * enumerable named columns and non-enumerable indices and `length`; integers come back as
 * numbers (`intMode: 'number'`, a RangeError beyond 2^53); blobs as `ArrayBuffer`; errors as
 * `LibsqlError` with SQLite's base code (`SQLITE_BUSY`, …); a transaction owns its connection
 * until it settles; a connection handed back mid-transaction is rolled back. Node only (native
 * module): the Worker keeps `@libsql/client/web`.
 */

/** Kept statements per connection: the ledger's distinct query texts fit with room to spare. */
export const STATEMENT_CACHE_SIZE = 500;

export interface LocalClientOptions {
  /** `file:` URL of the ledger. */
  url: string;
  /** SQLite busy timeout (ms). */
  timeout?: number;
  /** Connections in the pool. */
  concurrency?: number;
  /** Run on every new connection before first use (per-connection pragmas). */
  onConnect?: (run: (sql: string) => void) => void;
}

interface Kept {
  stmt: Database.Statement;
  reader: boolean;
  columns: string[];
  columnTypes: string[];
  /** Prototype of this statement's rows: indices as getters over the named columns. */
  proto: object | null;
}

class Connection {
  readonly db: Database.Database;
  private readonly kept = new Map<string, Kept>();

  constructor(path: string, timeout: number | undefined) {
    this.db = new Database(path, timeout === undefined ? {} : { timeout });
  }

  get open(): boolean {
    return this.db.open;
  }

  get inTransaction(): boolean {
    return this.db.inTransaction;
  }

  statement(sql: string): Kept {
    const hit = this.kept.get(sql);
    if (hit) {
      // refresh its place: the Map's order is the eviction order
      this.kept.delete(sql);
      this.kept.set(sql, hit);
      return hit;
    }
    const stmt = this.db.prepare(sql);
    const reader = stmt.reader;
    stmt.safeIntegers(true);
    let columns: string[] = [];
    let columnTypes: string[] = [];
    if (reader) {
      stmt.raw(true);
      const cols = stmt.columns();
      columns = cols.map((c) => c.name);
      columnTypes = cols.map((c) => c.type ?? '');
    }
    const k: Kept = { stmt, reader, columns, columnTypes, proto: reader ? rowPrototype(columns) : null };
    // DDL changes what `SELECT *` returns, and a pragma may differ per connection: not kept
    if (!/^\s*(create|drop|alter|pragma|vacuum|attach|detach)\b/i.test(sql)) {
      this.kept.set(sql, k);
      if (this.kept.size > STATEMENT_CACHE_SIZE) {
        const oldest = this.kept.keys().next().value;
        if (oldest !== undefined) this.kept.delete(oldest);
      }
    }
    return k;
  }

  /** Forget kept statements (a schema change may have altered their columns). */
  forget(): void {
    this.kept.clear();
  }

  exec(sql: string): void {
    this.db.exec(sql);
  }

  close(): void {
    this.kept.clear();
    try {
      if (this.db.open) this.db.close();
    } catch {
      // nothing useful to do while tearing down
    }
  }
}

/**
 * Rows share one prototype per statement: `length` and the indices are non-enumerable getters
 * over the own, enumerable named columns, as in `@libsql/client` (drizzle reads rows both by
 * `Array.prototype.slice.call(row)` and by `Object.keys`). A result with duplicate column names
 * gets no prototype: each row then carries its indices itself.
 */
function rowPrototype(columns: string[]): object | null {
  if (new Set(columns).size !== columns.length) return null;
  const proto: PropertyDescriptorMap = { length: { value: columns.length } };
  columns.forEach((name, i) => {
    proto[i] = {
      get(this: Record<string, Value>) {
        return this[name];
      },
    };
  });
  return Object.create(Object.prototype, proto) as object;
}

const MIN_SAFE = BigInt(Number.MIN_SAFE_INTEGER);
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

function valueFromSql(v: unknown): Value {
  if (typeof v === 'bigint') {
    if (v < MIN_SAFE || v > MAX_SAFE) {
      throw new RangeError('Received integer which cannot be safely represented as a JavaScript number');
    }
    return Number(v);
  }
  if (v instanceof Buffer) return v.buffer.slice(v.byteOffset, v.byteOffset + v.byteLength) as ArrayBuffer;
  return v as Value;
}

const MIN_INT = -9223372036854775808n;
const MAX_INT = 9223372036854775807n;

function valueToSql(v: InValue): unknown {
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) {
      throw new RangeError('Only finite numbers (not Infinity or NaN) can be passed as arguments');
    }
    return v;
  }
  if (typeof v === 'bigint') {
    if (v < MIN_INT || v > MAX_INT) {
      throw new RangeError(
        'bigint is too large to be represented as a 64-bit integer and passed as argument',
      );
    }
    return v;
  }
  if (typeof v === 'boolean') return v ? 1 : 0;
  if (v instanceof ArrayBuffer) return Buffer.from(v);
  if (v instanceof Date) return v.valueOf();
  if (v === undefined) throw new TypeError('undefined cannot be passed as argument to the database');
  return v;
}

function argsToSql(args: InArgs | undefined): unknown {
  if (!args) return [];
  if (Array.isArray(args)) return args.map(valueToSql);
  const out: Record<string, unknown> = {};
  for (const name in args) {
    const key = name[0] === '@' || name[0] === '$' || name[0] === ':' ? name.slice(1) : name;
    out[key] = valueToSql(args[name] as InValue);
  }
  return out;
}

class LocalResultSet implements ResultSet {
  constructor(
    readonly columns: string[],
    readonly columnTypes: string[],
    readonly rows: Row[],
    readonly rowsAffected: number,
    readonly lastInsertRowid: bigint | undefined,
  ) {}

  toJSON() {
    return {
      columns: this.columns,
      columnTypes: this.columnTypes,
      rows: this.rows.map((r) => Array.prototype.slice.call(r)),
      rowsAffected: this.rowsAffected,
      lastInsertRowid: this.lastInsertRowid?.toString() ?? null,
    };
  }
}

/** SQLite's primary result codes by number (https://www.sqlite.org/rescode.html). */
const SQLITE_CODES: Record<number, string> = {
  1: 'SQLITE_ERROR',
  2: 'SQLITE_INTERNAL',
  3: 'SQLITE_PERM',
  4: 'SQLITE_ABORT',
  5: 'SQLITE_BUSY',
  6: 'SQLITE_LOCKED',
  7: 'SQLITE_NOMEM',
  8: 'SQLITE_READONLY',
  9: 'SQLITE_INTERRUPT',
  10: 'SQLITE_IOERR',
  11: 'SQLITE_CORRUPT',
  12: 'SQLITE_NOTFOUND',
  13: 'SQLITE_FULL',
  14: 'SQLITE_CANTOPEN',
  15: 'SQLITE_PROTOCOL',
  16: 'SQLITE_EMPTY',
  17: 'SQLITE_SCHEMA',
  18: 'SQLITE_TOOBIG',
  19: 'SQLITE_CONSTRAINT',
  20: 'SQLITE_MISMATCH',
  21: 'SQLITE_MISUSE',
  22: 'SQLITE_NOLFS',
  23: 'SQLITE_AUTH',
  24: 'SQLITE_FORMAT',
  25: 'SQLITE_RANGE',
  26: 'SQLITE_NOTADB',
  27: 'SQLITE_NOTICE',
  28: 'SQLITE_WARNING',
};

/** The primary result code's name of a raw (possibly extended) SQLite code, or null when unknown. */
export function sqliteCodeName(rawCode: number): string | null {
  return SQLITE_CODES[rawCode & 0xff] ?? null;
}

function mapError(e: unknown): unknown {
  if (e instanceof Database.SqliteError) {
    const raw = (e as { rawCode?: number }).rawCode;
    const code =
      raw === undefined ? 'SQLITE_UNKNOWN' : (sqliteCodeName(raw) ?? `SQLITE_UNKNOWN_${raw & 0xff}`);
    return new LibsqlError(e.message, code, e.code, raw, e);
  }
  return e;
}

function normalize(stmt: InStatement | [string, InArgs?]): { sql: string; args: InArgs | undefined } {
  if (typeof stmt === 'string') return { sql: stmt, args: undefined };
  if (Array.isArray(stmt)) return { sql: stmt[0], args: stmt[1] };
  return { sql: stmt.sql, args: stmt.args };
}

function executeOn(conn: Connection, stmt: InStatement | [string, InArgs?]): ResultSet {
  const { sql, args } = normalize(stmt);
  try {
    const k = conn.statement(sql);
    const bound = argsToSql(args);
    if (!k.reader) {
      const info = k.stmt.run(bound);
      return new LocalResultSet([], [], [], info.changes, BigInt(info.lastInsertRowid));
    }
    const raw = k.stmt.all(bound) as unknown[][];
    const rows: Row[] = new Array(raw.length);
    const { columns, proto } = k;
    for (let r = 0; r < raw.length; r++) {
      const values = raw[r]!;
      if (proto) {
        const row = Object.create(proto) as Record<string, Value>;
        for (let i = 0; i < values.length; i++) row[columns[i]!] = valueFromSql(values[i]);
        rows[r] = row as unknown as Row;
      } else {
        rows[r] = slowRow(values, columns);
      }
    }
    return new LocalResultSet(columns, k.columnTypes, rows, 0, undefined);
  } catch (e) {
    throw mapError(e);
  }
}

/** A row of a result with duplicate column names: indices are its own, the first name wins. */
function slowRow(values: unknown[], columns: string[]): Row {
  const row = {};
  Object.defineProperty(row, 'length', { value: values.length });
  for (let i = 0; i < values.length; i++) {
    const value = valueFromSql(values[i]);
    Object.defineProperty(row, i, { value });
    const name = columns[i]!;
    if (!Object.hasOwn(row, name)) {
      Object.defineProperty(row, name, { value, enumerable: true, configurable: true, writable: true });
    }
  }
  return row as Row;
}

function beginSql(mode: TransactionMode): string {
  if (mode === 'write') return 'BEGIN IMMEDIATE';
  if (mode === 'read') return 'BEGIN TRANSACTION READONLY';
  if (mode === 'deferred') return 'BEGIN DEFERRED';
  throw new RangeError(`Unknown transaction mode ${JSON.stringify(mode)}`);
}

function runStatements(
  conn: Connection,
  stmts: Array<InStatement | [string, InArgs?]>,
  checkOpen: boolean,
): ResultSet[] {
  const out: ResultSet[] = [];
  for (let i = 0; i < stmts.length; i++) {
    try {
      if (checkOpen && !conn.inTransaction) {
        throw new LibsqlBatchError('The transaction has been rolled back', i, 'TRANSACTION_CLOSED');
      }
      out.push(executeOn(conn, stmts[i]!));
    } catch (e) {
      if (e instanceof LibsqlBatchError) throw e;
      if (e instanceof LibsqlError) {
        throw new LibsqlBatchError(
          e.message,
          i,
          e.code,
          e.extendedCode,
          e.rawCode,
          e.cause instanceof Error ? e.cause : undefined,
        );
      }
      throw e;
    }
  }
  return out;
}

/** The connection pool: same borrowing rules as `@libsql/client/sqlite3`'s. */
class Pool {
  private idle: Connection[] = [];
  private readonly borrowed = new Set<Connection>();
  private readonly heldByTransaction = new Set<Connection>();
  private waiters: { resolve: (c: Connection) => void; reject: (e: unknown) => void; tx: boolean }[] = [];
  private closed = false;

  constructor(
    private readonly path: string,
    private readonly opts: LocalClientOptions,
    private readonly max: number,
  ) {}

  acquire(forTransaction = false): Promise<Connection> {
    if (!this.closed && this.idle.length === 0 && this.borrowed.size >= this.max) {
      if (this.heldByTransaction.size >= this.max) {
        return Promise.reject(
          new LibsqlError(
            `All ${this.max} of this client's connections are held by open transactions. Commit or roll back one before using the client again, or raise \`concurrency\`.`,
            'TRANSACTION_ACTIVE',
          ),
        );
      }
      return new Promise((resolve, reject) => this.waiters.push({ resolve, reject, tx: forTransaction }));
    }
    try {
      return Promise.resolve(this.acquireSync(forTransaction));
    } catch (e) {
      return Promise.reject(e);
    }
  }

  acquireSync(forTransaction = false): Connection {
    if (this.closed) throw new LibsqlError('The client is closed', 'CLIENT_CLOSED');
    let conn = this.idle.pop();
    if (!conn) {
      conn = new Connection(this.path, this.opts.timeout);
      const c = conn;
      try {
        this.opts.onConnect?.((sql) => c.exec(sql));
      } catch (e) {
        c.close();
        throw mapError(e);
      }
    }
    this.borrowed.add(conn);
    if (forTransaction) this.heldByTransaction.add(conn);
    return conn;
  }

  release(conn: Connection): void {
    this.borrowed.delete(conn);
    this.heldByTransaction.delete(conn);
    if (conn.open && conn.inTransaction) {
      try {
        conn.exec('ROLLBACK');
      } catch {
        conn.close();
        return;
      }
    }
    if (this.closed || !conn.open) {
      conn.close();
      return;
    }
    const waiter = this.waiters.shift();
    if (waiter) {
      this.borrowed.add(conn);
      if (waiter.tx) this.heldByTransaction.add(conn);
      waiter.resolve(conn);
    } else {
      this.idle.push(conn);
    }
  }

  /** Every connection forgets its kept statements (after a schema change through this client). */
  forgetStatements(): void {
    for (const c of this.idle) c.forget();
    for (const c of this.borrowed) c.forget();
  }

  close(): void {
    this.closed = true;
    for (const c of this.idle) c.close();
    this.idle = [];
    for (const c of this.borrowed) c.close();
    this.borrowed.clear();
    this.heldByTransaction.clear();
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w.reject(new LibsqlError('The client is closed', 'CLIENT_CLOSED'));
  }

  reopen(): void {
    this.close();
    this.closed = false;
  }
}

class LocalTransaction implements Transaction {
  private conn: Connection | null;

  constructor(
    conn: Connection,
    private readonly release: (c: Connection) => void,
  ) {
    this.conn = conn;
  }

  private settle(): void {
    const c = this.conn;
    if (!c) return;
    this.conn = null;
    this.release(c);
  }

  private connection(): Connection {
    if (this.closed) throw new LibsqlError('The transaction is closed', 'TRANSACTION_CLOSED');
    return this.conn!;
  }

  async execute(stmt: InStatement): Promise<ResultSet> {
    return executeOn(this.connection(), stmt);
  }

  async batch(stmts: InStatement[]): Promise<ResultSet[]> {
    return runStatements(this.connection(), stmts, false);
  }

  async executeMultiple(sql: string): Promise<void> {
    try {
      this.connection().exec(sql);
    } catch (e) {
      throw mapError(e);
    }
  }

  async rollback(): Promise<void> {
    const c = this.conn;
    if (!c?.open) {
      this.settle();
      return;
    }
    try {
      if (c.inTransaction) c.exec('ROLLBACK');
    } catch (e) {
      throw mapError(e);
    } finally {
      this.settle();
    }
  }

  async commit(): Promise<void> {
    try {
      executeOn(this.connection(), 'COMMIT');
    } finally {
      this.settle();
    }
  }

  close(): void {
    const c = this.conn;
    if (!c) return;
    try {
      if (c.open && c.inTransaction) c.exec('ROLLBACK');
    } finally {
      this.settle();
    }
  }

  get closed(): boolean {
    const c = this.conn;
    return !c?.open || !c.inTransaction;
  }
}

/** `file:PATH`, `file:///PATH` or `file://localhost/PATH` → PATH. */
export function pathOfFileUrl(url: string): string {
  if (!url.startsWith('file:')) throw new TypeError(`expected a file: URL, got ${JSON.stringify(url)}`);
  let rest = url.slice('file:'.length);
  const q = rest.indexOf('?');
  if (q >= 0) throw new TypeError(`file: URL ${JSON.stringify(url)}: query parameters are not supported`);
  if (rest.startsWith('//')) {
    const slash = rest.indexOf('/', 2);
    const host = rest.slice(2, slash < 0 ? undefined : slash);
    if (host !== '' && host.toLowerCase() !== 'localhost') {
      throw new TypeError(
        `Invalid host in file URL ${JSON.stringify(url)}: an absolute path starts with one slash (file:/abs/path.db) or three (file:///abs/path.db)`,
      );
    }
    rest = slash < 0 ? '' : rest.slice(slash);
  }
  if (!rest) throw new TypeError(`file: URL ${JSON.stringify(url)} names no file`);
  return decodeURIComponent(rest);
}

/** Opens a {@link Client} on a local ledger file with kept prepared statements. */
export function createLocalClient(opts: LocalClientOptions): Client {
  const path = pathOfFileUrl(opts.url);
  const memory = path === ':memory:';
  const pool = new Pool(path, opts, memory ? 1 : Math.max(1, opts.concurrency ?? 1));
  // fail fast if the file cannot be opened at all
  const probe = pool.acquireSync();
  try {
    executeOn(probe, 'SELECT 1');
  } catch (e) {
    pool.close();
    throw e;
  } finally {
    pool.release(probe);
  }
  let closed = false;
  const checkOpen = () => {
    if (closed) throw new LibsqlError('The client is closed', 'CLIENT_CLOSED');
  };
  const withConn = async <T>(fn: (c: Connection) => T): Promise<T> => {
    checkOpen();
    const conn = await pool.acquire();
    try {
      if (!conn.open)
        throw new LibsqlError(
          'The connection was closed while this operation was in flight',
          'CLIENT_CLOSED',
        );
      return fn(conn);
    } finally {
      pool.release(conn);
    }
  };
  const client: Client = {
    protocol: 'file',
    get closed() {
      return closed;
    },
    set closed(v: boolean) {
      closed = v;
    },
    execute(stmtOrSql: InStatement | string, args?: InArgs): Promise<ResultSet> {
      const stmt: InStatement =
        typeof stmtOrSql === 'string' ? { sql: stmtOrSql, args: args ?? [] } : stmtOrSql;
      return withConn((c) => executeOn(c, stmt));
    },
    batch(stmts: Array<InStatement | [string, InArgs?]>, mode: TransactionMode = 'deferred') {
      return withConn((c) => {
        executeOn(c, beginSql(mode));
        const out = runStatements(c, stmts, true);
        executeOn(c, 'COMMIT');
        if (stmts.some((s) => isDdl(normalize(s).sql))) pool.forgetStatements();
        return out;
      });
    },
    migrate(stmts: InStatement[]) {
      return withConn((c) => {
        try {
          c.exec('PRAGMA foreign_keys=off');
          c.exec('BEGIN DEFERRED');
          const out = runStatements(c, stmts, true);
          c.exec('COMMIT');
          return out;
        } catch (e) {
          throw mapError(e);
        } finally {
          if (c.inTransaction) c.exec('ROLLBACK');
          c.exec('PRAGMA foreign_keys=on');
          pool.forgetStatements();
        }
      });
    },
    async transaction(mode: TransactionMode = 'write'): Promise<Transaction> {
      checkOpen();
      const conn = await pool.acquire(true);
      try {
        if (!conn.open)
          throw new LibsqlError(
            'The connection was closed while this operation was in flight',
            'CLIENT_CLOSED',
          );
        executeOn(conn, beginSql(mode));
      } catch (e) {
        pool.release(conn);
        throw e;
      }
      return new LocalTransaction(conn, (c) => pool.release(c));
    },
    executeMultiple(sql: string) {
      return withConn((c) => {
        try {
          c.exec(sql);
        } catch (e) {
          throw mapError(e);
        } finally {
          if (isDdl(sql)) pool.forgetStatements();
        }
      });
    },
    async sync(): Promise<Replicated> {
      throw new LibsqlError(
        'sync() needs an embedded replica; this client opens a plain local file',
        'SYNC_NOT_SUPPORTED',
      );
    },
    reconnect() {
      pool.reopen();
      closed = false;
    },
    close() {
      closed = true;
      pool.close();
    },
  };
  return client;
}

function isDdl(sql: string): boolean {
  return /\b(create|drop|alter)\s/i.test(sql);
}
