import { expect, type TestContext } from 'vitest';
import { type Harness, startHarness } from './harness.ts';

// Kept apart from harness.ts: the demo and the webhook bench import that one outside vitest.

/**
 * A harness for one test: closed when the test finishes, which then fails if any request the
 * controller made broke GitHub's documented shapes (the fake's `violations`).
 */
export async function startHarnessFor(
  ctx: TestContext,
  opts: Parameters<typeof startHarness>[0] = {},
): Promise<Harness> {
  const h = await startHarness(opts);
  ctx.onTestFinished(async () => {
    const violations = h.gh.violations;
    await h.close();
    expect(violations).toEqual([]);
  });
  return h;
}
