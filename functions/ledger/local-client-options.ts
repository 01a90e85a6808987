/** Options of `createLocalClient` (functions/ledger/local-client.ts). */
export interface LocalClientOptions {
  /** `file:` URL of the ledger. */
  url: string;
  /** SQLite busy timeout (ms). */
  timeout?: number;
  /** Connections in the pool. */
  concurrency?: number;
  /** Run on every new connection before first use (per-connection pragmas). */
  onConnect?: (run: (sql: string) => void) => void;
}
