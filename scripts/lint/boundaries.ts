/**
 * Fails when a part reaches past one of two boundaries docs/architecture.md ("Parts") names
 * (docs/adr/0210-environment-and-ledger-boundaries.md):
 *
 * - **The environment is read only in the settings modules** ({@link SETTINGS_MODULES}). An entry
 *   ({@link ENTRY_FILES}) may hand `process.env` whole to a settings function, and read nothing
 *   from it itself; every other file does not touch it. `process.env.X`, `process.env[x]`,
 *   `process['env']`, `{ env } = process`, `...process.env` and `import { env } from 'node:process'`
 *   all count.
 * - **Raw SQL lives in `functions/ledger/`.** A string or template literal that reads as SQL
 *   ({@link SQL_TEXT}), a `sql` tagged template or a `sql.raw(…)` call anywhere else fails.
 *   (Biome's `noRestrictedImports` in `biome.jsonc` keeps `drizzle-orm`, `@libsql/client` and the
 *   schema inside it; this check covers what an import rule cannot see.)
 *
 * - **Nothing outside `test/` imports from `test/`** (docs/adr/0235-simulation-kit-in-scripts-sim.md):
 *   what the demo, the benches and the tests share is the simulation kit in `scripts/sim/`. Static
 *   imports, `export … from`, `import()` and `require()` with a literal path all count.
 * - **The ledger has one front door** ({@link LEDGER_FRONT_DOOR}, the `Ledger` class:
 *   docs/adr/0240-ledger-front-door-only.md). Outside `functions/ledger/` no other module of it is
 *   imported, except for its types: an `import type` (or an import whose every name is `type`)
 *   brings in no code and calls nothing, so it cannot go around the commands. Files that still do
 *   are listed in {@link LEDGER_IMPORT_ALLOW_LIST} with how many such imports each may keep: the
 *   list only shrinks.
 * - **A ledger write is a named ledger command** (docs/adr/0260-outbox-and-sweeps-as-ledger-commands.md):
 *   outside `functions/ledger/` nothing opens a write transaction on the ledger to compose its steps
 *   (`ledger.write(…)`, `ledger.writeBatched(…)`, `ledger.within(…)` on a receiver named `ledger`,
 *   such as `svc.ledger` or `ctx.ledger`); it calls the one command that names the event. Files that
 *   still do are listed in {@link LEDGER_WRITE_ALLOW_LIST} with how many such calls each may keep:
 *   the list only shrinks. The check reads the syntax, not the types: a ledger handed on under
 *   another name is not seen.
 *
 * The rules cover the source of the deployables, the scripts and the actions (`core agent cli
 * functions scripts actions`). `test/` is exempt: tests set the environment of the processes they
 * start, and read the ledger file directly to check what the controller wrote. So are the files of
 * the simulation kit named in {@link SIM_ENVIRONMENT}, {@link SIM_SQL} and {@link SIM_LEDGER}, each from one rule, for
 * the reason given there: they stand in for the world around the controller, not for a part of it.
 * `npm run check` runs it; `tsx scripts/lint/boundaries.ts` alone prints what it finds.
 */
