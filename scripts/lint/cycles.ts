/**
 * Fails on any import cycle among the source files (docs/adr/0205-size-and-cycle-checks.md).
 * Every static `import` and `export … from` counts, `import type` too: a cycle of types is still a
 * circle a reader walks. Dynamic `import()` does not (it loads later, on demand).
 * The cycles that exist today and are left for later are in `CYCLE_ALLOW_LIST`, each as the exact
 * set of files in it: a new cycle, or a file joining a listed one, fails; so does a listed cycle
 * that is gone or smaller (update the list).
 * `npm run check` runs it; `tsx scripts/lint/cycles.ts` alone prints what it finds.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { sourceFiles } from './source-files.ts';

/** Import cycles left for later, each the sorted set of its files. */
export const CYCLE_ALLOW_LIST: readonly (readonly string[])[] = [];

/** The repository-relative files `file` imports statically (relative specifiers only). */
export function importsOf(root: string, file: string, text: string): string[] {
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, false);
  const out = new Set<string>();
  for (const st of sf.statements) {
    const spec =
      (ts.isImportDeclaration(st) || ts.isExportDeclaration(st)) &&
      st.moduleSpecifier &&
      ts.isStringLiteral(st.moduleSpecifier)
        ? st.moduleSpecifier.text
        : null;
    if (!spec?.startsWith('.')) continue;
    const target = resolveRelative(root, file, spec);
    if (target) out.add(target);
  }
  return [...out].sort();
}

function resolveRelative(root: string, from: string, spec: string): string | null {
  const base = posix.normalize(posix.join(posix.dirname(from), spec));
  const stem = base.replace(/\.(m|c)?js$/, '');
  const candidates = [base, `${stem}.ts`, `${stem}.tsx`, `${stem}.mts`, `${base}/index.ts`];
  for (const c of candidates) if (existsSync(join(root, c)) && /\.[cm]?[jt]sx?$/.test(c)) return c;
  return null;
}

/** Strongly connected components of more than one file, or of a file importing itself (Tarjan). */
export function importCycles(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  const connect = (v: string) => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!idx.has(w)) {
        connect(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
    }
    if (low.get(v) !== idx.get(v)) return;
    const scc: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      scc.push(w);
    } while (w !== v);
    if (scc.length > 1 || graph.get(v)?.includes(v)) out.push(scc.sort());
  };
  for (const v of [...graph.keys()].sort()) if (!idx.has(v)) connect(v);
  return out.sort((a, b) => a[0]!.localeCompare(b[0]!));
}

/** The import graph of the given files (edges to files outside the list are kept). */
export function importGraph(root: string, files: readonly string[]): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const f of files) graph.set(f, importsOf(root, f, readFileSync(join(root, f), 'utf8')));
  return graph;
}

/** The problems: cycles not in the allow-list, and allow-list entries that no longer match. */
export function checkCycles(
  cycles: readonly string[][],
  allow: readonly (readonly string[])[] = CYCLE_ALLOW_LIST,
): string[] {
  const key = (files: readonly string[]) => [...files].sort().join(' ↔ ');
  const allowed = new Set(allow.map(key));
  const found = new Set(cycles.map(key));
  const problems: string[] = [];
  for (const c of cycles) {
    if (!allowed.has(key(c)))
      problems.push(`import cycle: ${key(c)}: move what they share into its own module`);
  }
  for (const a of allow) {
    if (!found.has(key(a)))
      problems.push(`CYCLE_ALLOW_LIST lists ${key(a)}, which is no longer exactly a cycle: update the list`);
  }
  return problems;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
  const files = sourceFiles(root);
  const cycles = importCycles(importGraph(root, files));
  const problems = checkCycles(cycles);
  for (const p of problems) console.error(`cycles: ${p}`);
  if (problems.length) process.exitCode = 1;
  else
    console.log(
      `cycles: ${files.length} source files, no import cycle outside the ${CYCLE_ALLOW_LIST.length} allowed`,
    );
}
