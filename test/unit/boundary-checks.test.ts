import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  checkBoundaries,
  ENTRY_FILES,
  environmentUses,
  LEDGER_IMPORT_ALLOW_LIST,
  LEDGER_WRITE_ALLOW_LIST,
  ledgerImports,
  ledgerWrites,
  SETTINGS_MODULES,
  sqlUses,
} from '../../scripts/lint/boundaries.ts';
import { sourceFiles } from '../../scripts/lint/source-files.ts';

/**
 * The boundary check `npm run check` runs (docs/adr/0210-environment-and-ledger-boundaries.md) must
 * be able to fail: it is run here on small trees written for the purpose, with the tree's own
 * settings modules and entries.
 */

let root: string;
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'spark-boundaries-'));
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

function write(path: string, text: string) {
  mkdirSync(dirname(join(root, path)), { recursive: true });
  writeFileSync(join(root, path), text);
}
// the small trees hold none of the repository's allow-listed files: an empty allow-list, unless a test gives one
const check = (
  ledgerImportAllowList: Readonly<Record<string, number>> = {},
  ledgerWriteAllowList: Readonly<Record<string, number>> = {},
) =>
  checkBoundaries(root, sourceFiles(root), {
    settings: SETTINGS_MODULES,
    entries: ENTRY_FILES,
    ledgerImports: ledgerImportAllowList,
    ledgerWrites: ledgerWriteAllowList,
  });

describe('the environment', () => {
  it('may be read in the settings modules of each part', () => {
    const read = 'export const v = process.env.SPARK_X ?? process.env["SPARK_Y"];\n';
    for (const f of [
      'functions/settings.ts',
      'agent/config.ts',
      'cli/settings.ts',
      'agent/preflight/settings.ts',
      'actions/lease-preflight/src/input-helper.ts',
      'scripts/settings.ts',
    ])
      write(f, read);
    expect(check()).toEqual([]);
  });

  it('is read nowhere else, in any spelling', () => {
    write('agent/executor/slurm.ts', "export const path = process.env.PATH ?? '/usr/bin';\n");
    write('agent/exec.ts', 'export const env = (e?: NodeJS.ProcessEnv) => e ?? process.env;\n');
    write('cli/a.ts', "export const e = process['env'];\n");
    write('core/b.ts', 'const { env } = process;\nexport const x = env.X;\n');
    write('functions/c.ts', "import { env } from 'node:process';\nexport const y = env.Y;\n");
    write('scripts/bench/d.ts', "export const child = { ...process.env, NODE_ENV: 'production' };\n");
    write('actions/spark-test/src/main.ts', 'export const w = process.env.GITHUB_WORKSPACE;\n');
    write('functions/ledger/e.ts', 'export const u = process.env.SPARK_LEDGER_URL;\n');
    expect(check()).toEqual([
      'actions/spark-test/src/main.ts:1: reads the environment (process.env.GITHUB_WORKSPACE): read it in the settings module and pass the value in',
      'agent/exec.ts:1: reads the environment (e ?? process.env): read it in the settings module and pass the value in',
      'agent/executor/slurm.ts:1: reads the environment (process.env.PATH): read it in the settings module and pass the value in',
      "cli/a.ts:1: reads the environment (e = process['env']): read it in the settings module and pass the value in",
      'core/b.ts:1: reads the environment ({ env } = process): read it in the settings module and pass the value in',
      "functions/c.ts:1: reads the environment (import { env } from 'node:process';): read it in the settings module and pass the value in",
      'functions/ledger/e.ts:1: reads the environment (process.env.SPARK_LEDGER_URL): read it in the settings module and pass the value in',
      'scripts/bench/d.ts:1: reads the environment (...process.env): read it in the settings module and pass the value in',
    ]);
  });

  it('is handed whole by an entry to a settings function, and an entry reads nothing from it', () => {
    write('cli/main.ts', 'await main(process.argv.slice(2), io, process.env);\n');
    write('agent/preflight/doctor-cli.ts', 'process.exitCode = await doctorMain([], process.env);\n');
    write(
      'functions/node.ts',
      'const settings = settingsFromEnv(process.env, null);\nconst p = process.env.SPARK_CONFIG;\nconst all = process.env;\n',
    );
    // the same hand-over outside an entry is a read
    write('agent/steps/x.ts', 'export const s = () => settingsOf(process.env);\n');
    expect(check()).toEqual([
      'agent/steps/x.ts:1: reads the environment (process.env handed to settingsOf): read it in the settings module and pass the value in',
      'functions/node.ts:2: reads the environment (process.env.SPARK_CONFIG): an entry hands process.env whole to its settings function',
      'functions/node.ts:3: reads the environment (all = process.env): an entry hands process.env whole to its settings function',
    ]);
  });

  it('is not read by comments, other process members or a local named env', () => {
    const uses = environmentUses(
      'a.ts',
      '// process.env.X\n/** process.env */\nconst env = { a: 1 };\nprocess.exitCode = env.a;\nprocess.argv.slice(2);\n',
    );
    expect(uses).toEqual([]);
  });
});

