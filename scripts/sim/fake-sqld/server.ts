import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import Database from 'libsql';
import { sqliteCodeName } from '../../../functions/ledger/local-client.ts';
import { type ScannedStmt, scanSql } from './sql.ts';

/**
 * A local stand-in for sqld / Turso speaking Hrana over HTTP (JSON encoding, versions 2 and 3)
 * exactly as `@libsql/client`'s http transport does: `POST v2/pipeline` / `v3/pipeline` with a
 * baton, `POST v3/cursor`, and the `GET v2` / `GET v3` version probes (`v3-protobuf` answers 404,
 * so a probing client settles on JSON).
 *
 * It is backed by a real libSQL database file (the `libsql` package). Every Hrana stream owns its
 * own connection, so an interactive transaction (`BEGIN IMMEDIATE` … `COMMIT` across several
 * pipeline requests that pass the baton along) is a real SQLite transaction. Behaviour copied from
 * sqld (libsql-server/src/hrana and connection_manager.rs):
 *
 * - batons are HMAC-signed `(stream id, sequence)` pairs; a baton works once, a reused or forged
 *   baton is a 400, and a stream idle for 10 s expires (rolled back, then `STREAM_EXPIRED`);
 * - writers queue FIFO for the database's single write lock instead of failing with SQLITE_BUSY;
 *   a writer waiting on a transaction that has held the lock for 5 s steals it: the holder is
 *   rolled back and its next request fails with `TRANSACTION_TIMEOUT`;
 * - statement errors are `SQLite error: …` with the base SQLite code; one statement per `execute`
 *   (`SQL_MANY_STATEMENTS`); at most 50 stored SQL texts of at most 5 kB per stream;
 * - with an auth token set, pipeline/cursor requests need `Authorization: Bearer <token>`
 *   (401 `{"error": …}` otherwise), while the version probes stay public.
 */

export interface FakeSqldOptions {
  /** Database file; created if missing. */
  path: string;
  /** When set, pipeline and cursor requests must carry `Authorization: Bearer <authToken>`. */
  authToken?: string | undefined;
  /** Idle time after which an unused stream is rolled back and closed (sqld: 10 s). */
  streamIdleMs?: number | undefined;
  /** How long a transaction may hold the write lock before a waiting writer steals it (sqld: 5 s). */
  txnTimeoutMs?: number | undefined;
  /**
   * A network round-trip time injected into every HTTP request (the scale-out path: a Worker and
   * a remote libSQL are a network apart): half before the request is handled (the request on its
   * way), half before its answer is written (the answer on its way back). A transaction spread over
   * several requests holds the write lock across those delays, as it does over a real network.
   */
  rttMs?: number | undefined;
}

/** Counters that let tests prove what actually happened on the wire. */
export interface FakeSqldStats {
  /** Every HTTP request received (pipelines, cursors, version probes, refused ones): round trips. */
  requests: number;
  pipelines: number;
  cursors: number;
  streamsOpened: number;
  streamsExpired: number;
  /** Writers that had to queue for the write lock behind another stream's transaction. */
  writeLockWaits: number;
  /** Transactions rolled back because they held the write lock past `txnTimeoutMs`. */
  txnsStolen: number;
  unauthorized: number;
  /** Largest number of streams that had an open transaction at the same time. */
  maxConcurrentTxns: number;
}

export interface FakeSqld {
  /** `http://127.0.0.1:<port>`, ready for `createClient({ url })`. */
  url: string;
  port: number;
  stats: FakeSqldStats;
  /** Streams currently open (not closed, not expired). */
  openStreams(): number;
  /** Changes the injected round-trip time for requests from now on (see {@link FakeSqldOptions.rttMs}). */
  setRttMs(ms: number): void;
  /** Stops listening, drops every connection and rolls back every open stream (idempotent). */
  close(): Promise<void>;
}

// ------------------------------------------------------------------------------ protocol shapes

type Value =
  | { type: 'null' }
  | { type: 'integer'; value: string }
  | { type: 'float'; value: number }
  | { type: 'text'; value: string }
  | { type: 'blob'; base64: string };

