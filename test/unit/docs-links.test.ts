import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/**
 * The documentation's links and paths lead somewhere: every relative link in README.md,
 * SECURITY.md and docs/ names a file of the repository (and, with `#anchor`, a heading of it),
 * every repository path written in backticks in README.md, docs/architecture.md and
 * docs/performance.md exists, and no document cites a design note outside the repository.
 * An ADR folded into another document (docs/adr/README.md) or a renamed module shows up here.
 */

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

function markdownFiles(): string[] {
  const out = ['README.md', 'SECURITY.md'];
  const walk = (dir: string) => {
    for (const name of readdirSync(join(root, dir))) {
      const rel = join(dir, name);
      if (statSync(join(root, rel)).isDirectory()) walk(rel);
      else if (name.endsWith('.md')) out.push(rel);
    }
  };
  walk('docs');
  return out;
}

/** The text outside fenced code blocks (links and paths in examples are not claims). */
function prose(md: string): string {
  return md.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '');
}

/**
 * GitHub's heading anchors (github-slugger): lower case, punctuation other than `-` and `_`
 * dropped, spaces to `-`; a repeated slug gets `-1`, `-2`, …
 */
function anchorsOf(md: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const m of prose(md).matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const base = m[1]!
      .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

const files = markdownFiles();

describe('documentation links', () => {
  it.each(files)('%s: every relative link names a file and heading that exist', (file) => {
    const text = prose(readFileSync(join(root, file), 'utf8'));
    const broken: string[] = [];
    for (const m of text.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
      const target = m[1]!;
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto:
      const [path, anchor] = target.split('#', 2) as [string, string | undefined];
      const abs = path ? resolve(dirname(join(root, file)), decodeURIComponent(path)) : join(root, file);
      if (!abs.startsWith(root) || !existsSync(abs)) {
        broken.push(`${target} (no such file)`);
        continue;
      }
      if (anchor && abs.endsWith('.md') && !anchorsOf(readFileSync(abs, 'utf8')).has(anchor)) {
        broken.push(`${target} (no heading #${anchor} in ${relative(root, abs)})`);
      }
    }
    expect(broken).toEqual([]);
  });

  it.each(files)('%s: cites no design note outside the repository', (file) => {
    // the design lives in docs/architecture.md; a docs/architecture.md is not part of the repository
    expect(readFileSync(join(root, file), 'utf8')).not.toMatch(/DESIGN\.md/);
  });
});

/** First path segments that are folders of this repository. */
const TOP = [
  'core',
  'functions',
  'agent',
  'cli',
  'actions',
  'workflows-templates',
  'scripts',
  'test',
  'docs',
  'bench',
];
/**
 * Paths the documents name that are not files of this repository: the entry point in a consuming
 * repository (workflows-templates/ ships one per project), and the file `npm run bench` writes
 * (git-ignored).
 */
const NOT_HERE = new Set(['scripts/ci/spark-test.sh', 'bench/results.json']);

describe('paths named in the design documents', () => {
  it.each(['README.md', 'docs/architecture.md', 'docs/performance.md'])(
    '%s: every repository path in backticks exists',
    (file) => {
      const text = prose(readFileSync(join(root, file), 'utf8'));
      const missing: string[] = [];
      for (const m of text.matchAll(/`([^`\s]+)`/g)) {
        const path = m[1]!.replace(/[.,;:]+$/, '');
        const first = path.split('/')[0]!;
        if (!path.includes('/') || !TOP.includes(first) || /[*<>{}]/.test(path) || NOT_HERE.has(path))
          continue;
        if (!existsSync(join(root, path))) missing.push(path);
      }
      expect(missing).toEqual([]);
    },
  );
});