describe('raw SQL', () => {
  it('may stand in functions/ledger/, and in tests', () => {
    write('functions/ledger/inbox.ts', "const Q = 'SELECT count(*) AS n FROM webhook_deliveries';\n");
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the text of a source file the check reads
    write('functions/ledger/db.ts', 'export const b = sql`${x} in (${sql.raw("1")})`;\n');
    write('test/helpers/reader.ts', "export const q = 'SELECT * FROM leases';\n");
    write('test/unit/x.test.ts', "export const q = 'DELETE FROM leases';\n");
    expect(check()).toEqual([]);
  });

  it('fails anywhere else: statements in strings and templates, sql templates, sql.raw', () => {
    write(
      'scripts/bench/a.ts',
      "await c.execute('CREATE TABLE IF NOT EXISTS scratch (id INTEGER PRIMARY KEY)');\n",
    );
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the text of a source file the check reads
    write('functions/api/b.ts', 'const q = `SELECT state FROM ${table} WHERE id = ?`;\n');
    write('cli/c.ts', 'const q = `UPDATE hosts SET state = ?`;\n');
    write('agent/d.ts', 'export const p = [\'PRAGMA journal_mode = WAL\', "DELETE FROM leases"];\n');
    write('core/e.ts', 'export const f = sql`select 1`;\nexport const g = sql.raw(text);\n');
    write('actions/x/src/f.ts', "export const i = 'INSERT INTO events (id) VALUES (?)';\n");
    expect(check()).toEqual([
      'actions/x/src/f.ts:1: SQL text "INSERT INTO events (id) VALUES (?)" outside functions/ledger/: call a ledger command or query instead',
      'agent/d.ts:1: SQL text "PRAGMA journal_mode = WAL" outside functions/ledger/: call a ledger command or query instead',
      'agent/d.ts:1: SQL text "DELETE FROM leases" outside functions/ledger/: call a ledger command or query instead',
      'cli/c.ts:1: SQL text "UPDATE hosts SET state = ?" outside functions/ledger/: call a ledger command or query instead',
      'core/e.ts:1: a sql`…` template outside functions/ledger/: call a ledger command or query instead',
      'core/e.ts:2: sql.raw(…) outside functions/ledger/: call a ledger command or query instead',
      'functions/api/b.ts:1: SQL text "SELECT state FROM   WHERE id = ?" outside functions/ledger/: call a ledger command or query instead',
      'scripts/bench/a.ts:1: SQL text "CREATE TABLE IF NOT EXISTS scratch (id I" outside functions/ledger/: call a ledger command or query instead',
    ]);
  });

  it('is not prose, a comment or a module name', () => {
    expect(
      sqlUses(
        'a.ts',
        "// SELECT * FROM leases\nimport x from './select.ts';\nconst m = 'select a host, then update the state';\nconst n = `Update the App settings`;\n",
      ),
    ).toEqual([]);
  });
});