interface Stmt {
  sql?: string | null;
  sql_id?: number | null;
  args?: Value[];
  named_args?: { name: string; value: Value }[];
  want_rows?: boolean;
}

type BatchCond =
  | { type: 'ok' | 'error'; step: number }
  | { type: 'not'; cond: BatchCond }
  | { type: 'and' | 'or'; conds: BatchCond[] }
  | { type: 'is_autocommit' };

interface Batch {
  steps: { condition?: BatchCond | null; stmt: Stmt }[];
}

type StreamRequest =
  | { type: 'close' }
  | { type: 'execute'; stmt: Stmt }
  | { type: 'batch'; batch: Batch }
  | { type: 'sequence' | 'describe'; sql?: string | null; sql_id?: number | null }
  | { type: 'store_sql'; sql_id: number; sql: string }
  | { type: 'close_sql'; sql_id: number }
  | { type: 'get_autocommit' };

interface HranaError {
  message: string;
  code: string;
}

interface StmtResult {
  cols: { name: string | null; decltype: string | null }[];
  rows: Value[][];
  affected_row_count: number;
  last_insert_rowid: string | null;
}

interface BatchResult {
  step_results: (StmtResult | null)[];
  step_errors: (HranaError | null)[];
}

type StreamResult = { type: 'ok'; response: Record<string, unknown> } | { type: 'error'; error: HranaError };

// --------------------------------------------------------------------------------------- errors

/** A protocol violation: HTTP 400 text/plain, and the stream is dropped (as in sqld). */
class ProtocolError extends Error {}

/** A request on a stream that expired: HTTP 500 `STREAM_EXPIRED` (as in sqld). */
class StreamExpiredError extends Error {
  constructor() {
    super('The stream has expired due to inactivity');
  }
}

/** An error of one statement/request, reported inside the pipeline results. */
class StmtError extends Error {
  constructor(
    message: string,
    readonly code: string,
  ) {
    super(message);
  }
  toProto(): HranaError {
    return { message: this.message, code: this.code };
  }
}

function sqliteError(e: unknown): StmtError {
  const err = e as { message?: string; rawCode?: number; code?: string };
  // sqld reports the base result code (extended code & 0xff), e.g. SQLITE_CONSTRAINT
  const code =
    typeof err.rawCode === 'number'
      ? (sqliteCodeName(err.rawCode) ?? 'SQLITE_UNKNOWN')
      : (err.code?.replace(/^(SQLITE_[A-Z]+).*/, '$1') ?? 'SQLITE_UNKNOWN');
  return new StmtError(`SQLite error: ${err.message ?? String(e)}`, code);
}

function isBusy(e: unknown): boolean {
  const err = e as { rawCode?: number; code?: string };
  return (typeof err.rawCode === 'number' && (err.rawCode & 0xff) === 5) || err.code === 'SQLITE_BUSY';
}

const TXN_TIMEOUT_ERROR = () => new StmtError('Transaction timed out', 'TRANSACTION_TIMEOUT');

// -------------------------------------------------------------------------------------- streams

interface Stream {
  id: string;
  seq: bigint;
  /** The stream's own connection; null once the stream was closed. */
  db: Database.Database | null;
  sqls: Map<number, string>;
  acquired: boolean;
  expireTimer: NodeJS.Timeout | null;
  /** Set when another writer stole the write lock: the next request fails with TRANSACTION_TIMEOUT. */
  forcedRollback: boolean;
}

/**
 * The database's write lock as sqld's connection manager hands it out: one stream at a time, in
 * arrival order, held from the first write until the stream is back in autocommit; stolen from a
 * holder that has kept it past the transaction timeout while someone waits.
 */
class WriteLock {
  holder: Stream | null = null;
  private since = 0;
  private readonly queue: { stream: Stream; wake: () => void }[] = [];
  private stealTimer: NodeJS.Timeout | null = null;

  constructor(
    private readonly txnTimeoutMs: number,
    private readonly steal: (holder: Stream) => void,
    private readonly onWait: () => void,
  ) {}

