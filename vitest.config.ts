import { defineConfig } from 'vitest/config';
import { SlowFirstSequencer } from './test/setup/slow-first-sequencer.ts';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // builds the agent bundle once per run (the e2e fleet runs the file that ships)
    globalSetup: ['test/setup/agent-bundle.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Integration and e2e tests start real processes and share 2 cores; keep the pool small.
    maxWorkers: 2,
    // longest files first, also on a checkout without vitest's results cache (CI)
    sequence: { sequencer: SlowFirstSequencer },
    reporters: ['default'],
  },
});