describe('the simulation kit (docs/adr/0235-simulation-kit-in-scripts-sim.md)', () => {
  it('may read the environment in its stand-ins and run SQL in its fake sqld, and nowhere else', () => {
    write('scripts/sim/doubles/fake-runner.mjs', 'const c = process.env.ACTIONS_RUNNER_INPUT_JITCONFIG;\n');
    write('scripts/sim/harness/processes.ts', 'export const e = { ...process.env, A: "1" };\n');
    write('scripts/sim/fake-sqld/sql.ts', "export const q = 'SELECT changes(), last_insert_rowid()';\n");
    write('scripts/sim/harness/ledger-reader.ts', "export const q = 'SELECT * FROM leases';\n");
    expect(check()).toEqual([]);
    // the exemptions are per file and per rule: the fake GitHub, the demo and SQL in a double still fail
    write('scripts/sim/fake-github/server.ts', 'export const t = process.env.GITHUB_TOKEN;\n');
    write('scripts/sim/doubles/fleet.ts', "export const q = 'DELETE FROM leases';\n");
    write('scripts/sim/harness/system.ts', 'export const p = process.env.PATH;\n');
    write('scripts/demo.ts', 'export const d = process.env.SPARK_DEMO;\n');
    expect(check()).toEqual([
      'scripts/demo.ts:1: reads the environment (process.env.SPARK_DEMO): read it in the settings module and pass the value in',
      'scripts/sim/doubles/fleet.ts:1: SQL text "DELETE FROM leases" outside functions/ledger/: call a ledger command or query instead',
      'scripts/sim/fake-github/server.ts:1: reads the environment (process.env.GITHUB_TOKEN): read it in the settings module and pass the value in',
      'scripts/sim/harness/system.ts:1: reads the environment (process.env.PATH): read it in the settings module and pass the value in',
    ]);
  });
});

describe('imports from test/', () => {
  it('fail outside test/, in every form that loads a module', () => {
    write('scripts/demo.ts', "import { startSystem } from '../test/harness/index.ts';\n");
    write('scripts/bench/a.ts', "const { makeTestLedger } = await import('../../test/helpers/ledger.ts');\n");
    write('functions/b.ts', "export * from '../test/fixtures/index.ts';\n");
    write('scripts/sim/doubles/c.mjs', "const x = require('../../../test/helpers/x.ts');\n");
    write('agent/d.ts', "import type { T } from '../test/e2e/t.ts';\n");
    expect(check()).toEqual([
      'agent/d.ts:1: imports test/e2e/t.ts from test/: move what both need into scripts/sim/ (docs/adr/0235-simulation-kit-in-scripts-sim.md)',
      'functions/b.ts:1: imports test/fixtures/index.ts from test/: move what both need into scripts/sim/ (docs/adr/0235-simulation-kit-in-scripts-sim.md)',
      'scripts/bench/a.ts:1: imports test/helpers/ledger.ts from test/: move what both need into scripts/sim/ (docs/adr/0235-simulation-kit-in-scripts-sim.md)',
      'scripts/demo.ts:1: imports test/harness/index.ts from test/: move what both need into scripts/sim/ (docs/adr/0235-simulation-kit-in-scripts-sim.md)',
      'scripts/sim/doubles/c.mjs:1: imports test/helpers/x.ts from test/: move what both need into scripts/sim/ (docs/adr/0235-simulation-kit-in-scripts-sim.md)',
    ]);
  });

  it('are fine from test/, and test/ may import the kit', () => {
    write('test/e2e/x.test.ts', "import { startSystem } from '../../scripts/sim/harness/index.ts';\n");
    write('test/helpers/a.ts', "import { b } from '../unit/b.ts';\nexport const a = b;\n");
    write('scripts/sim/harness/index.ts', "export * from './system.ts';\nimport '../doubles/index.ts';\n");
    write('scripts/demo.ts', "// not '../test/harness/index.ts'\nexport const name = 'test/harness';\n");
    expect(check()).toEqual([]);
  });
});

