import { type Client, createClient } from '@libsql/client';
import { CONNECTION_PRAGMAS } from './db.ts';
import { createLocalClient } from './local-client.ts';

/**
 * The ledger client on Node: a `file:` ledger opens {@link createLocalClient} (kept prepared
 * statements, {@link CONNECTION_PRAGMAS} on every connection as it opens); a remote ledger
 * (`libsql:`, `http(s):`, `ws(s):`) keeps `@libsql/client`, whose remote protocols carry the SQL
 * text and cache it server-side. Same signature as `createClient`, for `openLedgerDb`.
 */
export function createNodeLedgerClient(cfg: {
  url: string;
  authToken?: string;
  timeout?: number;
  concurrency?: number;
}): Client {
  if (!cfg.url.startsWith('file:')) return createClient(cfg);
  return createLocalClient({
    url: cfg.url,
    ...(cfg.timeout !== undefined ? { timeout: cfg.timeout } : {}),
    ...(cfg.concurrency !== undefined ? { concurrency: cfg.concurrency } : {}),
    onConnect: (run) => {
      for (const p of CONNECTION_PRAGMAS) run(p);
    },
  });
}
