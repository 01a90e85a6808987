/**
 * Fails when a source file is over 500 lines or a function in `core/` is over 80 lines
 * (docs/adr/0205-size-and-cycle-checks.md). Files over the limit today are listed in
 * `SIZE_ALLOW_LIST` with the line count each may not exceed: the list may only shrink.
 * `npm run check` runs it; `tsx scripts/lint/sizes.ts` alone prints what it finds.
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { sourceFiles } from './source-files.ts';

export const MAX_FILE_LINES = 500;
export const MAX_CORE_FUNCTION_LINES = 80;

/**
 * Files over {@link MAX_FILE_LINES} today, each with the most lines it may have. Lower a count when
 * a file shrinks, and drop the entry once it is under the limit; a count never goes up.
 */
export const SIZE_ALLOW_LIST: Readonly<Record<string, number>> = {};

/** Lines of a file as an editor counts them (a final newline ends the last line, it adds none). */
export function lineCount(text: string): number {
  if (text.length === 0) return 0;
  const n = text.split('\n').length;
  return text.endsWith('\n') ? n - 1 : n;
}

/** Every function-like node of a file with its name (or `<anonymous>`) and its lines. */
export function functionLengths(path: string, text: string): { name: string; line: number; lines: number }[] {
  const sf = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true);
  const out: { name: string; line: number; lines: number }[] = [];
  const visit = (node: ts.Node) => {
    if (ts.isFunctionLike(node) && 'body' in node && node.body) {
      const start = sf.getLineAndCharacterOfPosition(node.getStart(sf)).line;
      const end = sf.getLineAndCharacterOfPosition(node.getEnd()).line;
      out.push({ name: functionName(node), line: start + 1, lines: end - start + 1 });
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return out;
}

function functionName(node: ts.SignatureDeclaration): string {
  if (node.name && ts.isIdentifier(node.name)) return node.name.text;
  if (ts.isConstructorDeclaration(node)) return 'constructor';
  const parent = node.parent;
  if (parent && (ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent))) {
    if (ts.isIdentifier(parent.name)) return parent.name.text;
  }
  return '<anonymous>';
}

/** The problems of the given files (repository-relative paths under `root`); empty when all fit. */
export function checkSizes(
  root: string,
  files: readonly string[],
  allow: Readonly<Record<string, number>> = SIZE_ALLOW_LIST,
): string[] {
  const problems: string[] = [];
  const seen = new Set<string>();
  for (const file of files) {
    const text = readFileSync(join(root, file), 'utf8');
    const lines = lineCount(text);
    const allowed = allow[file];
    if (allowed !== undefined) seen.add(file);
    const limit = allowed ?? MAX_FILE_LINES;
    if (lines > limit)
      problems.push(
        allowed === undefined
          ? `${file}: ${lines} lines, over ${MAX_FILE_LINES}: split it by concept`
          : `${file}: ${lines} lines, over its allowance of ${allowed} (the allow-list only shrinks): split it`,
      );
    else if (allowed !== undefined && lines <= MAX_FILE_LINES)
      problems.push(`${file}: ${lines} lines, within ${MAX_FILE_LINES} now: drop it from SIZE_ALLOW_LIST`);
    else if (allowed !== undefined && lines < allowed)
      problems.push(`${file}: ${lines} lines: lower its SIZE_ALLOW_LIST count from ${allowed} to ${lines}`);
    if (file.startsWith('core/')) {
      for (const f of functionLengths(file, text)) {
        if (f.lines > MAX_CORE_FUNCTION_LINES)
          problems.push(
            `${file}:${f.line}: function ${f.name} is ${f.lines} lines, over ${MAX_CORE_FUNCTION_LINES}: split it into named steps`,
          );
      }
    }
  }
  for (const file of Object.keys(allow)) {
    if (!seen.has(file)) problems.push(`${file}: listed in SIZE_ALLOW_LIST but not a source file: drop it`);
  }
  return problems;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
  const files = sourceFiles(root);
  const problems = checkSizes(root, files);
  for (const p of problems) console.error(`sizes: ${p}`);
  if (problems.length) process.exitCode = 1;
  else
    console.log(
      `sizes: ${files.length} source files fit (${MAX_FILE_LINES} lines a file, ${MAX_CORE_FUNCTION_LINES} a core/ function)`,
    );
}
