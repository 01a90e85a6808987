import { LibsqlError } from '@libsql/client';
import Database from 'libsql';

/** Errors of the native `libsql` binding as `LibsqlError`s carrying SQLite's base code name. */

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

export function mapError(e: unknown): unknown {
  if (e instanceof Database.SqliteError) {
    const raw = (e as { rawCode?: number }).rawCode;
    const code =
      raw === undefined ? 'SQLITE_UNKNOWN' : (sqliteCodeName(raw) ?? `SQLITE_UNKNOWN_${raw & 0xff}`);
    return new LibsqlError(e.message, code, e.code, raw, e);
  }
  return e;
}
