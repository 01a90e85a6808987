import { defineConfig } from 'vitest/config';
import { SlowFirstSequencer } from './test/setup/slow-first-sequencer.ts';

export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Integration and e2e tests start real processes and share 2 cores; keep the pool small.
    maxWorkers: 2,
    // longest files first, also on a checkout without vitest's results cache (CI)
    sequence: { sequencer: SlowFirstSequencer },
    reporters: ['default'],
    projects: [
      {
        extends: true,
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
          // Pure tests of core/, agent/ and cli/ functions: one worker process runs file after file
          // with the modules it has loaded, instead of a fresh process and module graph per file
          // (~0.5 s each, 38 files). Their shared helper state is reset per test (admission-fixtures'
          // `resetSeq`); anything that reaches the ledger, servers or a fleet stays isolated below.
          isolate: false,
          // pure: no child process, no server (`npm run test:fast` is this project and `model`)
          setupFiles: ['test/setup/no-processes.ts'],
        },
      },
      {
        extends: true,
        test: {
          name: 'model',
          include: ['test/model/**/*.test.ts'],
          // the pure model-based admission test; its ledger-level twin is in `system`
          setupFiles: ['test/setup/no-processes.ts'],
        },
      },
      {
        extends: true,
        test: {
          name: 'system',
          // Files run one after another in a reused worker with the modules it has loaded (~1.3 s of
          // CPU per file saved on importing them again): docs/adr/0345-system-tests-share-their-workers.md.
          // A file ends what it starts (servers, processes, timers) in its own hooks.
          isolate: false,
          include: ['test/**/*.test.ts'],
          exclude: ['test/unit/**', 'test/model/**'],
          // builds the agent bundle once per run (the e2e fleet runs the file that ships), the
          // controller's bundle the harness and process tests start (docs/adr/0255-controller-bundle-for-tests.md),
          // and the sparkctl bundle the CLI and MCP tests run
          globalSetup: [
            'test/setup/agent-bundle.ts',
            'test/setup/controller-bundle.ts',
            'test/setup/sparkctl-bundle.ts',
          ],
          // SPARK_TEST_CPU_LOG=<file>: each file's wall and CPU seconds, its child processes included
          setupFiles: ['test/setup/file-cpu.ts'],
        },
      },
    ],
  },
});
