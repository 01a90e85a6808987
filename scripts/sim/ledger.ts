import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { parseConfig, type SparkConfig, type SparkConfigInput } from '../../core/config.ts';
import type { HostFacts } from '../../core/model.ts';
import { openLedgerDb } from '../../functions/ledger/db.ts';
import { type Clock, Ledger, type TransitionHook } from '../../functions/ledger/ledger.ts';
import { applyMigrations } from '../../functions/ledger/migrate.ts';
import { loadMigrations } from '../../functions/ledger/migrations-fs.ts';
import { createNodeLedgerClient } from '../../functions/ledger/node-client.ts';

let gc: (() => void) | null = null;

/**
 * Lets go of the files of ledgers already closed. `@libsql/client`'s `close()` leaves each
 * connection's database file open until its statements are garbage-collected (3 descriptors per
 * ledger, measured), so a test that opens thousands of ledgers in one process — the 10,000-sequence
 * model test — ran out of descriptors (SQLITE_CANTOPEN) after ~2,850 sequences without this.
 */
export async function releaseClosedLedgers(): Promise<void> {
  if (!gc) {
    setFlagsFromString('--expose-gc');
    gc = runInNewContext('gc') as () => void;
  }
  gc();
  // the native finalizers that close the files run after the collection, on a later turn
  await new Promise((r) => setTimeout(r, 20));
  gc();
}

/** A temp directory removed by the returned cleanup. */
export function tempDir(prefix = 'spark-test-'): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** A settable clock for tests. */
export function testClock(start = Date.UTC(2026, 10, 30, 8, 0, 0)) {
  let now = start;
  const clock: Clock & { set(ms: number): void; advance(ms: number): void } = Object.assign(() => now, {
    set(ms: number) {
      now = ms;
    },
    advance(ms: number) {
      now += ms;
    },
  });
  return clock;
}

export interface TestLedger {
  ledger: Ledger;
  url: string;
  dir: string;
  config: SparkConfig;
  close(): void;
}

let template: Promise<string> | null = null;

/**
 * A ledger file with every migration applied and nothing else, made once per test process
 * (`VACUUM INTO`: one self-contained file, no WAL beside it) and removed when the process exits.
 */
function migratedTemplate(): Promise<string> {
  template ??= (async () => {
    const { dir, cleanup } = tempDir('spark-template-');
    process.once('exit', cleanup);
    const store = await openLedgerDb({
      url: `file:${join(dir, 'spark.db')}`,
      createClient: createNodeLedgerClient,
    });
    await applyMigrations(store, loadMigrations());
    const file = join(dir, 'migrated.db');
    await store.client.execute({ sql: 'VACUUM INTO ?', args: [file] });
    store.close();
    return file;
  })();
  return template;
}

/**
 * A real libSQL file ledger in a temp dir, migrated, with hosts synced from the config.
 * `copyMigrated` starts from a copy of a file migrated once per process instead of running every
 * migration again (the migrations still run through {@link applyMigrations}, which finds them all
 * applied): for tests that open a ledger per generated case — about 5 ms of the ~12 ms a ledger
 * costs to open (measured on the model test's 1,000 ledgers).
 */
export async function makeTestLedger(
  opts: {
    config?: SparkConfigInput;
    clock?: Clock;
    hooks?: TransitionHook[];
    url?: string;
    copyMigrated?: boolean;
  } = {},
): Promise<TestLedger> {
  const { dir, cleanup } = tempDir();
  const path = join(dir, 'spark.db');
  const url = opts.url ?? `file:${path}`;
  const config = parseConfig(opts.config ?? {}, 'test');
  if (opts.copyMigrated) {
    if (opts.url) throw new TypeError('makeTestLedger: copyMigrated makes its own file; pass no url');
    copyFileSync(await migratedTemplate(), path);
  }
  const store = await openLedgerDb({ url, createClient: createNodeLedgerClient });
  await applyMigrations(store, loadMigrations());
  const ledger = new Ledger(store, {
    config,
    ...(opts.clock ? { clock: opts.clock } : {}),
    hooks: opts.hooks ?? [],
  });
  await ledger.syncHosts();
  return {
    ledger,
    url,
    dir,
    config,
    close() {
      store.close();
      cleanup();
    },
  };
}

/**
 * A heartbeat of an idle host. The test fleet's agents run the dstack executor, so development
 * leases can be granted on them (ADR 0176); a test about another backend says `executor`. Like
 * every agent since docs/adr/0166-dstack-enrolment-fact.md, a dstack one reports its enrolment:
 * its fleet active (a test about enrolment says `dstack`).
 */
export const idleFacts = (over: Partial<HostFacts> = {}): HostFacts => ({
  gpuProcesses: [],
  freeDiskBytes: 500e9,
  serviceState: 'none',
  runnerState: 'none',
  interconnectOk: true,
  executor: 'dstack',
  dstack: { fleet: 'spark', ok: true, detail: 'fleet "spark" active; its instance idle' },
  ...over,
});

export const servingFacts = (over: Partial<HostFacts> = {}): HostFacts =>
  idleFacts({
    serviceState: 'serving',
    gpuProcesses: [{ pid: 4242, name: 'deckard-server', usedMemoryMiB: 90000 }],
    ...over,
  });

/** Adopts every configured host and sends one heartbeat (spark-1 style hosts report serving). */
export async function adoptAll(ledger: Ledger): Promise<void> {
  for (const h of ledger.config.hosts) {
    await ledger.setManaged(h.id, true, 'test');
    await ledger.recordHeartbeat(h.id, h.homeService ? servingFacts() : idleFacts());
  }
}
