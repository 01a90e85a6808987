import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { checkCycles, importCycles, importGraph } from '../../scripts/lint/cycles.ts';
import { checkSizes, functionLengths, lineCount } from '../../scripts/lint/sizes.ts';
import { sourceFiles } from '../../scripts/lint/source-files.ts';

/**
 * The structure checks `npm run check` runs (docs/adr/0205-size-and-cycle-checks.md) must be able
 * to fail: each is run here on a small tree written for the purpose.
 */

let root: string;
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'spark-structure-'));
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

function write(path: string, text: string) {
  mkdirSync(dirname(join(root, path)), { recursive: true });
  writeFileSync(join(root, path), text);
}
const lines = (n: number, line = 'export const x = 1;') =>
  `${Array.from({ length: n }, () => line).join('\n')}\n`;
/** A function declaration spanning exactly `n` lines. */
const fn = (name: string, n: number) =>
  `export function ${name}() {\n${Array.from({ length: n - 2 }, (_, i) => `  const v${i} = ${i};`).join('\n')}\n}\n`;

describe('source files', () => {
  it('are the deployables, the scripts, action sources and test support code, not tests or bundles', () => {
    for (const f of [
      'core/a.ts',
      'agent/b.ts',
      'cli/bin.mjs',
      'functions/c.ts',
      'scripts/d.ts',
      'actions/x/src/e.ts',
      'actions/x/dist/index.mjs',
      'agent/dist/spark-agent.mjs',
      'test/helpers/f.ts',
      'test/unit/g.test.ts',
      'test/artifacts/h.ts',
      'docs/i.ts',
      'core/j.d.ts',
    ])
      write(f, '');
    expect(sourceFiles(root)).toEqual([
      'actions/x/src/e.ts',
      'agent/b.ts',
      'cli/bin.mjs',
      'core/a.ts',
      'functions/c.ts',
      'scripts/d.ts',
      'test/helpers/f.ts',
    ]);
  });
});

describe('sizes', () => {
  it('counts lines as an editor does', () => {
    expect(lineCount('')).toBe(0);
    expect(lineCount('a')).toBe(1);
    expect(lineCount('a\n')).toBe(1);
    expect(lineCount('a\nb')).toBe(2);
  });

  it('passes a file of 500 lines and fails one of 501', () => {
    write('agent/ok.ts', lines(500));
    write('agent/big.ts', lines(501));
    expect(checkSizes(root, ['agent/ok.ts', 'agent/big.ts'], {})).toEqual([
      'agent/big.ts: 501 lines, over 500: split it by concept',
    ]);
  });

  it('fails a core/ function over 80 lines, counting every kind of function, and not elsewhere', () => {
    write('core/a.ts', `${fn('fits', 80)}${fn('tooLong', 81)}`);
    write(
      'core/b.ts',
      `export const arrow = () => {\n${lines(80, '  void 0;')}};\nexport class K {\n  method() {\n${lines(80, '    void 0;')}  }\n}\n`,
    );
    write('agent/a.ts', fn('longButNotCore', 200));
    expect(checkSizes(root, ['core/a.ts', 'core/b.ts', 'agent/a.ts'], {})).toEqual([
      'core/a.ts:81: function tooLong is 81 lines, over 80: split it into named steps',
      'core/b.ts:1: function arrow is 82 lines, over 80: split it into named steps',
      'core/b.ts:84: function method is 82 lines, over 80: split it into named steps',
    ]);
    expect(functionLengths('x.ts', fn('f', 5))).toEqual([{ name: 'f', line: 1, lines: 5 }]);
  });

  it('holds a listed file to its allowance, which only shrinks, and drops stale entries', () => {
    write('cli/a.ts', lines(600));
    write('cli/b.ts', lines(601));
    write('cli/c.ts', lines(590));
    write('cli/d.ts', lines(400));
    const allow = { 'cli/a.ts': 600, 'cli/b.ts': 600, 'cli/c.ts': 600, 'cli/d.ts': 600, 'cli/gone.ts': 700 };
    expect(checkSizes(root, ['cli/a.ts', 'cli/b.ts', 'cli/c.ts', 'cli/d.ts'], allow)).toEqual([
      'cli/b.ts: 601 lines, over its allowance of 600 (the allow-list only shrinks): split it',
      'cli/c.ts: 590 lines: lower its SIZE_ALLOW_LIST count from 600 to 590',
      'cli/d.ts: 400 lines, within 500 now: drop it from SIZE_ALLOW_LIST',
      'cli/gone.ts: listed in SIZE_ALLOW_LIST but not a source file: drop it',
    ]);
  });
});

describe('import cycles', () => {
  it('finds a cycle of type imports and re-exports, not one closed only by a dynamic import', () => {
    write('functions/app.ts', "import { b } from './api/b.ts';\nexport type Ctx = { b: typeof b };\n");
    write('functions/api/b.ts', "import type { Ctx } from '../app.ts';\nexport const b = (c?: Ctx) => c;\n");
    write('agent/x.ts', "export { y } from './y.ts';\nexport const x = 1;\n");
    write('agent/y.ts', "import { z } from './z.js';\nexport const y = z;\n");
    write('agent/z.ts', "export * from './x.ts';\nexport const z = 1;\n");
    write('cli/p.ts', "export const p = () => import('./q.ts');\n");
    write('cli/q.ts', "import { p } from './p.ts';\nexport const q = p;\n");
    const files = sourceFiles(root);
    expect(importCycles(importGraph(root, files))).toEqual([
      ['agent/x.ts', 'agent/y.ts', 'agent/z.ts'],
      ['functions/api/b.ts', 'functions/app.ts'],
    ]);
  });

  it('allows exactly the listed cycles: a new one, a grown one or a gone one fails', () => {
    const listed = ['a.ts', 'b.ts'];
    expect(checkCycles([['a.ts', 'b.ts']], [listed])).toEqual([]);
    expect(checkCycles([['a.ts', 'b.ts', 'c.ts']], [listed])).toEqual([
      'import cycle: a.ts ↔ b.ts ↔ c.ts: move what they share into its own module',
      'CYCLE_ALLOW_LIST lists a.ts ↔ b.ts, which is no longer exactly a cycle: update the list',
    ]);
    expect(checkCycles([], [listed])).toEqual([
      'CYCLE_ALLOW_LIST lists a.ts ↔ b.ts, which is no longer exactly a cycle: update the list',
    ]);
    expect(checkCycles([['d.ts', 'e.ts']], [])).toEqual([
      'import cycle: d.ts ↔ e.ts: move what they share into its own module',
    ]);
  });
});