import { readFileSync } from 'node:fs';
import { dirname, join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { sourceFiles } from './source-files.ts';

/** The settings modules: the only files that read `process.env` (one per deployable, and the scripts'). */
export const SETTINGS_MODULES: readonly RegExp[] = [
  /^functions\/settings\.ts$/,
  /^agent\/config\.ts$/,
  /^cli\/settings\.ts$/,
  /^agent\/preflight\/settings\.ts$/,
  // each action's documented settings module (actions/checkout's src/input-helper.ts style)
  /^actions\/[^/]+\/src\/input-helper\.ts$/,
  /^scripts\/settings\.ts$/,
];

/** Process entries: each hands `process.env` whole to a settings function and reads nothing from it. */
export const ENTRY_FILES: readonly string[] = [
  'functions/node.ts',
  'cli/main.ts',
  'agent/preflight/bin.ts',
  'agent/preflight/doctor-cli.ts',
];

/** The folder whose files may hold SQL. */
export const LEDGER_DIR = 'functions/ledger/';

/**
 * The simulation kit's files that read the environment (docs/adr/0235-simulation-kit-in-scripts-sim.md).
 * Nothing else under `scripts/` is exempt: the demo and the benches keep the rule.
 */
export const SIM_ENVIRONMENT: readonly RegExp[] = [
  // the stand-ins read what the program each replaces reads (the runner's
  // ACTIONS_RUNNER_INPUT_JITCONFIG, nvidia-smi's FAKE_NVIDIA_SMI_STATE, the lease variables a job
  // sees) and start their processes (git, slurm, deckard, agents) with an environment they set;
  // the port allocator (ports.ts) reads vitest's worker id, VITEST_POOL_ID, to take its worker's
  // slice of ports (docs/adr/0285-test-ports-outside-the-ephemeral-range.md)
  /^scripts\/sim\/doubles\//,
  // the harness and the load kit start controllers, agents and runners with the environment of each
  /^scripts\/sim\/harness\/processes\.ts$/,
  /^scripts\/sim\/harness\/sim-runner\.mjs$/,
  /^scripts\/sim\/load\/controllers\.ts$/,
];

/** The simulation kit's files that hold SQL (docs/adr/0235-simulation-kit-in-scripts-sim.md). */
export const SIM_SQL: readonly RegExp[] = [
  // the fake sqld plays sqld: it executes the statements its clients send (Hrana over HTTP)
  /^scripts\/sim\/fake-sqld\//,
  // the harness reads the ledger file to show and check what the controller wrote, as a test does
  /^scripts\/sim\/harness\/ledger-reader\.ts$/,
];

/** Text that reads as a SQL statement (upper case, as every statement in this tree is written). */
export const SQL_TEXT = /\b(SELECT|INSERT INTO|UPDATE \w+ SET|DELETE FROM|CREATE TABLE|PRAGMA)\b/;

/**
 * Files of the simulation kit that open, seed or inspect a ledger below its front door, as a test
 * does: they stand in for what is around the controller (GitHub's side of a fleet, a ledger a test
 * or the demo prepares), not for a part of it (docs/adr/0235-simulation-kit-in-scripts-sim.md).
 */
export const SIM_LEDGER: readonly RegExp[] = [
  // opens and migrates a ledger file for a test, the demo or a bench (scripts/sim/ledger.ts)
  /^scripts\/sim\/ledger\.ts$/,
  // the fleet's GitHub stand-ins read the inbox and the reservation rows GitHub would see
  /^scripts\/sim\/doubles\/fleet(-github|-jit-stand-in)?\.ts$/,
  // the fake GitHub's harness waits on the controller's inbox to know a delivery was processed
  /^scripts\/sim\/fake-github\/harness\.ts$/,
];

/** The one module of the ledger that code outside it imports (types aside). */
export const LEDGER_FRONT_DOOR = 'functions/ledger/ledger.ts';

/**
 * Files outside `functions/ledger/` that still import other ledger modules for code, each with the
 * most such imports (`import` or `export … from` statements) it may keep. Lower a count when a
 * file routes one through the `Ledger` class, drop the entry at zero; a count never goes up and no
 * file is added (docs/adr/0240-ledger-front-door-only.md).
 */
export const LEDGER_IMPORT_ALLOW_LIST: Readonly<Record<string, number>> = {
  // opening a ledger: the database handle, its migrations and the platform's client come before
  // the Ledger that wraps them (functions/ledger/db.ts, node-client.ts, worker-client.ts)
  'functions/node-server.ts': 4,
  'functions/worker.ts': 1,
  'scripts/deploy.ts': 1,
  // the benchmarks measure the ledger's parts against raw floors (functions/ledger/raw-baseline.ts)
  'scripts/bench/admission-ledger.ts': 5,
  'scripts/bench/admission-remote.ts': 2,
  'scripts/bench/admission.ts': 2,
  'scripts/bench/scheduler.ts': 3,
  'scripts/bench/webhook-baseline-server.ts': 1,
  'scripts/bench/webhooks.ts': 1,
};

/** The ledger methods that open (or join) a write transaction for a body the caller writes. */
export const LEDGER_WRITE_METHODS: readonly string[] = ['write', 'writeBatched', 'within'];

/**
 * Files outside `functions/ledger/` that still open a ledger write transaction themselves, each
 * with the most such calls it may keep. Lower a count when a file calls a named command instead,
 * drop the entry at zero; a count never goes up and no file is added
 * (docs/adr/0260-outbox-and-sweeps-as-ledger-commands.md).
 */
export const LEDGER_WRITE_ALLOW_LIST: Readonly<Record<string, number>> = {
  // the scheduler bench seeds its queue with raw inserts in one transaction, as a test does,
  // to measure the admission pass against it (not a part of the controller)
  'scripts/bench/scheduler.ts': 1,
};

/** The files the rules apply to: every source file outside `test/`. */
export function checkedFiles(files: readonly string[]): string[] {
  return files.filter((f) => !f.startsWith('test/'));
}

const isProcess = (e: ts.Expression) => ts.isIdentifier(e) && e.text === 'process';

/** `process.env` or `process['env']`. */
function isProcessEnv(node: ts.Node): node is ts.PropertyAccessExpression | ts.ElementAccessExpression {
  if (ts.isPropertyAccessExpression(node)) return isProcess(node.expression) && node.name.text === 'env';
  if (ts.isElementAccessExpression(node))
    return (
      isProcess(node.expression) &&
      ts.isStringLiteralLike(node.argumentExpression) &&
      node.argumentExpression.text === 'env'
    );
  return false;
}

/** Whether `node` is an argument of a call, as is (not spread, not read from). */
function isWholeArgument(node: ts.Expression): boolean {
  const parent = node.parent;
  return !!parent && ts.isCallExpression(parent) && parent.arguments.includes(node);
}

const parse = (path: string, text: string | ts.SourceFile) =>
  typeof text === 'string' ? ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true) : text;