  async acquire(stream: Stream): Promise<void> {
    if (this.holder === stream) return;
    if (!this.holder && this.queue.length === 0) {
      this.take(stream);
      return;
    }
    this.onWait();
    await new Promise<void>((wake) => {
      this.queue.push({ stream, wake });
      this.armSteal();
    });
  }

  release(stream: Stream): void {
    if (this.holder !== stream) return;
    this.holder = null;
    this.disarm();
    const next = this.queue.shift();
    if (next) {
      this.take(next.stream);
      next.wake();
    }
  }

  /** A closed stream leaves the queue (its waiting request wakes up and fails) and the lock. */
  forget(stream: Stream): void {
    const i = this.queue.findIndex((w) => w.stream === stream);
    if (i >= 0) this.queue.splice(i, 1)[0]!.wake();
    this.release(stream);
  }

  shutdown(): void {
    this.disarm();
  }

  private take(stream: Stream): void {
    this.holder = stream;
    this.since = Date.now();
    this.armSteal();
  }

  private armSteal(): void {
    if (this.stealTimer || !this.holder || this.queue.length === 0) return;
    const holder = this.holder;
    this.stealTimer = setTimeout(
      () => {
        this.stealTimer = null;
        if (this.holder === holder && this.queue.length > 0) {
          this.steal(holder);
          this.release(holder);
        }
      },
      Math.max(0, this.since + this.txnTimeoutMs - Date.now()),
    );
    this.stealTimer.unref();
  }

  private disarm(): void {
    if (this.stealTimer) clearTimeout(this.stealTimer);
    this.stealTimer = null;
  }
}

// ---------------------------------------------------------------------------------------- values

function valueToSql(v: Value): unknown {
  switch (v?.type) {
    case 'null':
      return null;
    case 'integer':
      if (typeof v.value !== 'string' || !/^-?\d+$/.test(v.value)) throw new ProtocolError('Invalid integer');
      return BigInt(v.value);
    case 'float':
      if (typeof v.value !== 'number') throw new ProtocolError('Invalid float');
      return v.value;
    case 'text':
      if (typeof v.value !== 'string') throw new ProtocolError('Invalid text');
      return v.value;
    case 'blob':
      if (typeof v.base64 !== 'string') throw new ProtocolError('Invalid blob');
      return Buffer.from(v.base64, 'base64');
    default:
      throw new ProtocolError('Received a value of unknown type');
  }
}

function valueFromSql(v: unknown): Value {
  if (v === null || v === undefined) return { type: 'null' };
  if (typeof v === 'bigint') return { type: 'integer', value: v.toString() };
  // with safeIntegers on, a JS number is always a REAL; JSON cannot carry NaN/Infinity (serde: null)
  if (typeof v === 'number') return Number.isFinite(v) ? { type: 'float', value: v } : { type: 'null' };
  if (typeof v === 'string') return { type: 'text', value: v };
  if (v instanceof Uint8Array) return { type: 'blob', base64: Buffer.from(v).toString('base64') };
  throw new Error(`unexpected SQLite value ${typeof v}`);
}

// --------------------------------------------------------------------------------------- server

