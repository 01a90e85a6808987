import { describe, expect, it } from 'vitest';
import {
  describeEta,
  type EtaInput,
  estimateQueue,
  type OccupancySample,
  occupancyStats,
} from '../../core/eta.ts';
import {
  medianAbsErrorMin,
  midpoint,
  rangeCoverage,
  replay,
  syntheticTrace,
} from '../../scripts/sim/harness/eta-replay.ts';

const MIN = 60_000;
const now = 1_000 * MIN;

const merge = (heldS: number): OccupancySample => ({
  kind: 'merge',
  topology: 'single',
  suite: 'smoke',
  heldS,
});
/** 20 finished merge runs, 10 to 29 minutes: quartiles ≈ 14.75 and 24.25 min. */
const history = Array.from({ length: 20 }, (_, i) => merge((10 + i) * 60));

function input(over: Partial<EtaInput>): EtaInput {
  return {
    now,
    hosts: [
      { id: 'spark-1', schedulable: true },
      { id: 'spark-2', schedulable: true },
    ],
    active: [],
    queue: [],
    stats: occupancyStats(history, 1200),
    ...over,
  };
}

const q = (id: string, over: Partial<EtaInput['queue'][number]> = {}) => ({
  id,
  kind: 'merge' as const,
  topology: 'single' as const,
  suite: 'smoke' as const,
  targetHost: null,
  ...over,
});

