import { describe, expect, it } from 'vitest';
import { measureWorkerBundle, TARGET_GZIP } from '../../scripts/bench/worker-size.ts';

/**
 * The Worker upload as `wrangler deploy` builds it (ADR 0075). Sizes are
 * deterministic for a given lockfile, so this is a check, not a timing: a change that pulls a
 * large input back in fails here with the inputs that grew, instead of surfacing as a slower cold
 * start on Cloudflare.
 */
describe('Worker bundle', () => {
  const bundle = measureWorkerBundle();
  const largest = bundle.inputs
    .slice(0, 8)
    .map((i) => `${i.input} ${(i.bytes / 1024).toFixed(1)} KiB`)
    .join(', ');

  it('is at most 250 KiB gzip', () => {
    expect(
      bundle.gzipBytes,
      `Worker bundle is ${(bundle.gzipBytes / 1024).toFixed(1)} KiB gzip; largest inputs: ${largest}`,
    ).toBeLessThanOrEqual(TARGET_GZIP);
  });

  it('is minified (wrangler.toml minify = true) and ships one script', () => {
    expect(bundle.files).toEqual(['worker.js']);
    // unminified, the same inputs were 1,120 KiB; minified 550 KiB
    expect(bundle.rawBytes).toBeLessThan(800 * 1024);
  });

  it("carries only zod's English messages (zod is imported as a namespace so esbuild can drop the rest)", () => {
    const locales = bundle.modules.filter((m) => /zod\/v4\/locales\/(?!en\.js$)/.test(m));
    expect(
      locales,
      "zod locales reached the Worker: import zod as `import * as z from 'zod'`, not `import { z } from 'zod'` (the named `z` namespace object defeats tree shaking)",
    ).toEqual([]);
  });

  it('carries nothing of the Node entry (node-server, native libSQL, the Node timers adapter)', () => {
    const nodeOnly = bundle.modules.filter((m) =>
      /@hono\/node-server|functions\/node\.ts|@libsql\/client\/lib-esm\/(node|sqlite3)\.js|node_modules\/libsql\//.test(
        m,
      ),
    );
    expect(nodeOnly).toEqual([]);
  });
});
