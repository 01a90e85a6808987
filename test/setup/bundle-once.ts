import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildTarget, targetNamed } from '../../scripts/build.ts';

/**
 * The body of the bundle global setups (agent-, controller- and sparkctl-bundle.ts): builds one
 * bundle into a temp dir once per test run, names it in `env` for the test workers (they inherit
 * the variable), and removes it when the run ends.
 */
export async function bundleOnce(
  env: string,
  fileName: string,
  build: (outfile: string) => Promise<void>,
): Promise<() => void> {
  const dir = mkdtempSync(join(tmpdir(), 'spark-test-bundle-'));
  const out = join(dir, fileName);
  await build(out);
  process.env[env] = out;
  return () => rmSync(dir, { recursive: true, force: true });
}

/** Builds the `scripts/build.ts` target named `name` (the file users run) into `outfile`. */
export function buildNamedTarget(name: string): (outfile: string) => Promise<void> {
  const target = targetNamed(name);
  return (outfile) => buildTarget(target, outfile);
}
