/**
 * `npm run bench`: runs every part's benchmark (each `scripts/bench/<part>.ts` exporting `run`),
 * prints one table with every figure and writes `bench/results.json`.
 * `npm run bench -- admission agent` runs only the named parts.
 */
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { BenchRunner, BenchSection } from './types.ts';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '../..');
// not parts: this runner, shared types, the baseline server the webhooks part spawns as a child
// process (importing it would run it), and the admission part's helpers
const NOT_PARTS = new Set([
  'run.ts',
  'types.ts',
  'webhook-baseline-server.ts',
  'admission-ledger.ts',
  'admission-remote.ts',
  'admission-statements.ts',
]);

/** admission first; tests (a full `npm test`, minutes of both cores) last, so it disturbs no other part */
const rank = (part: string) => (part === 'admission' ? -1 : part === 'tests' ? 1 : 0);

async function main() {
  const wanted = process.argv.slice(2);
  const parts = readdirSync(here)
    .filter((f) => f.endsWith('.ts') && !NOT_PARTS.has(f))
    .map((f) => f.replace(/\.ts$/, ''))
    .sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
  const chosen = wanted.length ? parts.filter((p) => wanted.includes(p)) : parts;
  const unknown = wanted.filter((w) => !parts.includes(w));
  if (unknown.length) {
    console.error(`unknown bench part(s): ${unknown.join(', ')}; known: ${parts.join(', ')}`);
    process.exit(2);
  }
  const sections: BenchSection[] = [];
  const failures: string[] = [];
  for (const part of chosen) {
    const mod = (await import(pathToFileURL(join(here, `${part}.ts`)).href)) as { run?: BenchRunner };
    if (typeof mod.run !== 'function') continue;
    const t0 = performance.now();
    console.error(`▶ ${part}`);
    try {
      const out = await mod.run((msg) => console.error(`  ${msg}`));
      sections.push(...(Array.isArray(out) ? out : [out]));
      console.error(`  done in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    } catch (e) {
      failures.push(`${part}: ${(e as Error).message}`);
      console.error(`  FAILED: ${(e as Error).stack ?? e}`);
    }
  }

  const rows = sections.flatMap((s) => s.rows.map((r) => ({ section: s.key, ...r })));
  const w = (k: 'section' | 'metric' | 'value' | 'target') =>
    Math.max(k.length, ...rows.map((r) => String(r[k] ?? '').length));
  const widths = { section: w('section'), metric: w('metric'), value: w('value'), target: w('target') };
  const line = (c: Record<string, string>) =>
    `${c.section!.padEnd(widths.section)}  ${c.metric!.padEnd(widths.metric)}  ${c.value!.padStart(widths.value)}  ${c.target!.padEnd(widths.target)}  ${c.met ?? ''}`;
  console.log(line({ section: 'section', metric: 'metric', value: 'value', target: 'target', met: '' }));
  console.log('-'.repeat(widths.section + widths.metric + widths.value + widths.target + 12));
  for (const r of rows) {
    console.log(
      line({
        section: r.section,
        metric: r.metric,
        value: r.value,
        target: r.target ?? '',
        met: r.met === undefined ? '' : r.met ? 'met' : 'NOT MET',
      }),
    );
  }

  const results: Record<string, unknown> = {
    generated_at: new Date().toISOString(),
    machine: {
      node: process.version,
      cpus: cpus().length,
      cpu_model: cpus()[0]?.model,
      memory_gib: Math.round(totalmem() / 2 ** 30),
    },
    command: `npm run bench${wanted.length ? ` -- ${wanted.join(' ')}` : ''}`,
  };
  for (const s of sections) results[s.key] = s.json;
  if (failures.length) results.failures = failures;
  const out = join(root, 'bench', 'results.json');
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, `${JSON.stringify(results, null, 2)}\n`);
  console.log(`\nwrote ${out}`);
  if (failures.length) {
    console.error(`${failures.length} bench part(s) failed:\n  ${failures.join('\n  ')}`);
    process.exit(1);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
