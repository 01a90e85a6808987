import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildTarget, targets } from '../../scripts/build.ts';

/**
 * Vitest global setup: builds the sparkctl bundle (`cli/dist/sparkctl.mjs`, the single file users
 * run) once per test run instead of once per file that runs it (five files, ~2 s of CPU each);
 * `sparkctlBundle()` in test/integration/cli-harness.ts answers this file
 * (`SPARK_TEST_SPARKCTL_BUNDLE`, inherited by the test workers; docs/adr/0345-system-tests-share-their-workers.md).
 */
export default async function setup(): Promise<() => void> {
  const dir = mkdtempSync(join(tmpdir(), 'spark-sparkctl-bundle-'));
  const out = join(dir, 'sparkctl.mjs');
  const sparkctl = targets.find((t) => t.name === 'sparkctl');
  if (!sparkctl) throw new Error('scripts/build.ts has no "sparkctl" target');
  await buildTarget(sparkctl, out);
  process.env.SPARK_TEST_SPARKCTL_BUNDLE = out;
  return () => rmSync(dir, { recursive: true, force: true });
}
