import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  adopt,
  artifacts,
  cargoHome,
  type LaneDirs,
  type LaneRecord,
  laneEnv,
  laneRecord,
  leaseDirs,
  prewarm,
  requireDebianRust,
  runLane,
} from '../sim/harness/lanes.ts';
import type { BenchRunner, BenchSection } from './types.ts';

/**
 * `npm run bench -- lanes`: cold and warm builds of the Butter and Iron lanes (docs/in-job.md
 * "Warm builds"). Each project's performance lane runs three times on its fixture workspace
 * (scripts/sim/fixtures/lanes/) with Debian's cargo and one shared build cache (SPARK_BUILD_CACHE_DIR):
 * first in a new checkout with an empty cache (cold), then in another new checkout (the next
 * lease: new path, new file times), then again in that checkout (a re-run). The build step is the
 * sum of the lane's `cargo … --no-run` steps, from its spark-lane.json. The target: the second
 * build takes at most 25 % of the cold one. A new checkout rebuilds the workspace's own crates
 * (cargo's freshness is by file time, docs/adr/0157-per-repository-build-cache.md), so the next lease saves the dependencies' share;
 * a re-run in the same checkout compiles nothing. The machine's load is reported beside the cold
 * build: the times are wall-clock.
 */

const MODEL = 'nvidia/Qwen3.8-27B-NVFP4';

const buildMs = (r: LaneRecord) =>
  r.steps.filter((s) => s.name.startsWith('build:')).reduce((a, s) => a + s.ms, 0);
const s1 = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

async function lane(
  project: 'butter' | 'iron',
  root: string,
  home: string,
  cache: string,
  checkout?: string,
): Promise<{ checkout: string; d: LaneDirs; rec: LaneRecord }> {
  const d = leaseDirs(root, cache);
  const dir = checkout ?? join(root, project);
  if (!checkout) adopt(project, dir);
  if (project === 'butter') prewarm(d.models, MODEL, 'c0ffee'.padEnd(40, '0'), { _name_or_path: MODEL });
  const r = await runLane(dir, ['single'], laneEnv('performance', d, home));
  if (r.code !== 0) throw new Error(`${project} lane exited ${r.code}: ${r.stderr.slice(-400)}`);
  return { checkout: dir, d, rec: laneRecord(d) };
}

export const run: BenchRunner = async (progress) => {
  const toolchain = requireDebianRust();
  const sections: BenchSection[] = [];
  for (const project of ['iron', 'butter'] as const) {
    const tmp = mkdtempSync(join(tmpdir(), `spark-bench-lanes-${project}-`));
    try {
      cargoHome(join(tmp, 'cargo'));
      const cache = join(tmp, 'build-cache');
      mkdirSync(cache);
      const load = loadavg()[0]!;
      progress(`${project}: cold (new checkout, empty build cache)`);
      const cold = await lane(project, join(tmp, 'lease-1'), tmp, cache);
      progress(`${project}: next lease (new checkout, same build cache)`);
      const warm = await lane(project, join(tmp, 'lease-2'), tmp, cache);
      progress(`${project}: re-run (same checkout)`);
      const rerun = await lane(project, join(tmp, 'lease-3'), tmp, cache, warm.checkout);
      const [c, w, r] = [cold, warm, rerun].map((x) => buildMs(x.rec)) as [number, number, number];
      const depsReused = warm.rec.steps
        .filter((s) => s.name.startsWith('build:'))
        .flatMap((s) => artifacts(warm.d, s.name.slice('build:'.length)))
        .filter((u) => !u.packageId.includes('path+file://'))
        .every((u) => u.fresh);
      const ratio = w / c;
      sections.push({
        key: `lanes_${project}`,
        json: {
          toolchain,
          loadAverage1m: load,
          cold: cold.rec,
          nextLease: warm.rec,
          rerun: rerun.rec,
          buildMs: { cold: c, nextLease: w, rerun: r },
          nextLeaseOverCold: ratio,
          dependenciesReusedInNextLease: depsReused,
        },
        rows: [
          {
            metric: `${project} performance lane: build step, cold`,
            value: `${s1(c)} (load ${load.toFixed(1)} on ${cpus().length} cores)`,
          },
          {
            metric: `${project}: build step, next lease (warm cache, new checkout)`,
            value: `${s1(w)} (${(ratio * 100).toFixed(0)} %)`,
            target: '≤ 25 % of cold',
            met: ratio <= 0.25,
          },
          {
            metric: `${project}: build step, re-run in the same checkout`,
            value: `${s1(r)} (${((r / c) * 100).toFixed(0)} %)`,
            target: '≤ 25 % of cold',
            met: r / c <= 0.25,
          },
          {
            metric: `${project}: next lease reused every dependency`,
            value: depsReused ? 'yes' : 'no',
            target: 'yes',
            met: depsReused,
          },
        ],
      });
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  }
  return sections;
};
