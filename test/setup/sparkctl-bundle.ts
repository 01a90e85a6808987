import { buildNamedTarget, bundleOnce } from './bundle-once.ts';

/**
 * Vitest global setup: builds the sparkctl bundle (`cli/dist/sparkctl.mjs`, the single file users
 * run) once per test run instead of once per file that runs it (five files, ~2 s of CPU each);
 * `sparkctlBundle()` in test/integration/cli-harness.ts answers this file
 * (`SPARK_TEST_SPARKCTL_BUNDLE`, inherited by the test workers; docs/adr/0345-system-tests-share-their-workers.md).
 */
export default function setup(): Promise<() => void> {
  return bundleOnce('SPARK_TEST_SPARKCTL_BUNDLE', 'sparkctl.mjs', buildNamedTarget('sparkctl'));
}
