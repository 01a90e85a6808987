import type { TestContext } from 'vitest';
import { type Harness, startHarness } from '../../scripts/sim/fake-github/harness.ts';

// Kept apart from harness.ts: the demo and the webhook bench import that one outside vitest.

/**
 * A harness for one test, closed when the test finishes; the close fails the test if any request
 * the controller made, answer the fake gave or webhook the test sent broke GitHub's description
 * (the fake's `violations`, server.ts `close`).
 */
export async function startHarnessFor(
  ctx: TestContext,
  opts: Parameters<typeof startHarness>[0] = {},
): Promise<Harness> {
  const h = await startHarness(opts);
  ctx.onTestFinished(() => h.close());
  return h;
}
