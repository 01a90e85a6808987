import { readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { backoffMs } from '../../agent/loops/backoff.ts';
import { emptyState, loadState, saveState } from '../../agent/state-file.ts';
import { tempDir } from '../../scripts/sim/ledger.ts';

describe('agent state file', () => {
  it('starts empty, round-trips, and leaves no temp file behind', () => {
    const { dir, cleanup } = tempDir();
    try {
      const file = join(dir, 'state', 'agent.json');
      expect(loadState(file)).toEqual(emptyState());
      const s = {
        ...emptyState(),
        maxFencingToken: 7,
        restore: { fencingToken: 7, attempt: 1, startedAt: 5 },
      };
      saveState(file, s);
      expect(loadState(file)).toEqual(s);
      expect(readdirSync(join(dir, 'state'))).toEqual(['agent.json']);
    } finally {
      cleanup();
    }
  });

  it('refuses a corrupt state file with a message naming it', () => {
    const { dir, cleanup } = tempDir();
    try {
      const file = join(dir, 'agent.json');
      writeFileSync(file, JSON.stringify({ v: 1, maxFencingToken: -1, lease: null, restore: null }));
      expect(() => loadState(file)).toThrow(`agent state file ${file} is not valid`);
    } finally {
      cleanup();
    }
  });
});

describe('reconnect backoff', () => {
  it('stays within [ceiling/2, ceiling] and never exceeds the cap (full jitter, bounded)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 100 }),
        fc.integer({ min: 1000, max: 60_000 }),
        (failures, cap) => {
          const ceiling = Math.min(cap, 500 * 2 ** Math.min(failures, 16));
          const d = backoffMs(failures, cap);
          return d >= Math.floor(ceiling / 2) && d <= ceiling;
        },
      ),
    );
  });
});
