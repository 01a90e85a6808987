import { existsSync, readdirSync } from 'node:fs';
import { join, relative, sep } from 'node:path';

/**
 * The source files the structure checks (`sizes.ts`, `cycles.ts`) read: every script file under
 * the deployables and the scripts (the simulation kit in `scripts/sim/` included), each action's
 * `src/`, and the test support code under `test/` (helpers and setup; not the `*.test.ts` files
 * themselves). Built bundles, installed packages and test output are not source.
 */

const ROOTS = ['core', 'agent', 'cli', 'functions', 'scripts', 'test'];
const SKIP_DIRS = new Set(['node_modules', 'dist', 'artifacts', '.stryker-tmp', '.wrangler']);
const SOURCE = /\.(ts|tsx|mts|cts|mjs|cjs|js)$/;

/** Repository-relative paths with `/` separators, sorted. */
export function sourceFiles(root: string): string[] {
  const out: string[] = [];
  const walk = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) {
        if (!SKIP_DIRS.has(e.name)) walk(p);
      } else if (e.isFile() && SOURCE.test(e.name) && !e.name.endsWith('.d.ts')) {
        const rel = relative(root, p).split(sep).join('/');
        if (!(rel.startsWith('test/') && /\.test\.[cm]?[jt]sx?$/.test(rel))) out.push(rel);
      }
    }
  };
  for (const r of ROOTS) if (existsSync(join(root, r))) walk(join(root, r));
  const actions = join(root, 'actions');
  if (existsSync(actions)) {
    for (const a of readdirSync(actions, { withFileTypes: true })) {
      if (a.isDirectory() && existsSync(join(actions, a.name, 'src'))) walk(join(actions, a.name, 'src'));
    }
  }
  return out.sort();
}
