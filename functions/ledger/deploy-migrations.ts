import { createClient } from '@libsql/client';
import { openLedgerDb } from './db.ts';
import { applyMigrations } from './migrate.ts';
import { loadMigrations } from './migrations-fs.ts';

/**
 * `npm run deploy`'s first step: applies the ledger migrations to the database the Worker uses
 * (remote libSQL; a `file:` ledger for a `--migrate-only` rehearsal) through the stock
 * `@libsql/client`, and closes it. Returns the names of the migrations applied (none when the
 * schema is up to date). Idempotent, so a redeploy loses nothing.
 */
export async function migrateLedgerAt(target: {
  url: string;
  authToken: string | undefined;
}): Promise<string[]> {
  const store = await openLedgerDb({ ...target, createClient });
  try {
    return await applyMigrations(store, loadMigrations());
  } finally {
    store.close();
  }
}
