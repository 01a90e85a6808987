import { buildNamedTarget, bundleOnce } from './bundle-once.ts';

/**
 * Vitest global setup: builds the agent bundle (the single file that ships) once
 * per test run; the test fleet and the demo harness run that file (`SPARK_TEST_AGENT_BUNDLE`,
 * inherited by the test workers).
 */
export default function setup(): Promise<() => void> {
  return bundleOnce('SPARK_TEST_AGENT_BUNDLE', 'spark-agent.mjs', buildNamedTarget('agent'));
}
