import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildTarget, targets } from '../../scripts/build.ts';

/**
 * Vitest global setup: builds the agent bundle (the single file that ships) once
 * per test run; the test fleet and the demo harness run that file (`SPARK_TEST_AGENT_BUNDLE`,
 * inherited by the test workers).
 */
export default async function setup(): Promise<() => void> {
  const dir = mkdtempSync(join(tmpdir(), 'spark-agent-bundle-'));
  const out = join(dir, 'spark-agent.mjs');
  const agent = targets.find((t) => t.name === 'agent');
  if (!agent) throw new Error('scripts/build.ts has no "agent" target');
  await buildTarget(agent, out);
  process.env.SPARK_TEST_AGENT_BUNDLE = out;
  return () => rmSync(dir, { recursive: true, force: true });
}
