import { buildControllerNode } from '../../scripts/build.ts';
import { bundleOnce } from './bundle-once.ts';

/**
 * Vitest global setup: bundles the controller (`functions/node.ts`) once per test run into one file;
 * the system harness, the load kit and the process tests start that file instead of loading ~300
 * TypeScript modules through tsx in every process (`SPARK_TEST_CONTROLLER_BUNDLE`, inherited by the
 * test workers; docs/adr/0255-controller-bundle-for-tests.md). The walkthrough and create-app tests
 * still run `npm start` as written.
 */
export default function setup(): Promise<() => void> {
  return bundleOnce('SPARK_TEST_CONTROLLER_BUNDLE', 'spark-controller.mjs', buildControllerNode);
}
