import { describe, expect, it } from 'vitest';
import {
  describeEta,
  type EtaActive,
  type EtaInput,
  estimateQueue,
  type OccupancySample,
  occupancyStats,
} from '../../core/eta.ts';

/**
 * The queue ETA's rules as a maintainer reads them in a queued check ("starts in ~12–20 min",
 * "cannot start yet: …"): what history counts, how running work is expected to end, when a lease
 * TTL bounds it, and how a range is worded at each unit boundary.
 */

const S = 1000;
const MIN = 60 * S;
const now = 1_000 * MIN;

const sample = (heldS: number, over: Partial<OccupancySample> = {}): OccupancySample => ({
  kind: 'merge',
  topology: 'single',
  suite: 'smoke',
  heldS,
  ...over,
});
/** 20 merge runs of 10 to 29 minutes: quartiles 14.75 and 24.25 min, median 19.5 min. */
const merges = Array.from({ length: 20 }, (_, i) => sample((10 + i) * 60));

const q = (id: string, over: Partial<EtaInput['queue'][number]> = {}) => ({
  id,
  kind: 'merge' as const,
  topology: 'single' as const,
  suite: 'smoke' as const,
  targetHost: null,
  ...over,
});

const active = (over: Partial<EtaActive> = {}): EtaActive => ({
  kind: 'merge',
  topology: 'single',
  suite: 'smoke',
  hostIds: ['spark-1'],
  grantedAt: now,
  expiresAt: null,
  ...over,
});

function oneHost(over: Partial<EtaInput>): EtaInput {
  return {
    now,
    hosts: [{ id: 'spark-1', schedulable: true }],
    active: [],
    queue: [q('r-1')],
    stats: occupancyStats(merges, 1200),
    ...over,
  };
}

describe('occupancy history', () => {
  it('a new ledger uses the default: half of it, it, and one and a half times it', () => {
    expect(occupancyStats([], 1200)({ kind: 'merge', topology: 'single', suite: 'smoke' })).toEqual({
      loS: 600,
      midS: 1200,
      hiS: 1800,
      samples: 0,
      basis: 'default',
    });
  });

  it('a class needs five samples of its own; with four it borrows from its kind', () => {
    const four = Array.from({ length: 4 }, () => sample(60, { suite: 'performance' }));
    const stats = occupancyStats([...merges, ...four], 1200);
    expect(stats({ kind: 'merge', topology: 'single', suite: 'performance' })).toMatchObject({
      basis: 'kind',
      samples: 24,
    });
    const five = [...four, sample(60, { suite: 'performance' })];
    expect(
      occupancyStats([...merges, ...five], 1200)({ kind: 'merge', topology: 'single', suite: 'performance' }),
    ).toEqual({ loS: 60, midS: 60, hiS: 60, samples: 5, basis: 'class' });
  });

  it('work without a suite (benchmarks, development) is a class of its own', () => {
    const bench = Array.from({ length: 5 }, (_, i) =>
      sample(600 * (i + 1), { kind: 'benchmark', suite: null }),
    );
    const other = Array.from({ length: 5 }, () => sample(60, { kind: 'benchmark', suite: 'smoke' }));
    const stats = occupancyStats([...bench, ...other], 1200);
    expect(stats({ kind: 'benchmark', topology: 'single', suite: null })).toEqual({
      loS: 1200,
      midS: 1800,
      hiS: 2400,
      samples: 5,
      basis: 'class',
    });
  });

  it('a broken record (negative, NaN or infinite) is not a sample; a zero-second run is', () => {
    const bad = [
      sample(-5),
      sample(Number.NaN),
      sample(Number.POSITIVE_INFINITY),
      sample(Number.NEGATIVE_INFINITY),
    ];
    const stats = occupancyStats([...bad, ...Array.from({ length: 4 }, () => sample(600)), sample(0)], 1200);
    expect(stats({ kind: 'merge', topology: 'single', suite: 'smoke' })).toEqual({
      loS: 600,
      midS: 600,
      hiS: 600,
      samples: 5,
      basis: 'class',
    });
  });
});

