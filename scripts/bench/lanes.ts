import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import {
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
  runnerCheckout,
} from '../sim/harness/lanes.ts';
import type { BenchRunner, BenchSection } from './types.ts';

/**
 * `npm run bench -- lanes`: cold and warm builds of the Butter and Iron lanes (docs/in-job.md
 * "Warm builds"). Each project's performance lane runs three times on its fixture workspace
 * (scripts/sim/fixtures/lanes/) with Debian's cargo and one shared build cache (SPARK_BUILD_CACHE_DIR),
 * its checkout where a Spark runner puts it (`<runner>/_work/<name>/<name>`, one path in every
 * lease): first a new checkout with an empty cache (cold), then another new checkout of the same
 * commit at that path (the next lease: new files, new times), then again in that checkout (a
 * re-run). The build step is the lane's `cargo … --no-run` steps plus its restoring of source
 * times (docs/adr/0230-warm-builds-by-content.md), from its spark-lane.json; its CPU time (cargo
 * and everything it waited for, and the restore's git and touch) is reported beside the wall
 * time, since other work on the machine stretches the wall time but not the CPU time. The target:
 * the next lease's build step takes at most 25 % of the cold one.
 */

const MODEL = 'nvidia/Qwen3.8-27B-NVFP4';

const builds = (r: LaneRecord) => r.steps.filter((s) => s.name.startsWith('build:'));
const buildMs = (r: LaneRecord) => builds(r).reduce((a, s) => a + s.ms, 0) + (r.sourceTimes.ms ?? 0);
const buildCpuMs = (r: LaneRecord) => builds(r).reduce((a, s) => a + s.cpuMs, 0) + (r.sourceTimes.cpuMs ?? 0);
const compiled = (r: LaneRecord) => builds(r).reduce((a, s) => a + (s.compiled ?? 0), 0);
const s1 = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
const pct = (a: number, b: number) => `${((a / b) * 100).toFixed(0)} %`;

async function lane(
  project: 'butter' | 'iron',
  root: string,
  home: string,
  cache: string,
  checkout: string,
): Promise<{ d: LaneDirs; rec: LaneRecord }> {
  const d = leaseDirs(root, cache);
  if (project === 'butter') prewarm(d.models, MODEL, 'c0ffee'.padEnd(40, '0'), { _name_or_path: MODEL });
  const r = await runLane(checkout, ['single'], laneEnv('performance', d, home));
  if (r.code !== 0) throw new Error(`${project} lane exited ${r.code}: ${r.stderr.slice(-400)}`);
  return { d, rec: laneRecord(d) };
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
      const runner = join(tmp, 'runner');
      const load = loadavg()[0]!;
      progress(`${project}: cold (new checkout, empty build cache)`);
      const cold = await lane(
        project,
        join(tmp, 'lease-1'),
        tmp,
        cache,
        runnerCheckout(project, runner).checkout,
      );
      progress(`${project}: next lease (new checkout at the same path, same build cache)`);
      const { checkout } = runnerCheckout(project, runner);
      const warm = await lane(project, join(tmp, 'lease-2'), tmp, cache, checkout);
      progress(`${project}: re-run (same checkout)`);
      const rerun = await lane(project, join(tmp, 'lease-3'), tmp, cache, checkout);
      const loadAfter = loadavg()[0]!;
      const [c, w, r] = [cold, warm, rerun].map((x) => buildMs(x.rec)) as [number, number, number];
      const [cc, wc, rc] = [cold, warm, rerun].map((x) => buildCpuMs(x.rec)) as [number, number, number];
      const depsReused = builds(warm.rec)
        .flatMap((s) => artifacts(warm.d, s.name.slice('build:'.length)))
        .filter((u) => !u.packageId.includes('path+file://'))
        .every((u) => u.fresh);
      const ratio = w / c;
      sections.push({
        key: `lanes_${project}`,
        json: {
          toolchain,
          loadAverage1m: { before: load, after: loadAfter },
          cold: cold.rec,
          nextLease: warm.rec,
          rerun: rerun.rec,
          buildMs: { cold: c, nextLease: w, rerun: r },
          buildCpuMs: { cold: cc, nextLease: wc, rerun: rc },
          unitsCompiled: {
            cold: compiled(cold.rec),
            nextLease: compiled(warm.rec),
            rerun: compiled(rerun.rec),
          },
          nextLeaseOverCold: ratio,
          nextLeaseOverColdCpu: wc / cc,
          dependenciesReusedInNextLease: depsReused,
        },
        rows: [
          {
            metric: `${project} performance lane: build step, cold (wall; CPU)`,
            value: `${s1(c)}; ${s1(cc)} CPU (load ${load.toFixed(1)} → ${loadAfter.toFixed(1)} on ${cpus().length} cores)`,
          },
          {
            metric: `${project}: build step, next lease (new checkout, same path, warm cache)`,
            value: `${s1(w)} (${pct(w, c)}); ${s1(wc)} CPU (${pct(wc, cc)}); ${compiled(warm.rec)} units compiled`,
            target: '≤ 25 % of cold',
            met: ratio <= 0.25,
          },
          {
            metric: `${project}: build step, re-run in the same checkout`,
            value: `${s1(r)} (${pct(r, c)}); ${s1(rc)} CPU`,
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
