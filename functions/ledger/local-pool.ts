import { LibsqlError } from '@libsql/client';
import type { LocalClientOptions } from './local-client-options.ts';
import { Connection } from './local-connection.ts';
import { mapError } from './sqlite-errors.ts';

/** The connection pool: same borrowing rules as `@libsql/client/sqlite3`'s. */
export class Pool {
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