describe('when running work is expected to end', () => {
  it('work already past its short quantile ends "soon" (a tenth of its median), never now', () => {
    // default stats: short 600 s, median 1200 s; granted exactly 600 s ago
    const etas = estimateQueue(
      oneHost({ stats: occupancyStats([], 1200), active: [active({ grantedAt: now - 600 * S })] }),
    );
    expect(etas[0]).toMatchObject({ startLo: now + 120 * S, startHi: now + 1200 * S, blocked: null });
  });

  it('the range never ends before it starts, even when the short guess already overran', () => {
    // granted 24 min ago: past the 14.75-min quartile (ends in ~1.95 min), 15 s before the 24.25-min one
    const etas = estimateQueue(oneHost({ active: [active({ grantedAt: now - 24 * MIN })] }));
    expect(etas[0]!.startLo).toBe(now + 117 * S);
    expect(etas[0]!.startHi).toBe(now + 117 * S);
    expect(describeEta(etas[0]!, now)).toBe('starts in ~2 min');
  });

  it('a lease TTL caps how long known work is expected to hold its host', () => {
    const etas = estimateQueue(oneHost({ active: [active({ expiresAt: now + 20 * MIN })] }));
    // short quartile 14.75 min is inside the TTL; the long one (24.25 min) is cut to the expiry
    expect(etas[0]).toMatchObject({ startLo: now + 14.75 * MIN, startHi: now + 20 * MIN });
  });

  it('a far-off TTL does not stretch known work past its history', () => {
    const etas = estimateQueue(oneHost({ active: [active({ expiresAt: now + 4 * 60 * MIN })] }));
    expect(etas[0]).toMatchObject({ startLo: now + 14.75 * MIN, startHi: now + 24.25 * MIN, basis: 'class' });
  });

  it('a lease of a kind with no history: the short guess is the default, the long one its expiry', () => {
    const etas = estimateQueue(
      oneHost({
        stats: occupancyStats([], 1200),
        active: [active({ kind: 'development', suite: null, expiresAt: now + 3 * 60 * MIN })],
      }),
    );
    expect(etas[0]).toMatchObject({ startLo: now + 600 * S, startHi: now + 3 * 60 * MIN, basis: 'default' });
    // with history only for other kinds ('all'), the same holds
    const other = estimateQueue(
      oneHost({ active: [active({ kind: 'development', suite: null, expiresAt: now + 3 * 60 * MIN })] }),
    );
    expect(other[0]).toMatchObject({ startLo: now + 14.75 * MIN, startHi: now + 3 * 60 * MIN });
  });

  it('work of a kind with no history and no TTL follows the default, not "now"', () => {
    const etas = estimateQueue(
      oneHost({ stats: occupancyStats([], 1200), active: [active({ kind: 'manual', suite: null })] }),
    );
    expect(etas[0]).toMatchObject({ startLo: now + 600 * S, startHi: now + 1800 * S });
  });

  it('work on a host held out of scheduling does not make that host usable', () => {
    const etas = estimateQueue({
      now,
      hosts: [
        { id: 'spark-1', schedulable: true },
        { id: 'spark-2', schedulable: false, state: 'release-required' },
      ],
      active: [active({ hostIds: ['spark-2'] })],
      queue: [q('r-1', { topology: 'pair' }), q('r-2', { targetHost: 'spark-2' })],
      stats: occupancyStats(merges, 1200),
    });
    expect(etas.map((e) => [e.startLo, e.startHi, e.blocked])).toEqual([
      [null, null, 'needs 2 hosts, 1 can take work (spark-2 release-required)'],
      [null, null, 'spark-2 is offline or not adopted'],
    ]);
  });
});