const oneLine = (text: string) => text.replace(/\s+/g, ' ').slice(0, 60);

/** The `process.env` uses of one file, each as `line: what`, classified for the rule. */
export function environmentUses(
  path: string,
  text: string | ts.SourceFile,
): { line: number; whole: boolean; what: string }[] {
  const sf = parse(path, text);
  const out: { line: number; whole: boolean; what: string }[] = [];
  const at = (n: ts.Node) => sf.getLineAndCharacterOfPosition(n.getStart(sf)).line + 1;
  const visit = (node: ts.Node) => {
    if (isProcessEnv(node)) {
      const whole = isWholeArgument(node);
      const what = whole
        ? `process.env handed to ${(node.parent as ts.CallExpression).expression.getText(sf)}`
        : oneLine(node.parent.getText(sf));
      out.push({ line: at(node), whole, what });
    } else if (
      ts.isVariableDeclaration(node) &&
      ts.isObjectBindingPattern(node.name) &&
      node.initializer &&
      isProcess(node.initializer) &&
      node.name.elements.some((e) => (e.propertyName ?? e.name).getText(sf) === 'env')
    ) {
      out.push({ line: at(node), whole: false, what: oneLine(node.getText(sf)) });
    } else if (
      ts.isImportDeclaration(node) &&
      ts.isStringLiteral(node.moduleSpecifier) &&
      /^(node:)?process$/.test(node.moduleSpecifier.text) &&
      node.importClause?.namedBindings &&
      ts.isNamedImports(node.importClause.namedBindings) &&
      node.importClause.namedBindings.elements.some((e) => (e.propertyName ?? e.name).text === 'env')
    ) {
      out.push({ line: at(node), whole: false, what: oneLine(node.getText(sf)) });
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return out;
}

/** The SQL in one file's literals and `sql` templates, each as `line: what`. */
export function sqlUses(path: string, text: string | ts.SourceFile): { line: number; what: string }[] {
  const sf = parse(path, text);
  const out: { line: number; what: string }[] = [];
  const at = (n: ts.Node) => sf.getLineAndCharacterOfPosition(n.getStart(sf)).line + 1;
  const isSqlTag = (e: ts.Expression) => ts.isIdentifier(e) && e.text === 'sql';
  const visit = (node: ts.Node) => {
    if (ts.isTaggedTemplateExpression(node) && isSqlTag(node.tag)) {
      out.push({ line: at(node), what: 'a sql`…` template' });
      return;
    }
    if (
      ts.isCallExpression(node) &&
      ts.isPropertyAccessExpression(node.expression) &&
      isSqlTag(node.expression.expression) &&
      node.expression.name.text === 'raw'
    ) {
      out.push({ line: at(node), what: 'sql.raw(…)' });
      return;
    }
    const literal =
      ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)
        ? node.text
        : ts.isTemplateExpression(node)
          ? [node.head.text, ...node.templateSpans.map((s) => s.literal.text)].join(' ')
          : null;
    // an import's module name is a string literal too, and never SQL
    if (literal !== null && !ts.isImportDeclaration(node.parent) && !ts.isExportDeclaration(node.parent)) {
      const m = SQL_TEXT.exec(literal);
      if (m) out.push({ line: at(node), what: `SQL text "${literal.slice(m.index, m.index + 40)}"` });
      if (ts.isTemplateExpression(node)) return;
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return out;
}

/** The modules one file loads from `test/` (repository-relative targets), each as `line: what`. */
export function testImports(path: string, text: string | ts.SourceFile): { line: number; what: string }[] {
  const sf = parse(path, text);
  const out: { line: number; what: string }[] = [];
  const at = (n: ts.Node) => sf.getLineAndCharacterOfPosition(n.getStart(sf)).line + 1;
  const note = (spec: ts.Node | undefined, node: ts.Node) => {
    if (!spec || !ts.isStringLiteralLike(spec) || !spec.text.startsWith('.')) return;
    const target = posix.normalize(posix.join(posix.dirname(path), spec.text));
    if (target.startsWith('test/')) out.push({ line: at(node), what: target });
  };
  const visit = (node: ts.Node) => {
    if (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) note(node.moduleSpecifier, node);
    else if (
      ts.isCallExpression(node) &&
      (node.expression.kind === ts.SyntaxKind.ImportKeyword ||
        (ts.isIdentifier(node.expression) && node.expression.text === 'require'))
    )
      note(node.arguments[0], node);
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return out;
}

/**
 * The ledger modules one file imports or re-exports (relative specifiers resolved from the file),
 * each with its line and whether it brings in types only.
 */
export function ledgerImports(
  path: string,
  text: string | ts.SourceFile,
): { line: number; module: string; typeOnly: boolean }[] {
  const sf = parse(path, text);
  const out: { line: number; module: string; typeOnly: boolean }[] = [];
  const at = (n: ts.Node) => sf.getLineAndCharacterOfPosition(n.getStart(sf)).line + 1;
  const add = (node: ts.Node, spec: ts.Expression | undefined, typeOnly: boolean) => {
    if (!spec || !ts.isStringLiteralLike(spec) || !spec.text.startsWith('.')) return;
    const module = posix.normalize(posix.join(posix.dirname(path), spec.text));
    if (module.startsWith(LEDGER_DIR)) out.push({ line: at(node), module, typeOnly });
  };
  const visit = (node: ts.Node) => {
    if (ts.isImportDeclaration(node)) {
      const c = node.importClause;
      const named = c?.namedBindings && ts.isNamedImports(c.namedBindings) ? c.namedBindings.elements : null;
      const typeOnly =
        !!c && (c.isTypeOnly || (!c.name && !!named && named.length > 0 && named.every((e) => e.isTypeOnly)));
      add(node, node.moduleSpecifier, typeOnly);
    } else if (ts.isExportDeclaration(node)) {
      const e = node.exportClause;
      const typeOnly =
        node.isTypeOnly ||
        (!!e && ts.isNamedExports(e) && e.elements.length > 0 && e.elements.every((x) => x.isTypeOnly));
      add(node, node.moduleSpecifier, typeOnly);
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      add(node, node.arguments[0], false);
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return out;
}

/** The write transactions one file opens on a ledger (`ledger.write(…)` and the like), each as `line: what`. */
export function ledgerWrites(path: string, text: string | ts.SourceFile): { line: number; what: string }[] {
  const sf = parse(path, text);
  const out: { line: number; what: string }[] = [];
  const at = (n: ts.Node) => sf.getLineAndCharacterOfPosition(n.getStart(sf)).line + 1;
  const isLedger = (e: ts.Expression) =>
    (ts.isIdentifier(e) && e.text === 'ledger') ||
    (ts.isPropertyAccessExpression(e) && e.name.text === 'ledger');
  const visit = (node: ts.Node) => {
    if (
      ts.isCallExpression(node) &&
      ts.isPropertyAccessExpression(node.expression) &&
      LEDGER_WRITE_METHODS.includes(node.expression.name.text) &&
      isLedger(node.expression.expression)
    )
      out.push({ line: at(node.expression.name), what: `${node.expression.name.text}(…)` });
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return out;
}

/**
 * The problems of a file against a shrink-only allow-list: `uses` over the file's allowance (or
 * any, when it is not listed), and an allowance larger than the file needs.
 */
function againstAllowList(
  file: string,
  uses: readonly { line: number; what: string }[],
  allowed: number | undefined,
  listName: string,
  fix: string,
): string[] {
  if (allowed === undefined) return uses.map((u) => `${file}:${u.line}: ${u.what}: ${fix}`);
  if (uses.length > allowed)
    return [
      `${file}: ${uses.length} of them, over its allowance of ${allowed} in ${listName} (the allow-list only shrinks): ${fix}`,
    ];
  if (uses.length === 0) return [`${file}: none left: drop it from ${listName}`];
  if (uses.length < allowed)
    return [`${file}: ${uses.length} left: lower its ${listName} count from ${allowed} to ${uses.length}`];
  return [];
}

/** The problems of the given files (repository-relative paths under `root`); empty when all keep the rules. */
export function checkBoundaries(
  root: string,
  files: readonly string[],
  rules: {
    settings: readonly RegExp[];
    entries: readonly string[];
    simEnvironment?: readonly RegExp[];
    simSql?: readonly RegExp[];
    ledgerImports?: Readonly<Record<string, number>>;
    ledgerWrites?: Readonly<Record<string, number>>;
    simLedger?: readonly RegExp[];
  } = {
    settings: SETTINGS_MODULES,
    entries: ENTRY_FILES,
  },
): string[] {
  const simEnvironment = rules.simEnvironment ?? SIM_ENVIRONMENT;
  const simSql = rules.simSql ?? SIM_SQL;
  const problems: string[] = [];
  const allow = rules.ledgerImports ?? LEDGER_IMPORT_ALLOW_LIST;
  const allowWrites = rules.ledgerWrites ?? LEDGER_WRITE_ALLOW_LIST;
  const seen = new Set<string>();
  const seenWrites = new Set<string>();
  for (const file of checkedFiles(files)) {
    const text = parse(file, readFileSync(join(root, file), 'utf8'));
    if (![...rules.settings, ...simEnvironment].some((r) => r.test(file))) {
      const entry = rules.entries.includes(file);
      for (const u of environmentUses(file, text)) {
        if (entry && u.whole) continue;
        problems.push(
          entry
            ? `${file}:${u.line}: reads the environment (${u.what}): an entry hands process.env whole to its settings function`
            : `${file}:${u.line}: reads the environment (${u.what}): read it in the settings module and pass the value in`,
        );
      }
    }
    if (!file.startsWith(LEDGER_DIR) && !simSql.some((r) => r.test(file))) {
      for (const u of sqlUses(file, text))
        problems.push(
          `${file}:${u.line}: ${u.what} outside ${LEDGER_DIR}: call a ledger command or query instead`,
        );
      const sim = (rules.simLedger ?? SIM_LEDGER).some((r) => r.test(file));
      const past = sim
        ? []
        : ledgerImports(file, text).filter((u) => !u.typeOnly && u.module !== LEDGER_FRONT_DOOR);
      if (allowWrites[file] !== undefined) seenWrites.add(file);
      problems.push(
        ...againstAllowList(
          file,
          sim
            ? []
            : ledgerWrites(file, text).map((u) => ({ line: u.line, what: `opens a ledger ${u.what}` })),
          allowWrites[file],
          'LEDGER_WRITE_ALLOW_LIST',
          `outside ${LEDGER_DIR} call the one named ledger command for the event instead of composing ledger steps in a write transaction (docs/adr/0260-outbox-and-sweeps-as-ledger-commands.md)`,
        ),
      );
      const allowed = allow[file];
      if (allowed !== undefined) seen.add(file);
      if (allowed === undefined)
        for (const u of past)
          problems.push(
            `${file}:${u.line}: imports ${u.module}: outside ${LEDGER_DIR} go through the Ledger class (${LEDGER_FRONT_DOOR}); only types may come from elsewhere`,
          );
      else if (past.length > allowed)
        problems.push(
          `${file}: ${past.length} imports of ledger modules other than ${LEDGER_FRONT_DOOR}, over its allowance of ${allowed} (the allow-list only shrinks): go through the Ledger class`,
        );
      else if (past.length === 0)
        problems.push(
          `${file}: imports no ledger module but ${LEDGER_FRONT_DOOR} now: drop it from LEDGER_IMPORT_ALLOW_LIST`,
        );
      else if (past.length < allowed)
        problems.push(
          `${file}: ${past.length} imports of ledger modules: lower its LEDGER_IMPORT_ALLOW_LIST count from ${allowed} to ${past.length}`,
        );
    }
    for (const u of testImports(file, text))
      problems.push(
        `${file}:${u.line}: imports ${u.what} from test/: move what both need into scripts/sim/ (docs/adr/0235-simulation-kit-in-scripts-sim.md)`,
      );
  }
  for (const file of Object.keys(allow))
    if (!seen.has(file))
      problems.push(
        `${file}: listed in LEDGER_IMPORT_ALLOW_LIST but not a checked file outside ${LEDGER_DIR}: drop it`,
      );
  for (const file of Object.keys(allowWrites))
    if (!seenWrites.has(file))
      problems.push(
        `${file}: listed in LEDGER_WRITE_ALLOW_LIST but not a checked file outside ${LEDGER_DIR}: drop it`,
      );
  return problems;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
  const files = checkedFiles(sourceFiles(root));
  const problems = checkBoundaries(root, files);
  for (const p of problems) console.error(`boundaries: ${p}`);
  if (problems.length) process.exitCode = 1;
  else
    console.log(
      `boundaries: ${files.length} source files read the environment only in settings modules, hold SQL only in ${LEDGER_DIR}, import nothing from test/ (the simulation kit's stand-ins excepted as listed) and enter the ledger through ${LEDGER_FRONT_DOOR} (${Object.keys(LEDGER_IMPORT_ALLOW_LIST).length} files allowed ${Object.values(LEDGER_IMPORT_ALLOW_LIST).reduce((a, b) => a + b, 0)} other imports) by named commands (${Object.keys(LEDGER_WRITE_ALLOW_LIST).length} file(s) allowed ${Object.values(LEDGER_WRITE_ALLOW_LIST).reduce((a, b) => a + b, 0)} write transaction(s) of their own)`,
    );
}