describe('the ledger front door', () => {
  const door = "import { Ledger } from '../ledger/ledger.ts';\n";

  it('is functions/ledger/ledger.ts; inside functions/ledger/ and in tests anything goes; types come from anywhere', () => {
    write('functions/api/a.ts', door);
    write('functions/node-server.ts', "import { Ledger, storageCause } from './ledger/ledger.ts';\n");
    write(
      'functions/github/b.ts',
      [
        "import type { Tx } from '../ledger/db.ts';",
        "import { type InboxRow, type DeliveryView } from '../ledger/inbox.ts';",
        "export type { OutboxKind } from '../ledger/outbox.ts';",
        "export { type EventRow } from '../ledger/rows.ts';",
        'type Q = import("../ledger/queries.ts").Query;',
        '',
      ].join('\n'),
    );
    write('functions/ledger/pull-requests.ts', "import { createReservation } from './reservations.ts';\n");
    write('test/integration/x.test.ts', "import { enqueue } from '../../functions/ledger/outbox.ts';\n");
    expect(check()).toEqual([]);
  });

  it('fails on any other ledger module imported for code: import, re-export, a name among types, dynamic import', () => {
    write(
      'functions/github/intake/push.ts',
      "import { createReservation } from '../../ledger/reservations.ts';\n",
    );
    write('functions/github/meta.ts', "export { patchMeta } from '../ledger/github-meta.ts';\n");
    write('functions/metrics/c.ts', "import { type Tx, openLedgerDb } from '../ledger/db.ts';\n");
    write('scripts/bench/d.ts', "const m = await import('../../functions/ledger/raw-baseline.ts');\n");
    write('functions/app.ts', "import './ledger/migrate.ts';\n");
    const why =
      'outside functions/ledger/ go through the Ledger class (functions/ledger/ledger.ts); only types may come from elsewhere';
    expect(check()).toEqual([
      `functions/app.ts:1: imports functions/ledger/migrate.ts: ${why}`,
      `functions/github/intake/push.ts:1: imports functions/ledger/reservations.ts: ${why}`,
      `functions/github/meta.ts:1: imports functions/ledger/github-meta.ts: ${why}`,
      `functions/metrics/c.ts:1: imports functions/ledger/db.ts: ${why}`,
      `scripts/bench/d.ts:1: imports functions/ledger/raw-baseline.ts: ${why}`,
    ]);
  });

  it('keeps an allow-list that only shrinks: over its count fails, under it or gone asks to lower or drop it', () => {
    const two =
      "import { openLedgerDb } from './ledger/db.ts';\nimport { applyMigrations } from './ledger/migrate.ts';\n";
    write('functions/node-server.ts', two);
    write('functions/worker.ts', "import { openWorkerLedger } from './ledger/worker-client.ts';\n");
    write('scripts/deploy.ts', door);
    expect(check({ 'functions/node-server.ts': 2, 'functions/worker.ts': 1 })).toEqual([]);
    expect(
      check({
        'functions/node-server.ts': 1,
        'functions/worker.ts': 2,
        'scripts/deploy.ts': 1,
        'scripts/gone.ts': 1,
      }),
    ).toEqual([
      'functions/node-server.ts: 2 imports of ledger modules other than functions/ledger/ledger.ts, over its allowance of 1 (the allow-list only shrinks): go through the Ledger class',
      'functions/worker.ts: 1 imports of ledger modules: lower its LEDGER_IMPORT_ALLOW_LIST count from 2 to 1',
      'scripts/deploy.ts: imports no ledger module but functions/ledger/ledger.ts now: drop it from LEDGER_IMPORT_ALLOW_LIST',
      'scripts/gone.ts: listed in LEDGER_IMPORT_ALLOW_LIST but not a checked file outside functions/ledger/: drop it',
    ]);
  });

  it("the repository's allow-list names only files outside functions/ledger/ (functions/github/ holds none)", () => {
    for (const f of Object.keys(LEDGER_IMPORT_ALLOW_LIST)) {
      expect(f.startsWith('functions/ledger/')).toBe(false);
      expect(f.startsWith('functions/github/')).toBe(false);
    }
    expect(ledgerImports('functions/x.ts', "import type { Ledger } from './ledger/ledger.ts';\n")).toEqual([
      { line: 1, module: 'functions/ledger/ledger.ts', typeOnly: true },
    ]);
  });
});