describe('queue ETA estimator (core/eta.ts)', () => {
  it('learns occupancy per class and falls back to kind, all history, then the default', () => {
    const stats = occupancyStats(
      [...history, ...Array.from({ length: 6 }, () => ({ ...merge(60), kind: 'manual' as const }))],
      1200,
    );
    expect(stats({ kind: 'merge', topology: 'single', suite: 'smoke' })).toMatchObject({
      basis: 'class',
      samples: 20,
    });
    expect(stats({ kind: 'merge', topology: 'single', suite: 'performance' })).toMatchObject({
      basis: 'kind',
    });
    expect(stats({ kind: 'benchmark', topology: 'pair', suite: null })).toMatchObject({
      basis: 'all',
      samples: 26,
    });
    const empty = occupancyStats([], 1200)({ kind: 'merge', topology: 'single', suite: null });
    expect(empty).toMatchObject({ basis: 'default', midS: 1200 });
    expect(empty.loS).toBeLessThan(empty.hiS);
  });

  it('starts free hosts now and queues the rest behind the active work, as a range', () => {
    const etas = estimateQueue(
      input({
        active: [{ ...q('a'), hostIds: ['spark-1'], grantedAt: now - 5 * MIN, expiresAt: null }],
        queue: [q('r-1'), q('r-2'), q('r-3')],
      }),
    );
    expect(etas.map((e) => e.position)).toEqual([1, 2, 3]);
    // r-1 takes the free spark-2 at once
    expect(etas[0]!.startLo).toBe(now);
    // r-2 waits for spark-1: granted 5 min ago, a merge holds a host ~14.75–24.25 min
    expect((etas[1]!.startLo! - now) / MIN).toBeCloseTo(9.75, 1);
    expect((etas[1]!.startHi! - now) / MIN).toBeCloseTo(19.25, 1);
    // r-3 waits for whichever frees next
    expect(etas[2]!.startLo!).toBeGreaterThan(etas[1]!.startLo!);
    for (const e of etas) expect(e.startHi!).toBeGreaterThanOrEqual(e.startLo!);
    expect(describeEta(etas[1]!, now)).toBe('starts in ~10–19 min');
  });

  it('holds the first free host for a pair and makes the work behind it wait (rule 3)', () => {
    const etas = estimateQueue(
      input({
        active: [{ ...q('a'), hostIds: ['spark-1'], grantedAt: now, expiresAt: null }],
        queue: [q('pair', { topology: 'pair' }), q('single')],
      }),
    );
    // spark-2 is free now, but the pair needs spark-1 too, and the single comes after the pair
    expect(etas[0]!.startLo).toBeGreaterThan(now);
    expect(etas[1]!.startLo!).toBeGreaterThan(etas[0]!.startLo!);
  });

  it('a targeted request waits for its host; a development lease runs to its expiry at most', () => {
    const etas = estimateQueue(
      input({
        active: [
          {
            kind: 'development',
            topology: 'single',
            suite: null,
            hostIds: ['spark-1'],
            grantedAt: now - 60 * MIN,
            expiresAt: now + 30 * MIN,
          },
        ],
        queue: [q('dev', { kind: 'development', targetHost: 'spark-1' })],
      }),
    );
    // no development history: the default (20 min) is already past, so it ends "soon", never past its expiry
    expect(etas[0]!.startLo).toBeGreaterThan(now);
    // with no development history the long bound is the lease's end
    expect(etas[0]!.startHi).toBe(now + 30 * MIN);
  });

  it('says why nothing starts when no host can run the work', () => {
    const offline = estimateQueue(
      input({
        hosts: [
          { id: 'spark-1', schedulable: false },
          { id: 'spark-2', schedulable: false },
        ],
        queue: [q('r-1'), q('r-2', { targetHost: 'spark-9' })],
      }),
    );
    expect(offline[0]).toMatchObject({
      startLo: null,
      blocked: 'no host is online: install or adopt an agent',
    });
    expect(offline[1]!.blocked).toBe('spark-9 is not a configured host');
    expect(describeEta(offline[0]!, now)).toBe(
      'cannot start yet: no host is online: install or adopt an agent',
    );
    const one = estimateQueue(
      input({
        hosts: [
          { id: 'spark-1', schedulable: true },
          { id: 'spark-2', schedulable: false },
        ],
        queue: [q('p', { topology: 'pair' })],
      }),
    );
    expect(one[0]!.blocked).toBe('needs 2 online hosts, 1 online');
  });

  it('names the states of online hosts that are held out, instead of "install an agent"', () => {
    const held = estimateQueue(
      input({
        hosts: [
          { id: 'spark-1', schedulable: false, state: 'quarantined' },
          { id: 'spark-2', schedulable: false, state: 'release-required' },
        ],
        queue: [q('r-1')],
      }),
    );
    expect(describeEta(held[0]!, now)).toBe(
      'cannot start yet: no host can take work now: spark-1 quarantined, spark-2 release-required',
    );
    const dark = estimateQueue(
      input({
        hosts: [
          { id: 'spark-1', schedulable: false, state: 'offline' },
          { id: 'spark-2', schedulable: false, state: 'unknown' },
        ],
        queue: [q('r-1')],
      }),
    );
    expect(dark[0]!.blocked).toBe('no host is online: install or adopt an agent');
    const pair = estimateQueue(
      input({
        hosts: [
          { id: 'spark-1', schedulable: false, state: 'quarantined' },
          { id: 'spark-2', schedulable: true, state: 'idle' },
        ],
        queue: [q('p', { topology: 'pair' })],
      }),
    );
    expect(pair[0]!.blocked).toBe('needs 2 hosts, 1 can take work (spark-1 quarantined)');
  });

  it('words the range for people', () => {
    expect(describeEta({ startLo: now, startHi: now + 10_000, blocked: null }, now)).toBe('should start now');
    expect(describeEta({ startLo: now + 12 * MIN, startHi: now + 20 * MIN, blocked: null }, now)).toBe(
      'starts in ~12–20 min',
    );
    expect(describeEta({ startLo: now + 5 * MIN, startHi: now + 5 * MIN, blocked: null }, now)).toBe(
      'starts in ~5 min',
    );
    expect(describeEta({ startLo: now + 100 * MIN, startHi: now + 200 * MIN, blocked: null }, now)).toBe(
      'starts in ~1.7–3.3 h',
    );
    expect(describeEta({ startLo: now + 30 * MIN, startHi: now + 200 * MIN, blocked: null }, now)).toBe(
      'starts in ~30 min–3.3 h',
    );
  });
});

describe('queue ETA against replayed history', () => {
  it('beats both naive baselines, and its range holds the real start at a stated rate', () => {
    // under StrykerJS every ETA mutant runs this replay: one seed finds what three find, in a third
    // of the time (npm test keeps all three)
    for (const seed of process.env.SPARK_MUTATION === '1' ? [7] : [7, 11, 23]) {
      const obs = replay(syntheticTrace(1200, seed, 12), 3);
      const eta = medianAbsErrorMin(obs, midpoint);
      const naiveWait = medianAbsErrorMin(obs, (o) => o.naiveMedianWait);
      const naivePos = medianAbsErrorMin(obs, (o) => o.naivePosition);
      const coverage = rangeCoverage(obs);
      const report = { seed, observations: obs.length, eta, naiveWait, naivePos, coverage };
      console.log(`eta replay ${JSON.stringify(report)}`);
      expect(obs.length, JSON.stringify(report)).toBeGreaterThan(1000);
      expect(eta, JSON.stringify(report)).toBeLessThan(naiveWait);
      expect(eta, JSON.stringify(report)).toBeLessThan(naivePos);
      // measured 0.30–0.34 at these seeds: the range spans duration spread only, and later
      // higher-priority arrivals (which no estimate can know) push work past it
      expect(coverage, JSON.stringify(report)).toBeGreaterThan(0.25);
    }
  });
});
