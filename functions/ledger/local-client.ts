import type {
  Client,
  InArgs,
  InStatement,
  Replicated,
  ResultSet,
  Transaction,
  TransactionMode,
} from '@libsql/client';
import { LibsqlError } from '@libsql/client';
import { pathOfFileUrl } from './file-url.ts';
import type { LocalClientOptions } from './local-client-options.ts';
import type { Connection } from './local-connection.ts';
import { beginSql, executeOn, normalize, runStatements } from './local-execute.ts';
import { Pool } from './local-pool.ts';
import { LocalTransaction } from './local-transaction.ts';
import { mapError } from './sqlite-errors.ts';

export { pathOfFileUrl } from './file-url.ts';
export type { LocalClientOptions } from './local-client-options.ts';
export { STATEMENT_CACHE_SIZE } from './local-connection.ts';
export { sqliteCodeName } from './sqlite-errors.ts';

/**
 * A `@libsql/client` `Client` for an embedded `file:` ledger that keeps its prepared statements
 * (docs/adr/0065-cached-statements-local-client.md). `@libsql/client` 0.18
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
