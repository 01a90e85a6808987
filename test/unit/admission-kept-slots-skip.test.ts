import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { budgetSlot, planAdmission } from '../../core/admission.ts';
import type { LeaseRecord, ReservationRecord, ReservationStatus } from '../../core/model.ts';
import { config, host, input, lease, req, resetSeq } from './admission-fixtures.ts';

/**
 * The ledger skips the kept-slot look-up when the open reservations name at most `maxPrs`
 * distinct budget slots (functions/ledger/admission-pass.ts `keptSlotsOf`): a
 * kept slot then cannot change the plan. This checks that claim against the engine itself over
 * random fleets, queues and budgets — and that above the bound kept slots do change plans, so the
 * check is not vacuous.
 */
const statuses: ReservationStatus[] = ['queued', 'queued', 'queued', 'allocated', 'running', 'releasing'];
const kinds = ['manual', 'merge', 'benchmark', 'background', 'development'] as const;

const scenario = fc.record({
  hostCount: fc.integer({ min: 1, max: 5 }),
  maxPrs: fc.integer({ min: 0, max: 4 }),
  maxGpusPerPr: fc.integer({ min: 1, max: 3 }),
  work: fc.array(
    fc.record({
      status: fc.constantFrom(...statuses),
      kind: fc.constantFrom(...kinds),
      pr: fc.option(fc.integer({ min: 1, max: 4 }), { nil: null }),
      sha: fc.constantFrom('a', 'b'),
      pair: fc.boolean(),
    }),
    { maxLength: 9 },
  ),
  kept: fc.array(fc.integer({ min: 0, max: 8 }), { maxLength: 4 }),
});

type Scenario = typeof scenario extends fc.Arbitrary<infer T> ? T : never;

function build(s: Scenario) {
  resetSeq();
  const hosts = Array.from({ length: s.hostCount }, (_, i) => host(`spark-${i + 2}`));
  const reservations: ReservationRecord[] = [];
  const leases: LeaseRecord[] = [];
  let busy = 0;
  for (const w of s.work) {
    const dev = w.kind === 'development';
    // active work holds a host of its own (one lease per host), else it is queued
    const active = w.status !== 'queued' && busy < hosts.length;
    const r = req({
      kind: w.kind,
      status: active ? w.status : 'queued',
      topology: w.pair && !active ? 'pair' : 'single',
      repo: dev ? null : 'acme/iron',
      pr: dev || w.kind !== 'manual' ? null : w.pr,
      headSha: w.sha.repeat(40),
    });
    reservations.push(r);
    if (active) {
      leases.push(lease(r.id, hosts[busy]!.id, 1));
      hosts[busy] = { ...hosts[busy]!, phase: 'allocated' };
      busy++;
    }
  }
  reservations.sort((a, b) => b.priority - a.priority || a.seq - b.seq);
  const queuedSlots = reservations
    .filter((r) => r.status === 'queued')
    .map((r) => budgetSlot(r))
    .filter((x): x is string => x != null);
  const keptSlots = [
    ...new Set(s.kept.map((i: number) => queuedSlots[i % Math.max(1, queuedSlots.length)])),
  ].filter((x): x is string => x !== undefined);
  const openSlots = new Set(reservations.map((r) => budgetSlot(r)).filter((x) => x != null));
  const cfg = config({ budgets: { maxPrs: s.maxPrs, maxGpusPerPr: s.maxGpusPerPr, maxGpus: 100 } });
  return { base: input(hosts, reservations, leases, cfg), keptSlots, openSlots: openSlots.size };
}

describe('kept-slot look-up skipped within the PR budget', () => {
  it('gives the same plan with or without kept slots when open slots ≤ maxPrs', () => {
    let compared = 0;
    let differedAbove = 0;
    fc.assert(
      fc.property(scenario, (s) => {
        const { base, keptSlots, openSlots } = build(s);
        if (keptSlots.length === 0) return;
        const withKept = planAdmission({ ...base, keptSlots });
        const without = planAdmission({ ...base, keptSlots: [] });
        if (openSlots <= s.maxPrs) {
          compared++;
          expect(withKept).toEqual(without);
        } else if (JSON.stringify(withKept) !== JSON.stringify(without)) differedAbove++;
      }),
      { numRuns: 3000, seed: 1301, verbose: true },
    );
    expect(compared).toBeGreaterThan(100);
    // above the bound the look-up matters: the skip is a real condition, not always true
    expect(differedAbove).toBeGreaterThan(0);
  });
});
