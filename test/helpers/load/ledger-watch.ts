import { type Client, createClient } from '@libsql/client';
import { expect } from 'vitest';

/**
 * Watches a libSQL file ledger from a second, read-only connection. SQLite's `PRAGMA
 * data_version` on this connection changes whenever any other connection commits a change to
 * the file, so "nothing was written" can be checked exactly and cheaply after every request;
 * row counts of every table and the last event id say what was written.
 */
export interface LedgerWatch {
  /** Changes iff another connection committed a write since the last call. */
  dataVersion(): Promise<number>;
  /** Row count per table (every table of the schema) plus the highest events id. */
  counts(): Promise<Record<string, number>>;
  all<T>(sql: string, args?: Array<string | number>): Promise<T[]>;
  close(): void;
}

export async function watchLedger(url: string): Promise<LedgerWatch> {
  const client: Client = createClient({ url });
  const tables = (
    await client.execute(
      "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
    )
  ).rows.map((r) => String(r.name));
  if (!tables.includes('events')) throw new TypeError(`${url} is not a migrated ledger (no events table)`);
  const countSql = `SELECT ${tables.map((t) => `(SELECT count(*) FROM "${t}") AS "${t}"`).join(', ')}, (SELECT coalesce(max(id), 0) FROM events) AS "events.maxId"`;
  return {
    async dataVersion() {
      const rs = await client.execute('PRAGMA data_version');
      return Number(rs.rows[0]![0]);
    },
    async counts() {
      const row = (await client.execute(countSql)).rows[0]!;
      return Object.fromEntries([...tables, 'events.maxId'].map((t) => [t, Number(row[t])]));
    },
    async all<T>(sql: string, args: Array<string | number> = []) {
      return (await client.execute({ sql, args })).rows as unknown as T[];
    },
    close: () => client.close(),
  };
}

/**
 * For a rejected request (4xx): the body has the one error shape, and the ledger is untouched —
 * no commit since `before` (data_version) and the same row counts.
 */
export async function expectRejectedWroteNothing(
  watch: LedgerWatch,
  status: number,
  body: string,
  before: { version: number; counts: Record<string, number> },
): Promise<void> {
  const err = JSON.parse(body) as { error: { code: string; message: string } };
  expect(err.error.code).toMatch(/^[a-z_]+$/);
  expect(err.error.message.length).toBeGreaterThan(0);
  expect(await watch.dataVersion(), `rejected ${status} ${err.error.code} wrote to the ledger`).toBe(
    before.version,
  );
  expect(await watch.counts()).toEqual(before.counts);
}
