import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildControllerNode } from '../../scripts/build.ts';

/**
 * Vitest global setup: bundles the controller (`functions/node.ts`) once per test run into one file;
 * the system harness, the load kit and the process tests start that file instead of loading ~300
 * TypeScript modules through tsx in every process (`SPARK_TEST_CONTROLLER_BUNDLE`, inherited by the
 * test workers; docs/adr/0255-controller-bundle-for-tests.md). The walkthrough and create-app tests
 * still run `npm start` as written.
 */
export default async function setup(): Promise<() => void> {
  const dir = mkdtempSync(join(tmpdir(), 'spark-controller-bundle-'));
  const out = join(dir, 'spark-controller.mjs');
  await buildControllerNode(out);
  process.env.SPARK_TEST_CONTROLLER_BUNDLE = out;
  return () => rmSync(dir, { recursive: true, force: true });
}
