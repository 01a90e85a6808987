import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTarget, targets } from '../../scripts/build.ts';
import { tempDir } from '../../scripts/sim/ledger.ts';
import { repoRoot } from './actions-lease-fixture.ts';

/**
 * The committed action bundles (and the host preflight command) are what runners execute, so they must be exactly what the sources
 * build to (actions/checkout check-dist). Fix a failure with `npm run build` and commit dist/.
 */

const actionTargets = targets.filter((t) => t.name.startsWith('action-'));
/** The host command ships committed too: the agent bundle installs it on each Spark. */
const committedTargets = [...actionTargets, ...targets.filter((t) => t.name === 'preflight')];
let tmp: { dir: string; cleanup: () => void };

beforeAll(() => {
  tmp = tempDir('spark-dist-');
});
afterAll(() => tmp.cleanup());

describe('committed bundles (actions and the host preflight command)', () => {
  it('has one build target per action', () => {
    expect(actionTargets.map((t) => t.outfile).sort()).toEqual([
      'actions/commit-binding/dist/index.mjs',
      'actions/lease-preflight/dist/index.mjs',
      'actions/spark-test/dist/index.mjs',
    ]);
  });

  for (const t of committedTargets) {
    it(`${t.outfile} matches a fresh build of ${t.entry}`, async () => {
      const fresh = join(tmp.dir, `${t.name}.mjs`);
      await buildTarget(t, fresh);
      const committed = readFileSync(join(repoRoot, t.outfile), 'utf8');
      const rebuilt = readFileSync(fresh, 'utf8');
      // compare sizes first for a readable failure, then the bytes
      expect(committed.length, `${t.outfile} is stale: run npm run build -- ${t.name}`).toBe(rebuilt.length);
      expect(
        committed === rebuilt,
        `${t.outfile} differs from a fresh build: run npm run build -- ${t.name}`,
      ).toBe(true);
    });
  }
});
