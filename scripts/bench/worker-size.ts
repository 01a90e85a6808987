/**
 * Bench: the size of the Worker bundle exactly as `wrangler deploy` would upload it
 * (`wrangler deploy --dry-run --outdir`, no account needed), raw and gzip, and which inputs make
 * it up (esbuild's metafile, grouped by package). Cloudflare's limit is 3 MiB gzip on the free
 * plan and 10 MiB on paid plans; the goal here is ≤ 250 KiB so a cold start parses little (docs/performance.md).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { gzipSync } from 'node:zlib';
import { childEnv } from '../settings.ts';
import type { BenchRunner } from './types.ts';

const root = resolve(import.meta.dirname, '..', '..');
const FREE_PLAN_GZIP = 3 * 1024 * 1024;
/** the bundle a Worker cold start parses, gzip. */
export const TARGET_GZIP = 250 * 1024;

/** What `wrangler deploy --dry-run` would upload, measured. */
export interface WorkerBundle {
  /** Uploaded script files (source maps excluded: they do not count toward the limit). */
  files: string[];
  rawBytes: number;
  /** gzip level 9 of each uploaded file, summed. */
  gzipBytes: number;
  bundleMs: number;
  /** Output bytes per input group (npm package, or first-party folder), largest first. */
  inputs: Array<{ input: string; bytes: number }>;
  /** Every input module path that made it into the output (for checks on what must stay out). */
  modules: string[];
}

/** Groups a metafile input path: `node_modules/@scope/pkg/...` → `@scope/pkg`, `functions/github/x.ts` → `functions/github`. */
function inputGroup(path: string): string {
  const nm = path.lastIndexOf('node_modules/');
  if (nm >= 0) {
    const [first = '', second = ''] = path.slice(nm + 'node_modules/'.length).split('/');
    return first.startsWith('@') ? `${first}/${second}` : first;
  }
  const parts = path.split('/');
  return parts.length > 2 ? parts.slice(0, 2).join('/') : path;
}

interface Metafile {
  outputs: Record<string, { inputs: Record<string, { bytesInOutput: number }> }>;
}

/** Bundles functions/worker.ts with the project's wrangler.toml the way `wrangler deploy` does, without uploading. */
export function measureWorkerBundle(): WorkerBundle {
  const out = mkdtempSync(join(tmpdir(), 'spark-worker-bundle-'));
  try {
    const t0 = performance.now();
    const r = spawnSync(
      process.execPath,
      [
        'node_modules/wrangler/bin/wrangler.js',
        'deploy',
        '--dry-run',
        '--outdir',
        join(out, 'bundle'),
        '--metafile',
        join(out, 'meta.json'),
      ],
      {
        cwd: root,
        encoding: 'utf8',
        env: childEnv({
          WRANGLER_SEND_METRICS: 'false',
          WRANGLER_HIDE_BANNER: 'true',
          CLOUDFLARE_API_TOKEN: '',
          HOME: out,
          XDG_CONFIG_HOME: out,
        }),
        timeout: 180_000,
      },
    );
    if (r.status !== 0) throw new Error(`wrangler deploy --dry-run failed:\n${r.stdout}${r.stderr}`);
    const bundleMs = Math.round(performance.now() - t0);
    const bundleDir = join(out, 'bundle');
    const files = readdirSync(bundleDir).filter((f) => /\.(m?js|wasm)$/.test(f));
    let rawBytes = 0;
    let gzipBytes = 0;
    for (const f of files) {
      const p = join(bundleDir, f);
      rawBytes += statSync(p).size;
      gzipBytes += gzipSync(readFileSync(p), { level: 9 }).byteLength;
    }
    const meta = JSON.parse(readFileSync(join(out, 'meta.json'), 'utf8')) as Metafile;
    const groups = new Map<string, number>();
    const modules: string[] = [];
    for (const [outPath, output] of Object.entries(meta.outputs)) {
      if (outPath.endsWith('.map')) continue;
      for (const [input, { bytesInOutput }] of Object.entries(output.inputs)) {
        if (bytesInOutput === 0) continue;
        modules.push(input);
        const g = inputGroup(input);
        groups.set(g, (groups.get(g) ?? 0) + bytesInOutput);
      }
    }
    const inputs = [...groups].map(([input, bytes]) => ({ input, bytes })).sort((a, b) => b.bytes - a.bytes);
    return { files, rawBytes, gzipBytes, bundleMs, inputs, modules };
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
}

export const run: BenchRunner = async (progress) => {
  progress('wrangler deploy --dry-run (bundling functions/worker.ts)');
  const b = measureWorkerBundle();
  const kib = (n: number) => `${(n / 1024).toFixed(1)} KiB`;
  const top = b.inputs.slice(0, 12);
  return {
    key: 'worker',
    json: {
      files: b.files,
      rawBytes: b.rawBytes,
      gzipBytes: b.gzipBytes,
      bundleMs: b.bundleMs,
      limitGzipBytes: FREE_PLAN_GZIP,
      targetGzipBytes: TARGET_GZIP,
      // raw (minified) bytes each input group contributes, to see what to cut next
      topInputs: Object.fromEntries(top.map((i) => [i.input, i.bytes])),
    },
    rows: [
      { metric: 'Worker bundle (raw)', value: kib(b.rawBytes) },
      {
        metric: 'Worker bundle (gzip)',
        value: kib(b.gzipBytes),
        target: '≤ 250 KiB (Cloudflare allows 3 MiB)',
        met: b.gzipBytes <= TARGET_GZIP,
      },
      {
        metric: 'Worker bundle largest inputs (raw)',
        value: top
          .slice(0, 3)
          .map((i) => `${i.input} ${kib(i.bytes)}`)
          .join(', '),
      },
      { metric: 'Worker bundle time', value: `${(b.bundleMs / 1000).toFixed(1)} s` },
    ],
  };
};
