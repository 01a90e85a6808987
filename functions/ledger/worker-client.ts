import { createClient } from '@libsql/client/web';
import { type LedgerDb, openLedgerDb } from './db.ts';

/**
 * The Worker's ledger: a remote libSQL database (Turso / sqld) through `@libsql/client/web`, the
 * build of the client without Node's native modules (the package's `./web` export, also what it
 * serves the `workerd` condition). Opened here so `@libsql/client` stays inside functions/ledger/
 * (docs/architecture.md "Parts"); the Worker entry checks that the URL is remote first.
 */
export function openWorkerLedger(target: { url: string; authToken: string | undefined }): Promise<LedgerDb> {
  return openLedgerDb({ url: target.url, authToken: target.authToken, createClient });
}
