import type { InStatement, ResultSet, Transaction } from '@libsql/client';
import { LibsqlError } from '@libsql/client';
import type { Connection } from './local-connection.ts';
import { executeOn, runStatements } from './local-execute.ts';
import { mapError } from './sqlite-errors.ts';

/**
 * An interactive transaction of the local client: it owns its connection until it settles (commit,
 * rollback or close), then hands it back to the pool.
 */
export class LocalTransaction implements Transaction {
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
