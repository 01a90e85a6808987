import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/**
 * The import boundaries of ADR 0015, checked on the source text: sparkctl
 * depends on `core/` only (the doctor also on the in-job doctor in `agent/preflight/`), and
 * `scripts/` never reaches into `test/`: what the demo, the benches and the tests share is the
 * simulation kit in `scripts/sim/` (docs/adr/0235-simulation-kit-in-scripts-sim.md).
 */

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

function sources(dir: string): string[] {
  return readdirSync(join(ROOT, dir)).flatMap((name) => {
    const path = join(dir, name);
    if (name === 'node_modules' || name === 'dist') return [];
    if (statSync(join(ROOT, path)).isDirectory()) return sources(path);
    return /\.(ts|mts|mjs)$/.test(name) ? [path] : [];
  });
}

/** Every relative module a file imports (static, dynamic and re-exports), as repository paths. */
function relativeImports(file: string): string[] {
  const text = readFileSync(join(ROOT, file), 'utf8');
  const specs = [...text.matchAll(/(?:from|import)\s*\(?\s*['"](\.{1,2}\/[^'"]+)['"]/g)].map((m) => m[1]!);
  return specs.map((s) => relative(ROOT, resolve(ROOT, dirname(file), s)));
}

describe('import boundaries', () => {
  it('cli/ imports only core/ (and the doctor the in-job doctor), never the controller or tests', () => {
    const bad: string[] = [];
    const files = sources('cli');
    expect(files).toContain(join('cli', 'main.ts'));
    for (const f of files) {
      for (const target of relativeImports(f)) {
        const ok =
          target.startsWith('cli/') ||
          target.startsWith('core/') ||
          target === 'package.json' ||
          (f === join('cli', 'doctor.ts') && target.startsWith('agent/preflight/'));
        if (!ok) bad.push(`${f} → ${target}`);
      }
    }
    expect(bad).toEqual([]);
  });

  it('scripts/ never reaches into test/; the demo and the benches use the kit in scripts/sim/', () => {
    const bad: string[] = [];
    for (const f of sources('scripts')) {
      for (const target of relativeImports(f)) if (target.startsWith('test/')) bad.push(`${f} → ${target}`);
    }
    expect(bad).toEqual([]);
    // the demo and the webhook bench do use the kit (this check would pass vacuously otherwise)
    expect(relativeImports(join('scripts', 'demo.ts'))).toContain('scripts/sim/harness/index.ts');
    expect(relativeImports(join('scripts', 'bench', 'webhooks.ts'))).toContain('scripts/sim/harness/load.ts');
  });

  it('the demo and the system harness read the ledger without drizzle or the ledger schema', () => {
    const bad: string[] = [];
    for (const f of [join('scripts', 'demo.ts'), ...sources(join('scripts', 'sim', 'harness'))]) {
      const text = readFileSync(join(ROOT, f), 'utf8');
      if (/from ['"]drizzle-orm/.test(text)) bad.push(`${f} → drizzle-orm`);
      for (const target of relativeImports(f))
        if (/ledger\/schema/.test(target)) bad.push(`${f} → ${target}`);
    }
    expect(bad).toEqual([]);
  });
});
