import Database from 'libsql';
import { rowPrototype } from './local-rows.ts';

/**
 * One native `libsql` connection of the local client (functions/ledger/local-client.ts) with the
 * statements it prepared, kept by SQL text and dropped least recently used first
 * (docs/adr/0065-cached-statements-local-client.md).
 */

/** Kept statements per connection: the ledger's distinct query texts fit with room to spare. */
export const STATEMENT_CACHE_SIZE = 500;

interface Kept {
  stmt: Database.Statement;
  reader: boolean;
  columns: string[];
  columnTypes: string[];
  /** Prototype of this statement's rows: indices as getters over the named columns. */
  proto: object | null;
}

export class Connection {
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
