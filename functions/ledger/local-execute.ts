import type { InArgs, InStatement, ResultSet, Row, TransactionMode, Value } from '@libsql/client';
import { LibsqlBatchError, LibsqlError } from '@libsql/client';
import type { Connection } from './local-connection.ts';
import { slowRow } from './local-rows.ts';
import { argsToSql, valueFromSql } from './local-values.ts';
import { mapError } from './sqlite-errors.ts';

/**
 * Statements run on one borrowed connection of the local client: one result set per statement, a
 * batch's failure as `LibsqlBatchError` naming the failed statement's index.
 */

export class LocalResultSet implements ResultSet {
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

export function normalize(stmt: InStatement | [string, InArgs?]): { sql: string; args: InArgs | undefined } {
  if (typeof stmt === 'string') return { sql: stmt, args: undefined };
  if (Array.isArray(stmt)) return { sql: stmt[0], args: stmt[1] };
  return { sql: stmt.sql, args: stmt.args };
}

export function executeOn(conn: Connection, stmt: InStatement | [string, InArgs?]): ResultSet {
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

export function beginSql(mode: TransactionMode): string {
  if (mode === 'write') return 'BEGIN IMMEDIATE';
  if (mode === 'read') return 'BEGIN TRANSACTION READONLY';
  if (mode === 'deferred') return 'BEGIN DEFERRED';
  throw new RangeError(`Unknown transaction mode ${JSON.stringify(mode)}`);
}

export function runStatements(
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
