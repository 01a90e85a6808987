import type { Client } from '@libsql/client';
import { drizzle, type LibSQLDatabase } from 'drizzle-orm/libsql';
import * as schema from './schema.ts';

export type Db = LibSQLDatabase<typeof schema>;
/** The drizzle handle inside a write transaction. */
export type Tx = Parameters<Parameters<Db['transaction']>[0]>[0];

/** A ledger connection: the drizzle handle plus its libSQL client. */
export interface LedgerDb {
  db: Db;
  client: Client;
  /** True for an embedded `file:` ledger (WAL, shared by local processes). */
  local: boolean;
  /**
   * Runs `fn` in one write transaction (BEGIN IMMEDIATE on a local file, an interactive write
   * transaction on sqld/Turso). Writers in this process are serialized first so they queue here
   * instead of spinning on SQLITE_BUSY; writers in other processes are serialized by the
   * database lock, retried on BUSY with backoff.
   */
  write<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
  close(): void;
}

export interface OpenOptions {
  url: string;
  authToken?: string | undefined;
  /** Injected so the Worker can pass `@libsql/client/web`'s createClient. */
  createClient: (cfg: { url: string; authToken?: string; timeout?: number; concurrency?: number }) => Client;
}

function isBusy(e: unknown): boolean {
  const err = e as { code?: string; message?: string; cause?: { code?: string } } | null;
  const text = `${err?.code ?? ''} ${err?.cause?.code ?? ''} ${err?.message ?? ''}`;
  return /SQLITE_BUSY|database is locked/i.test(text);
}

/** Opens a ledger client; a `file:` URL gets WAL and a busy timeout for multi-process use. */
export async function openLedgerDb(opts: OpenOptions): Promise<LedgerDb> {
  const local = opts.url.startsWith('file:');
  const client = opts.createClient({
    url: opts.url,
    ...(opts.authToken ? { authToken: opts.authToken } : {}),
    // libsql's busy timeout (ms) for local files: writers in other processes wait for the lock
    ...(local ? { timeout: 5000, concurrency: 4 } : {}),
  });
  if (local) {
    await client.execute('PRAGMA journal_mode = WAL');
    await client.execute('PRAGMA synchronous = NORMAL');
  }
  const db = drizzle(client, { schema });

  let chain: Promise<unknown> = Promise.resolve();
  const write = <T>(fn: (tx: Tx) => Promise<T>): Promise<T> => {
    const run = async (): Promise<T> => {
      for (let attempt = 0; ; attempt++) {
        try {
          return await db.transaction(fn);
        } catch (e) {
          if (!isBusy(e) || attempt >= 50) throw e;
          await new Promise((r) =>
            setTimeout(r, Math.min(200, 5 * 2 ** Math.min(attempt, 5)) * Math.random() + 1),
          );
        }
      }
    };
    const p = chain.then(run, run);
    chain = p.catch(() => undefined);
    return p;
  };

  return { db, client, local, write, close: () => client.close() };
}
