import type Database from 'libsql';
import { sqliteCodeName } from '../../../functions/ledger/local-client.ts';
import { type ScannedStmt, scanSql } from './sql.ts';

/**
 * Hrana's JSON shapes as `@libsql/client`'s http transport sends and reads them, sqld's errors,
 * and the conversion of Hrana values to and from SQLite's (server.ts describes the stand-in).
 */

// ------------------------------------------------------------------------------ protocol shapes

export type Value =
  | { type: 'null' }
  | { type: 'integer'; value: string }
  | { type: 'float'; value: number }
  | { type: 'text'; value: string }
  | { type: 'blob'; base64: string };

export interface Stmt {
  sql?: string | null;
  sql_id?: number | null;
  args?: Value[];
  named_args?: { name: string; value: Value }[];
  want_rows?: boolean;
}

export type BatchCond =
  | { type: 'ok' | 'error'; step: number }
  | { type: 'not'; cond: BatchCond }
  | { type: 'and' | 'or'; conds: BatchCond[] }
  | { type: 'is_autocommit' };

export interface Batch {
  steps: { condition?: BatchCond | null; stmt: Stmt }[];
}

export type StreamRequest =
  | { type: 'close' }
  | { type: 'execute'; stmt: Stmt }
  | { type: 'batch'; batch: Batch }
  | { type: 'sequence' | 'describe'; sql?: string | null; sql_id?: number | null }
  | { type: 'store_sql'; sql_id: number; sql: string }
  | { type: 'close_sql'; sql_id: number }
  | { type: 'get_autocommit' };

export interface HranaError {
  message: string;
  code: string;
}

export interface StmtResult {
  cols: { name: string | null; decltype: string | null }[];
  rows: Value[][];
  affected_row_count: number;
  last_insert_rowid: string | null;
}

export interface BatchResult {
  step_results: (StmtResult | null)[];
  step_errors: (HranaError | null)[];
}

export type StreamResult =
  | { type: 'ok'; response: Record<string, unknown> }
  | { type: 'error'; error: HranaError };

// --------------------------------------------------------------------------------------- errors

/** A protocol violation: HTTP 400 text/plain, and the stream is dropped (as in sqld). */
export class ProtocolError extends Error {}

/** A request on a stream that expired: HTTP 500 `STREAM_EXPIRED` (as in sqld). */
export class StreamExpiredError extends Error {
  constructor() {
    super('The stream has expired due to inactivity');
  }
}

/** An error of one statement/request, reported inside the pipeline results. */
export class StmtError extends Error {
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

export function sqliteError(e: unknown): StmtError {
  const err = e as { message?: string; rawCode?: number; code?: string };
  // sqld reports the base result code (extended code & 0xff), e.g. SQLITE_CONSTRAINT
  const code =
    typeof err.rawCode === 'number'
      ? (sqliteCodeName(err.rawCode) ?? 'SQLITE_UNKNOWN')
      : (err.code?.replace(/^(SQLITE_[A-Z]+).*/, '$1') ?? 'SQLITE_UNKNOWN');
  return new StmtError(`SQLite error: ${err.message ?? String(e)}`, code);
}

export function isBusy(e: unknown): boolean {
  const err = e as { rawCode?: number; code?: string };
  return (typeof err.rawCode === 'number' && (err.rawCode & 0xff) === 5) || err.code === 'SQLITE_BUSY';
}

export const TXN_TIMEOUT_ERROR = () => new StmtError('Transaction timed out', 'TRANSACTION_TIMEOUT');

/** A Hrana stream: its baton sequence, its own connection and its stored SQL texts. */
export interface Stream {
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

// ---------------------------------------------------------------------------------------- values

export function valueToSql(v: Value): unknown {
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

export function valueFromSql(v: unknown): Value {
  if (v === null || v === undefined) return { type: 'null' };
  if (typeof v === 'bigint') return { type: 'integer', value: v.toString() };
  // with safeIntegers on, a JS number is always a REAL; JSON cannot carry NaN/Infinity (serde: null)
  if (typeof v === 'number') return Number.isFinite(v) ? { type: 'float', value: v } : { type: 'null' };
  if (typeof v === 'string') return { type: 'text', value: v };
  if (v instanceof Uint8Array) return { type: 'blob', base64: Buffer.from(v).toString('base64') };
  throw new Error(`unexpected SQLite value ${typeof v}`);
}

/** Starts the fake sqld on 127.0.0.1 with an ephemeral port. */
// ------------------------------------------------------------------------- statement texts

export const resolveSql = (s: Stream, sql: string | null | undefined, sqlId: number | null | undefined) => {
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

export const singleStmt = (sql: string): ScannedStmt => {
  const stmts = scanSql(sql);
  if (stmts.length === 0)
    throw new StmtError('SQL string does not contain any statement', 'SQL_NO_STATEMENT');
  if (stmts.length > 1)
    throw new StmtError('SQL string contains more than one statement', 'SQL_MANY_STATEMENTS');
  return stmts[0]!;
};

export const requireDb = (s: Stream): Database.Database => {
  if (!s.db) throw new ProtocolError('The stream was closed');
  return s.db;
};
