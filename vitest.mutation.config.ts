import { defineConfig } from 'vitest/config';

/**
 * The tests StrykerJS runs for every mutant of `core/` (`npm run test:mutation`): the unit tests
 * and the pure model-based admission test. No ledger, no servers, so a mutant run is fast on two
 * shared cores; the ledger-level model test covers the same rules against libSQL in `npm test`.
 */
export default defineConfig({
  test: {
    include: ['test/unit/**/*.test.ts', 'test/model/**/*.test.ts'],
    // exercises agent/ with real files, not core/ (the agent tests with real processes are in
    // test/integration: test/unit starts none, test/setup/no-processes.ts)
    exclude: ['test/unit/agent-state.test.ts'],
    testTimeout: 60_000,
    // a killed mutant needs one failing case, not a shrunk one: skip fast-check's shrinking
    // and 150 model sequences find what 300 find in practice (each admission mutant runs them)
    env: { SPARK_MUTATION: '1', SPARK_MODEL_RUNS: '150' },
    maxWorkers: 1,
  },
});
