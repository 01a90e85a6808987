import { describe, expect, it } from 'vitest';

/**
 * Every core module loads: its schemas and tables are built at import time, and an invalid one
 * (say a discriminated-union option without its discriminator) throws there. Imported inside a
 * test, so such a failure is a failing test, not a file that silently reports no tests.
 */
// literal paths, so `vitest related` (which StrykerJS uses) links each module to this file
const MODULES: [string, () => Promise<Record<string, unknown>>][] = [
  ['admission', () => import('../../core/admission.ts')],
  ['admission-budgets', () => import('../../core/admission-budgets.ts')],
  ['admission-fleet', () => import('../../core/admission-fleet.ts')],
  ['admission-leases', () => import('../../core/admission-leases.ts')],
  ['admission-plan', () => import('../../core/admission-plan.ts')],
  ['admission-queue', () => import('../../core/admission-queue.ts')],
  ['config', () => import('../../core/config.ts')],
  ['config-lookups', () => import('../../core/config-lookups.ts')],
  ['config-schema', () => import('../../core/config-schema.ts')],
  ['config-sections', () => import('../../core/config-sections.ts')],
  ['errors', () => import('../../core/errors.ts')],
  ['eta', () => import('../../core/eta.ts')],
  ['events', () => import('../../core/events.ts')],
  ['evidence', () => import('../../core/evidence.ts')],
  ['model', () => import('../../core/model.ts')],
  ['state-machines', () => import('../../core/state-machines.ts')],
  ['time', () => import('../../core/time.ts')],
  ['protocol/agent', () => import('../../core/protocol/agent.ts')],
  ['protocol/api', () => import('../../core/protocol/api.ts')],
  ['protocol/deliveries', () => import('../../core/protocol/deliveries.ts')],
  ['protocol/host-evidence', () => import('../../core/protocol/host-evidence.ts')],
  ['protocol/readiness', () => import('../../core/protocol/readiness.ts')],
  ['protocol/receipt', () => import('../../core/protocol/receipt.ts')],
];

describe('core modules', () => {
  for (const [name, load] of MODULES) {
    it(`loads core/${name}`, async () => {
      expect(Object.keys(await load()).length).toBeGreaterThan(0);
    });
  }
});