describe('why a request cannot start', () => {
  it('a request that can start carries no reason', () => {
    const etas = estimateQueue(oneHost({}));
    expect(etas[0]).toEqual({
      id: 'r-1',
      position: 1,
      startLo: now,
      startHi: now,
      blocked: null,
      basis: 'class',
    });
  });

  it('a request naming a configured host that is down says so, not "not a configured host"', () => {
    const etas = estimateQueue({
      now,
      hosts: [
        { id: 'spark-1', schedulable: true },
        { id: 'spark-2', schedulable: false },
      ],
      active: [],
      queue: [q('r-1', { targetHost: 'spark-2' }), q('r-2', { targetHost: 'spark-7' })],
      stats: occupancyStats(merges, 1200),
    });
    expect(etas.map((e) => e.blocked)).toEqual([
      'spark-2 is offline or not adopted',
      'spark-7 is not a configured host',
    ]);
    expect(describeEta(etas[0]!, now)).toBe('cannot start yet: spark-2 is offline or not adopted');
  });

  it('held-out hosts are named by state; hosts that are merely offline are not "held"', () => {
    const hosts = (...more: EtaInput['hosts']) => [
      { id: 'spark-1', schedulable: false, state: 'quarantined' },
      { id: 'spark-3', schedulable: false, state: 'offline' },
      { id: 'spark-4', schedulable: false, state: 'unknown' },
      ...more,
    ];
    const all = estimateQueue(oneHost({ hosts: hosts({ id: 'spark-5', schedulable: false }) }));
    expect(all[0]!.blocked).toBe(
      'no host can take work now: spark-1 quarantined, spark-3 offline, spark-4 unknown, spark-5 offline',
    );
    const pair = estimateQueue(
      oneHost({
        hosts: hosts(
          { id: 'spark-2', schedulable: true, state: 'idle' },
          { id: 'spark-5', schedulable: false },
          { id: 'spark-6', schedulable: false, state: 'release-required' },
        ),
        queue: [q('p', { topology: 'pair' })],
      }),
    );
    expect(pair[0]!.blocked).toBe(
      'needs 2 hosts, 1 can take work (spark-1 quarantined, spark-6 release-required)',
    );
    const dark = estimateQueue(
      oneHost({
        hosts: [
          { id: 'spark-2', schedulable: true, state: 'idle' },
          { id: 'spark-3', schedulable: false, state: 'offline' },
          { id: 'spark-4', schedulable: false, state: 'unknown' },
          { id: 'spark-5', schedulable: false },
        ],
        queue: [q('p', { topology: 'pair' })],
      }),
    );
    expect(dark[0]!.blocked).toBe('needs 2 online hosts, 1 online');
  });

  it('with no reason given the text still says what is missing', () => {
    expect(describeEta({ startLo: null, startHi: null, blocked: null }, now)).toBe(
      'cannot start yet: no eligible host',
    );
  });
});

describe('wording at the unit boundaries', () => {
  const say = (loS: number, hiS: number) =>
    describeEta({ startLo: now + loS * S, startHi: now + hiS * S, blocked: null }, now);

  it('under 30 s is "now"; 30 s reads as a minute', () => {
    expect(say(0, 29)).toBe('should start now');
    expect(say(30, 30)).toBe('starts in ~1 min');
  });

  it('up to 90 minutes in minutes; from 90 minutes in hours', () => {
    expect(say(89 * 60, 89 * 60)).toBe('starts in ~89 min');
    expect(say(90 * 60, 90 * 60)).toBe('starts in ~1.5 h');
    expect(say(90 * 60, 3 * 3600)).toBe('starts in ~1.5–3 h');
  });

  it('a start under 90 s in a long range reads as at least a minute', () => {
    expect(say(10, 2 * 3600)).toBe('starts in ~1 min–2 h');
    expect(say(80, 2 * 3600)).toBe('starts in ~1 min–2 h');
  });

  it('tenths of an hour below 10 h, whole hours from 10 h', () => {
    expect(say(2 * 3600, 9.96 * 3600)).toBe('starts in ~2–10 h');
    expect(say(2 * 3600, 12.34 * 3600)).toBe('starts in ~2–12 h');
    expect(say(2 * 3600, 9.5 * 3600)).toBe('starts in ~2–9.5 h');
  });
});