describe('ledger writes are named commands (docs/adr/0260-outbox-and-sweeps-as-ledger-commands.md)', () => {
  it('inside functions/ledger/, in tests and in the simulation kit a write transaction may be opened; a named command anywhere', () => {
    write(
      'functions/ledger/github-sweeps.ts',
      'export const f = (s) => s.write(async (tx) => s.setMark(tx, "k", "v"));\n',
    );
    write('test/integration/x.test.ts', 'await h.c.ledger.write(async (tx) => ledger.record(tx, 0, ev));\n');
    write('scripts/sim/doubles/fleet.ts', 'await controller.ledger.write(async (tx) => 1);\n');
    write(
      'functions/github/sweeps.ts',
      'await svc.ledger.github.fireSchedule(key, mark, input);\nawait ledger.outbox.markSent(row, id, r);\nfile.write(b);\n',
    );
    expect(check()).toEqual([]);
  });

  it('fails on a write transaction opened elsewhere: write, writeBatched, within, on any receiver named ledger', () => {
    write(
      'functions/github/outbox.ts',
      'await svc.ledger.write(async (tx) => {\n  await svc.ledger.record(tx, 0, ev);\n});\n',
    );
    write('functions/agent-api/poll.ts', 'const out = await ledger\n  .write(async (tx) => 1);\n');
    write(
      'functions/api/b.ts',
      'await ctx.ledger.writeBatched(0, async () => 1);\nawait ledger.within(tx, async () => 1);\n',
    );
    const why =
      'outside functions/ledger/ call the one named ledger command for the event instead of composing ledger steps in a write transaction (docs/adr/0260-outbox-and-sweeps-as-ledger-commands.md)';
    expect(check()).toEqual([
      `functions/agent-api/poll.ts:2: opens a ledger write(…): ${why}`,
      `functions/api/b.ts:1: opens a ledger writeBatched(…): ${why}`,
      `functions/api/b.ts:2: opens a ledger within(…): ${why}`,
      `functions/github/outbox.ts:1: opens a ledger write(…): ${why}`,
    ]);
  });

  it('keeps an allow-list that only shrinks: over its count fails, under it or gone asks to lower or drop it', () => {
    const two = 'await ledger.write(async () => 1);\nawait ledger.write(async () => 2);\n';
    write('scripts/bench/scheduler.ts', two);
    write('scripts/bench/other.ts', 'await ledger.write(async () => 1);\n');
    write('scripts/bench/done.ts', 'await ledger.github.queueCheckSync(id);\n');
    expect(check({}, { 'scripts/bench/scheduler.ts': 2, 'scripts/bench/other.ts': 1 })).toEqual([]);
    const problems = check(
      {},
      {
        'scripts/bench/scheduler.ts': 1,
        'scripts/bench/other.ts': 2,
        'scripts/bench/done.ts': 1,
        'scripts/bench/gone.ts': 1,
      },
    );
    expect(problems).toHaveLength(4);
    expect(problems[0]).toBe('scripts/bench/done.ts: none left: drop it from LEDGER_WRITE_ALLOW_LIST');
    expect(problems[1]).toBe(
      'scripts/bench/other.ts: 1 left: lower its LEDGER_WRITE_ALLOW_LIST count from 2 to 1',
    );
    expect(problems[2]).toMatch(
      /^scripts\/bench\/scheduler\.ts: 2 of them, over its allowance of 1 in LEDGER_WRITE_ALLOW_LIST \(the allow-list only shrinks\)/,
    );
    expect(problems[3]).toBe(
      'scripts/bench/gone.ts: listed in LEDGER_WRITE_ALLOW_LIST but not a checked file outside functions/ledger/: drop it',
    );
  });

  it("the repository's allow-list names no file of functions/ (every part calls named commands)", () => {
    for (const f of Object.keys(LEDGER_WRITE_ALLOW_LIST)) expect(f.startsWith('functions/')).toBe(false);
    expect(ledgerWrites('functions/x.ts', 'await this.ledger.write(async () => 1);\n')).toEqual([
      { line: 1, what: 'write(…)' },
    ]);
  });
});
