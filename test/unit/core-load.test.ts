import { describe, expect, it } from 'vitest';

/**
 * Every core module loads: its schemas and tables are built at import time, and an invalid one
 * (say a discriminated-union option without its discriminator) throws there. Imported inside a
 * test, so such a failure is a failing test, not a file that silently reports no tests.
 */
// literal paths, so `vitest related` (which StrykerJS uses) links each module to this file
const MODULES: [string, () => Promise<Record<string, unknown>>][] = [
  ['admission', () => import('../../core/admission.ts')],
  ['config', () => import('../../core/config.ts')],
  ['events', () => import('../../core/events.ts')],
  ['model', () => import('../../core/model.ts')],
  ['state-machines', () => import('../../core/state-machines.ts')],
  ['protocol/agent', () => import('../../core/protocol/agent.ts')],
  ['protocol/api', () => import('../../core/protocol/api.ts')],
  ['protocol/receipt', () => import('../../core/protocol/receipt.ts')],
];

describe('core modules', () => {
  for (const [name, load] of MODULES) {
    it(`loads core/${name}`, async () => {
      expect(Object.keys(await load()).length).toBeGreaterThan(0);
    });
  }
});
