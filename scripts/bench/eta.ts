import {
  medianAbsErrorMin,
  midpoint,
  rangeCoverage,
  replay,
  syntheticTrace,
} from '../sim/harness/eta-replay.ts';
import type { BenchRunner } from './types.ts';

/**
 * `npm run bench -- eta`: the queue ETA's error against replayed history. Replays
 * synthetic weeks of queue history on three hosts at two loads and reports the median absolute
 * error of the estimate's midpoint, the share of real starts inside the estimated range, and two
 * naive baselines (median wait so far; position × mean occupancy ÷ hosts).
 */
interface SeedResult {
  seed: number;
  observations: number;
  etaMedianAbsErrorMin: number;
  naiveMedianWaitErrorMin: number;
  naivePositionErrorMin: number;
  rangeCoverage: number;
}

export const run: BenchRunner = async (progress) => {
  const rows: { metric: string; value: string; target?: string; met?: boolean }[] = [];
  const json: Record<string, unknown> = {};
  for (const [label, gapMin] of [
    ['moderate load (1 request / 12 min)', 12],
    ['busy load (1 request / 10 min)', 10],
  ] as const) {
    const perSeed: SeedResult[] = [];
    for (const seed of [1, 2, 3]) {
      progress(`${label}: replaying seed ${seed}`);
      const obs = replay(syntheticTrace(2000, seed, gapMin), 3);
      perSeed.push({
        seed,
        observations: obs.length,
        etaMedianAbsErrorMin: medianAbsErrorMin(obs, midpoint),
        naiveMedianWaitErrorMin: medianAbsErrorMin(obs, (o) => o.naiveMedianWait),
        naivePositionErrorMin: medianAbsErrorMin(obs, (o) => o.naivePosition),
        rangeCoverage: rangeCoverage(obs),
      });
    }
    const avg = (k: Exclude<keyof SeedResult, 'seed'>) =>
      perSeed.reduce((a, s) => a + s[k], 0) / perSeed.length;
    const eta = avg('etaMedianAbsErrorMin');
    const naive = Math.min(avg('naiveMedianWaitErrorMin'), avg('naivePositionErrorMin'));
    json[`gap${gapMin}min`] = perSeed;
    rows.push(
      {
        metric: `ETA median |error|, ${label}`,
        value: `${eta.toFixed(1)} min`,
        target: `< best naive baseline (${naive.toFixed(1)} min)`,
        met: eta < naive,
      },
      {
        metric: `ETA range holds the real start, ${label}`,
        value: `${(avg('rangeCoverage') * 100).toFixed(0)} %`,
      },
    );
  }
  return { key: 'eta', json, rows };
};