/** Starts the fake sqld on 127.0.0.1 with an ephemeral port. */
export async function startFakeSqld(opts: FakeSqldOptions): Promise<FakeSqld> {
  const streamIdleMs = opts.streamIdleMs ?? 10_000;
  const txnTimeoutMs = opts.txnTimeoutMs ?? 5_000;
  const batonKey = randomBytes(32);
  const streams = new Map<string, Stream>();
  const expired = new Map<string, number>();
  const stats: FakeSqldStats = {
    requests: 0,
    pipelines: 0,
    cursors: 0,
    streamsOpened: 0,
    streamsExpired: 0,
    writeLockWaits: 0,
    txnsStolen: 0,
    unauthorized: 0,
    maxConcurrentTxns: 0,
  };

  // WAL once for the file (it is persistent), as sqld runs its databases
  const setup = new Database(opts.path);
  setup.exec('PRAGMA journal_mode = WAL');
  setup.close();

  const lock = new WriteLock(
    txnTimeoutMs,
    (holder) => {
      stats.txnsStolen++;
      holder.forcedRollback = true;
      try {
        holder.db?.exec('ROLLBACK');
      } catch {
        // already outside a transaction
      }
    },
    () => {
      stats.writeLockWaits++;
    },
  );

  const sign = (payload: Buffer) => createHmac('sha256', batonKey).update(payload).digest();
  const encodeBaton = (s: Stream) => {
    const payload = Buffer.alloc(16);
    payload.write(s.id, 0, 'hex');
    payload.writeBigUInt64BE(s.seq, 8);
    return Buffer.concat([payload, sign(payload)]).toString('base64url');
  };

  const closeStreamDb = (s: Stream) => {
    const db = s.db;
    s.db = null;
    if (db) {
      try {
        // closing a connection rolls back its transaction; do it explicitly so the write lock
        // is provably free before the next writer is woken
        if (db.inTransaction) db.exec('ROLLBACK');
      } catch {
        // the transaction is gone either way
      }
      db.close();
    }
    lock.forget(s);
  };

  const dropStream = (s: Stream) => {
    if (s.expireTimer) clearTimeout(s.expireTimer);
    closeStreamDb(s);
    streams.delete(s.id);
  };

  const acquireStream = (baton: string | null | undefined): Stream => {
    if (baton == null) {
      const s: Stream = {
        id: randomBytes(8).toString('hex'),
        seq: randomBytes(8).readBigUInt64BE(0),
        db: new Database(opts.path),
        sqls: new Map(),
        acquired: true,
        expireTimer: null,
        forcedRollback: false,
      };
      streams.set(s.id, s);
      stats.streamsOpened++;
      return s;
    }
    if (typeof baton !== 'string') throw new ProtocolError('Invalid baton');
    const data = Buffer.from(baton, 'base64url');
    if (data.length !== 48) throw new ProtocolError('Invalid baton: wrong size');
    const payload = data.subarray(0, 16);
    if (!timingSafeEqual(sign(payload), data.subarray(16))) throw new ProtocolError('Invalid baton: bad MAC');
    const id = payload.subarray(0, 8).toString('hex');
    const seq = payload.readBigUInt64BE(8);
    if (expired.has(id)) throw new StreamExpiredError();
    const s = streams.get(id);
    if (!s) throw new ProtocolError(`Invalid baton: stream ${id} not found`);
    if (s.acquired || s.seq !== seq) throw new ProtocolError('Baton reused');
    s.acquired = true;
    // the next request must show a new baton, which serializes requests on a stream
    s.seq = BigInt.asUintN(64, s.seq + 1n);
    if (s.expireTimer) clearTimeout(s.expireTimer);
    s.expireTimer = null;
    return s;
  };

  const releaseStream = (s: Stream): string | null => {
    s.acquired = false;
    if (!s.db) {
      streams.delete(s.id);
      return null;
    }
    s.expireTimer = setTimeout(() => {
      // an abandoned stream: roll back whatever it holds and remember it for a clearer error
      s.expireTimer = null;
      stats.streamsExpired++;
      dropStream(s);
      // sqld forgets expired streams after 5 minutes; from then on the baton is just invalid
      const now = Date.now();
      for (const [id, at] of expired) if (now - at > 300_000) expired.delete(id);
      expired.set(s.id, now);
    }, streamIdleMs);
    s.expireTimer.unref();
    return encodeBaton(s);
  };

  const trackTxns = () => {
    let n = 0;
    for (const s of streams.values()) if (s.db?.inTransaction) n++;
    if (n > stats.maxConcurrentTxns) stats.maxConcurrentTxns = n;
  };

  // ------------------------------------------------------------------ statement execution

  const resolveSql = (s: Stream, sql: string | null | undefined, sqlId: number | null | undefined) => {
    if (sql != null && sqlId != null) throw new ProtocolError('Both sql and sql_id were given');
    if (sql != null) {
      if (typeof sql !== 'string') throw new ProtocolError('sql must be a string');
      return sql;
    }
    if (sqlId == null) throw new ProtocolError('Neither sql nor sql_id were given');
    const stored = s.sqls.get(sqlId);
    if (stored === undefined) throw new ProtocolError(`SQL text ${sqlId} not found`);
    return stored;
  };

  const singleStmt = (sql: string): ScannedStmt => {
    const stmts = scanSql(sql);
    if (stmts.length === 0)
      throw new StmtError('SQL string does not contain any statement', 'SQL_NO_STATEMENT');
    if (stmts.length > 1)
      throw new StmtError('SQL string contains more than one statement', 'SQL_MANY_STATEMENTS');
    return stmts[0]!;
  };

  const requireDb = (s: Stream): Database.Database => {
    if (!s.db) throw new ProtocolError('The stream was closed');
    return s.db;
  };

  /** Runs one statement on the stream's connection, queueing for the write lock when it writes. */
  const execStmt = async (s: Stream, stmt: Stmt): Promise<StmtResult> => {
    const db = requireDb(s);
    const sql = resolveSql(s, stmt.sql, stmt.sql_id);
    const args = stmt.args ?? [];
    const named = stmt.named_args ?? [];
    if (args.length > 0 && named.length > 0) {
      throw new StmtError(
        'Specifying both positional and named arguments is not supported',
        'ARGS_BOTH_POSITIONAL_AND_NAMED',
      );
    }
    let bind: unknown[] | Record<string, unknown> = args.map(valueToSql);
    if (named.length > 0) {
      const obj: Record<string, unknown> = {};
      // libsql binds by bare name; Hrana names may carry the `:`/`@`/`$` prefix
      for (const a of named) obj[a.name.replace(/^[:@$]/, '')] = valueToSql(a.value);
      bind = obj;
    }
    const scanned = singleStmt(sql);
    const writes = scanned.kind === 'write' || scanned.kind === 'begin-write';
    if (writes) await lock.acquire(s);
    if (s.db !== db) throw new ProtocolError('The stream was closed');

    let prepared: Database.Statement;
    try {
      prepared = db.prepare(scanned.text);
    } catch (e) {
      const msg = (e as Error).message ?? '';
      settle(s);
      if (/syntax error|incomplete input|unrecognized token/i.test(msg)) {
        throw new StmtError(`SQL string could not be parsed: ${msg}`, 'SQL_PARSE_ERROR');
      }
      throw sqliteError(e);
    }
    prepared.safeIntegers(true);
    const reader = prepared.reader;
    const run = () => {
      if (reader) {
        prepared.raw(true);
        return { rows: prepared.all(bind) as unknown[][], info: null };
      }
      return { rows: [] as unknown[][], info: prepared.run(bind) };
    };
    let out: ReturnType<typeof run>;
    try {
      try {
        out = run();
      } catch (e) {
        // a statement classified as a read turned out to need the write lock: queue and retry
        // the same statement (re-running resets it)
        if (!isBusy(e) || lock.holder === s) throw e;
        await lock.acquire(s);
        if (s.db !== db) throw new ProtocolError('The stream was closed');
        out = run();
      }
    } catch (e) {
      settle(s);
      if (e instanceof ProtocolError) throw e;
      throw sqliteError(e);
    }
    let affected = 0;
    let lastRowid: string | null = null;
    if (out.info) {
      affected = out.info.changes;
      lastRowid = BigInt(out.info.lastInsertRowid).toString();
    } else if (writes) {
      // INSERT/UPDATE/DELETE … RETURNING: the counters come from the connection
      const q = db.prepare('SELECT changes(), last_insert_rowid()');
      q.safeIntegers(true);
      q.raw(true);
      const [row] = q.all() as [bigint, bigint][];
      affected = Number(row![0]);
      lastRowid = row![1].toString();
    }
    const cols = reader ? prepared.columns().map((c) => ({ name: c.name, decltype: c.type ?? null })) : [];
    settle(s);
    return {
      cols,
      rows: stmt.want_rows === false ? [] : out.rows.map((r) => r.map(valueFromSql)),
      affected_row_count: affected,
      last_insert_rowid: lastRowid,
    };
  };

  /** After every statement: a stream back in autocommit gives the write lock to the next writer. */
  const settle = (s: Stream) => {
    trackTxns();
    if (lock.holder === s && !s.db?.inTransaction) lock.release(s);
  };

  const evalCond = (
    cond: BatchCond,
    step: number,
    results: BatchResult,
    s: Stream,
    version: number,
  ): boolean => {
    switch (cond?.type) {
      case 'ok':
      case 'error': {
        if (typeof cond.step !== 'number' || cond.step >= step) {
          throw new ProtocolError('Invalid reference to step in a batch condition');
        }
        return cond.type === 'ok'
          ? results.step_results[cond.step] != null
          : results.step_errors[cond.step] != null;
      }
      case 'not':
        return !evalCond(cond.cond, step, results, s, version);
      case 'and':
        return cond.conds.every((c) => evalCond(c, step, results, s, version));
      case 'or':
        return cond.conds.some((c) => evalCond(c, step, results, s, version));
      case 'is_autocommit':
        if (version < 3) throw new ProtocolError('The `is_autocommit` condition requires Hrana 3');
        return !s.db?.inTransaction;
      default:
        throw new ProtocolError('Unknown batch condition');
    }
  };

  const execBatch = async (s: Stream, batch: Batch, version: number): Promise<BatchResult> => {
    requireDb(s);
    if (!Array.isArray(batch?.steps)) throw new ProtocolError('A batch needs steps');
    const results: BatchResult = { step_results: [], step_errors: [] };
    // a stolen transaction fails every step of the next program, like sqld's forced rollback
    const timedOut = s.forcedRollback;
    s.forcedRollback = false;
    for (let i = 0; i < batch.steps.length; i++) {
      const step = batch.steps[i]!;
      if (timedOut) {
        results.step_results.push(null);
        results.step_errors.push(TXN_TIMEOUT_ERROR().toProto());
        continue;
      }
      if (step.condition != null && !evalCond(step.condition, i, results, s, version)) {
        results.step_results.push(null);
        results.step_errors.push(null);
        continue;
      }
      try {
        results.step_results.push(await execStmt(s, step.stmt));
        results.step_errors.push(null);
      } catch (e) {
        if (!(e instanceof StmtError)) throw e;
        results.step_results.push(null);
        results.step_errors.push(e.toProto());
      }
    }
    return results;
  };

  const handleRequest = async (s: Stream, req: StreamRequest, version: number): Promise<StreamResult> => {
    const ok = (response: Record<string, unknown>): StreamResult => ({ type: 'ok', response });
    try {
      switch (req?.type) {
        case 'close':
          closeStreamDb(s);
          return ok({ type: 'close' });
        case 'execute': {
          requireDb(s);
          if (s.forcedRollback) {
            s.forcedRollback = false;
            throw TXN_TIMEOUT_ERROR();
          }
          return ok({ type: 'execute', result: await execStmt(s, req.stmt) });
        }
        case 'batch':
          return ok({ type: 'batch', result: await execBatch(s, req.batch, version) });
        case 'sequence': {
          requireDb(s);
          if (s.forcedRollback) {
            s.forcedRollback = false;
            throw TXN_TIMEOUT_ERROR();
          }
          const sql = resolveSql(s, req.sql, req.sql_id);
          for (const stmt of scanSql(sql)) await execStmt(s, { sql: stmt.text, want_rows: false });
          return ok({ type: 'sequence' });
        }
        case 'describe': {
          const db = requireDb(s);
          const stmt = singleStmt(resolveSql(s, req.sql, req.sql_id));
          let cols: { name: string; decltype: string | null }[];
          try {
            const p = db.prepare(stmt.text);
            cols = p.reader ? p.columns().map((c) => ({ name: c.name, decltype: c.type ?? null })) : [];
          } catch (e) {
            throw sqliteError(e);
          }
          return ok({
            type: 'describe',
            result: {
              params: stmt.params.map((name) => ({ name })),
              cols,
              is_explain: stmt.tokens[0] === 'EXPLAIN',
              is_readonly: stmt.kind === 'read' || stmt.kind === 'begin-read',
            },
          });
        }
        case 'store_sql': {
          requireDb(s);
          if (s.sqls.has(req.sql_id)) throw new ProtocolError(`SQL text ${req.sql_id} already exists`);
          if (s.sqls.size >= 50) {
            throw new StmtError(
              `The server already stores ${s.sqls.size} SQL texts, it cannot store more`,
              'SQL_STORE_TOO_MANY',
            );
          }
          if (Buffer.byteLength(req.sql) > 5000) {
            throw new StmtError('The statement is too large to be stored', 'SQL_STORE_TOO_LARGE');
          }
          s.sqls.set(req.sql_id, req.sql);
          return ok({ type: 'store_sql' });
        }
        case 'close_sql':
          s.sqls.delete(req.sql_id);
          return ok({ type: 'close_sql' });
        case 'get_autocommit':
          if (version < 3) throw new ProtocolError('The `get_autocommit` request requires Hrana 3');
          return ok({ type: 'get_autocommit', is_autocommit: !requireDb(s).inTransaction });
        default:
          throw new ProtocolError(
            `Unknown stream request ${JSON.stringify((req as { type?: unknown })?.type)}`,
          );
      }
    } catch (e) {
      if (e instanceof StmtError) return { type: 'error', error: e.toProto() };
      throw e;
    }
  };

  // ------------------------------------------------------------------------------ HTTP layer

  const readJson = async (req: IncomingMessage): Promise<unknown> => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    try {
      return JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch (e) {
      throw new ProtocolError(`Could not deserialize JSON request body: ${(e as Error).message}`);
    }
  };

  const send = (res: ServerResponse, status: number, type: string, body: string) => {
    res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
    res.end(body);
  };

  const authorized = (req: IncomingMessage, res: ServerResponse): boolean => {
    if (!opts.authToken) return true;
    const header = req.headers.authorization;
    let why: string | null = null;
    if (!header) why = 'The `Authorization` HTTP header is required but was not specified';
    else if (!/^bearer /i.test(header))
      why = 'The authentication scheme in the `Authorization` HTTP header is not supported';
    else {
      const got = Buffer.from(header.slice(7).trim());
      const want = Buffer.from(opts.authToken);
      if (got.length !== want.length || !timingSafeEqual(got, want)) why = 'The JWT is invalid';
    }
    if (!why) return true;
    stats.unauthorized++;
    send(res, 401, 'application/json', JSON.stringify({ error: `Unauthorized: \`${why}\`` }));
    return false;
  };

  const pipeline = async (req: IncomingMessage, res: ServerResponse, version: number) => {
    const body = (await readJson(req)) as { baton?: string | null; requests?: StreamRequest[] } | null;
    if (!body || !Array.isArray(body.requests)) throw new ProtocolError('A pipeline needs requests');
    stats.pipelines++;
    const s = acquireStream(body.baton);
    const results: StreamResult[] = [];
    try {
      for (const r of body.requests) results.push(await handleRequest(s, r, version));
    } catch (e) {
      // sqld drops the stream (and so rolls back its connection) when a request cannot be handled
      dropStream(s);
      throw e;
    }
    const baton = releaseStream(s);
    send(res, 200, 'application/json', JSON.stringify({ baton, base_url: null, results }));
  };

  const cursor = async (req: IncomingMessage, res: ServerResponse) => {
    const body = (await readJson(req)) as { baton?: string | null; batch?: Batch } | null;
    if (!body?.batch) throw new ProtocolError('A cursor needs a batch');
    stats.cursors++;
    const s = acquireStream(body.baton);
    let result: BatchResult;
    try {
      result = await execBatch(s, body.batch, 3);
    } catch (e) {
      dropStream(s);
      throw e;
    }
    const baton = releaseStream(s);
    // newline-delimited: the cursor body first, then the entries of every executed step
    const lines: unknown[] = [{ baton, base_url: null }];
    result.step_results.forEach((r, step) => {
      const err = result.step_errors[step];
      if (err) lines.push({ type: 'step_error', step, error: err });
      else if (r) {
        lines.push({ type: 'step_begin', step, cols: r.cols });
        for (const row of r.rows) lines.push({ type: 'row', row });
        lines.push({
          type: 'step_end',
          affected_row_count: r.affected_row_count,
          last_insert_rowid: r.last_insert_rowid,
        });
      }
    });
    send(res, 200, 'text/plain', lines.map((l) => `${JSON.stringify(l)}\n`).join(''));
  };

  let halfRtt = (opts.rttMs ?? 0) / 2;
  const travel = () => (halfRtt > 0 ? new Promise<void>((r) => setTimeout(r, halfRtt)) : Promise.resolve());
  const server = createServer((req, res) => {
    stats.requests++;
    const path = new URL(req.url ?? '/', 'http://fake-sqld').pathname.replace(/\/+$/, '') || '/';
    let answered = false;
    if (halfRtt > 0) {
      // every answer spends the second half of the round trip on its way back
      const { writeHead, end } = res;
      let answer: Promise<void> | null = null;
      res.writeHead = ((...args: Parameters<typeof writeHead>) => {
        answered = true;
        answer ??= travel();
        void answer.then(() => writeHead.apply(res, args));
        return res;
      }) as typeof res.writeHead;
      res.end = ((...args: Parameters<typeof end>) => {
        answer ??= travel();
        void answer.then(() => end.apply(res, args));
        return res;
      }) as typeof res.end;
    }
    const route = async () => {
      // the request's own half of the round trip, before the server sees it
      await travel();
      if (req.method === 'GET') {
        if (path === '/') return send(res, 200, 'text/plain', 'Hello, this is HTTP API v2 (Hrana over HTTP)');
        if (path === '/health') return send(res, 200, 'text/plain', '');
        if (path === '/version') return send(res, 200, 'text/plain', 'fake-sqld');
        // JSON only: `v3-protobuf` stays 404 so a probing client picks JSON
        if (path === '/v2' || path === '/v3') return send(res, 200, 'text/plain', '');
        return send(res, 404, 'text/plain', 'Not found');
      }
      if (req.method === 'POST') {
        const m = /^\/(v2|v3)\/(pipeline|cursor)$/.exec(path);
        if (!m || (m[1] === 'v2' && m[2] === 'cursor')) return send(res, 404, 'text/plain', 'Not found');
        if (!authorized(req, res)) return;
        const version = m[1] === 'v3' ? 3 : 2;
        return m[2] === 'pipeline' ? pipeline(req, res, version) : cursor(req, res);
      }
      return send(res, 405, 'text/plain', 'Method not allowed');
    };
    route().catch((e: unknown) => {
      if (res.headersSent || answered) return;
      if (e instanceof ProtocolError) send(res, 400, 'text/plain', e.message);
      else if (e instanceof StreamExpiredError) {
        send(res, 500, 'application/json', JSON.stringify({ message: e.message, code: 'STREAM_EXPIRED' }));
      } else send(res, 500, 'text/plain', `Internal Error: \`${String((e as Error)?.message ?? e)}\``);
    });
  });
  // no idle keep-alive timeout, as sqld's hyper server: https://docs.rs/hyper/0.14/hyper/server/conn/struct.Http.html
  server.keepAliveTimeout = 0;

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  let closing: Promise<void> | undefined;

  return {
    url: `http://127.0.0.1:${port}`,
    port,
    stats,
    openStreams: () => streams.size,
    setRttMs(ms) {
      halfRtt = ms / 2;
    },
    close() {
      closing ??= (async () => {
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeAllConnections();
        await closed;
        lock.shutdown();
        for (const s of [...streams.values()]) dropStream(s);
      })();
      return closing;
    },
  };
}
