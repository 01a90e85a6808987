import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // builds the agent bundle once per run (the e2e fleet runs the file that ships)
    globalSetup: ['test/setup/agent-bundle.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Integration and e2e tests start real processes and share 2 cores; keep the pool small.
    maxWorkers: 2,
    reporters: ['default'],
  },
});
