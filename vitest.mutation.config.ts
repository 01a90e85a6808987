import { defineConfig } from 'vitest/config';

/**
 * The tests StrykerJS runs for the mutants of `core/` (`npm run test:mutation`, see
 * docs/mutation-testing.md): the pure unit tests whose subject is a `core/` module, and the pure
 * model-based admission test. No ledger, no servers, no agent processes, so a mutant run is fast on
 * two shared cores; the ledger-level model test covers the same rules against libSQL in `npm test`.
 * An explicit list, not a glob: a new unit test of `core/` joins it on purpose, and a slow test of
 * `agent/` or `cli/` that merely imports a `core/` module does not slow every mutant down.
 */
export const MUTATION_TESTS = [
  'test/model/admission-model.test.ts',
  'test/unit/admission-boundaries.test.ts',
  'test/unit/admission-development-hosts.test.ts',
  'test/unit/admission-development-pool.test.ts',
  'test/unit/admission-edges.test.ts',
  'test/unit/admission-expiry-drain.test.ts',
  'test/unit/admission-kept-slots-skip.test.ts',
  'test/unit/admission-large-pool.test.ts',
  'test/unit/admission-reasons.test.ts',
  'test/unit/admission-slots-pairs-restores.test.ts',
  'test/unit/admission.test.ts',
  'test/unit/check-run-over-target.test.ts',
  'test/unit/ci-task-config.test.ts',
  'test/unit/ci-task-receipt.test.ts',
  'test/unit/cli-format.test.ts',
  'test/unit/config-error-text.test.ts',
  'test/unit/config-errors.test.ts',
  'test/unit/config-long-repo-names.test.ts',
  'test/unit/config-lookups.test.ts',
  'test/unit/config-sections.test.ts',
  'test/unit/config.test.ts',
  'test/unit/core-errors-time.test.ts',
  'test/unit/core-load.test.ts',
  'test/unit/eta-rules.test.ts',
  'test/unit/eta.test.ts',
  'test/unit/events-grants.test.ts',
  'test/unit/evidence-findings.test.ts',
  'test/unit/evidence-judgment.test.ts',
  'test/unit/executor-per-repo.test.ts',
  'test/unit/github-config.test.ts',
  'test/unit/model-phrases.test.ts',
  'test/unit/protocol-ci-task.test.ts',
  'test/unit/protocol-near-misses.test.ts',
  'test/unit/protocol-operator-views.test.ts',
  'test/unit/protocol-readiness.test.ts',
  'test/unit/protocol-receipt-limits.test.ts',
  'test/unit/protocol.test.ts',
  'test/unit/readiness-requirements.test.ts',
  'test/unit/redact-url.test.ts',
  'test/unit/runner-statuses.test.ts',
  'test/unit/seed-failures-admission.test.ts',
  'test/unit/state-machines-table.test.ts',
  'test/unit/state-machines.test.ts',
  'test/unit/vocabulary.test.ts',
];

export default defineConfig({
  test: {
    include: MUTATION_TESTS,
    testTimeout: 60_000,
    // a killed mutant needs one failing case, not a shrunk one: skip fast-check's shrinking
    // and 150 model sequences find what 300 find in practice (each admission mutant runs them)
    env: { SPARK_MUTATION: '1', SPARK_MODEL_RUNS: '150' },
    maxWorkers: 1,
    // isolate stays on (vitest's default): with `isolate: false` a static mutant (zod schemas and
    // other module-level code) is never active when its module loads, so every one of them
    // "survives" (measured on core/protocol/deliveries.ts: 8 of 8, all killed with isolation)
  },
});
