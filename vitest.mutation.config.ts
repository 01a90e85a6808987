import { defineConfig } from 'vitest/config';

/**
 * The tests StrykerJS runs for every mutant of `core/` (`npm run test:mutation`): the unit tests
 * and the pure model-based admission test. No ledger, no servers, so a mutant run is fast on two
 * shared cores; the ledger-level model test covers the same rules against libSQL in `npm test`.
 */
export default defineConfig({
  test: {
    include: ['test/unit/**/*.test.ts', 'test/model/**/*.test.ts'],
    // agent and doctor unit tests exercise agent/ (they spawn processes), not core/
    exclude: ['test/unit/agent-*.test.ts', 'test/unit/doctor-*.test.ts'],
    testTimeout: 60_000,
    // a killed mutant needs one failing case, not a shrunk one: skip fast-check's shrinking
    env: { SPARK_MUTATION: '1' },
    maxWorkers: 1,
  },
});
