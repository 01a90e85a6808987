import { createClient } from '@libsql/client';
import { type OpenOptions, openLedgerDb } from './db.ts';

/**
 * The raw baselines the benchmarks hold the ledger against (docs/performance.md): the least a
 * write, or a webhook endpoint, can do on this machine with the ledger's own connection settings
 * (`openLedgerDb`: WAL, synchronous = NORMAL on every pooled connection), and the stock
 * `@libsql/client` to compare the Node ledger client with. Each writes a scratch table in a file of
 * its own, never a ledger. They live here, not beside the benches, because they are raw SQL on a
 * libSQL client and those stay inside functions/ledger/ (docs/architecture.md "Parts"); the same
 * rules then cover them, and `scripts/` reaches them without importing `test/`.
 */

/** A libSQL client factory with `createClient`'s shape, as `openLedgerDb` takes it. */
export type ClientFactory = OpenOptions['createClient'];

/** The stock `@libsql/client`, to compare the Node ledger client (kept statements) with. */
export const stockLedgerClient: ClientFactory = createClient;

/** One-row write transactions on a `scratch` table in the file at `url`: the floor a ledger write stands on. */
export async function openRawWrites(url: string, client: ClientFactory) {
  const store = await openLedgerDb({ url, createClient: client });
  await store.client.execute('CREATE TABLE IF NOT EXISTS scratch (id INTEGER PRIMARY KEY, v TEXT NOT NULL)');
  return {
    /** One write transaction that inserts one row. */
    async writeOne(v: string): Promise<void> {
      const tx = await store.client.transaction('write');
      await tx.execute({ sql: 'INSERT INTO scratch (v) VALUES (?)', args: [v] });
      await tx.commit();
    },
    close: () => store.close(),
  };
}

/**
 * The webhook baseline's table in the file at `path`: one INSERT of each delivery (a redelivered id
 * changes nothing), in the same in-process write queue as the ledger's own webhook insert.
 */
export async function openWebhookBaseline(path: string) {
  const store = await openLedgerDb({ url: `file:${path}`, createClient });
  await store.client.execute(
    'CREATE TABLE IF NOT EXISTS deliveries (id TEXT PRIMARY KEY, event TEXT NOT NULL, body TEXT NOT NULL, received_at INTEGER NOT NULL)',
  );
  return {
    async insert(d: { id: string; event: string; body: string; receivedAt: number }): Promise<void> {
      await store.exec(
        'INSERT INTO deliveries (id, event, body, received_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING',
        [d.id, d.event, d.body, d.receivedAt],
      );
    },
    close: () => store.close(),
  };
}
