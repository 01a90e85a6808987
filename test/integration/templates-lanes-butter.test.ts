import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  adopt,
  artifacts,
  cargoHome,
  laneEnv,
  laneRecord,
  leaseDirs,
  listing,
  prewarm,
  ran,
  requireDebianRust,
  resultsDir,
  runLane,
  runnerCheckout,
} from '../../scripts/sim/harness/lanes.ts';
import { tempDir } from '../../scripts/sim/ledger.ts';

/**
 * Butter's lane script (workflows-templates/butter/scripts/ci/spark-test.sh), adopted into a
 * checkout of the Butter-shaped fixture (scripts/sim/fixtures/lanes/butter: a `wh-butter-cuda` crate whose
 * "CUDA" is plain Rust checked against CPU references, and ignored model integration tests) and
 * run by Debian's real cargo and rustc, offline. The fixture records every test that runs.
 */

const SMOKE = [
  'test cuda_smoke allocation_and_upload_round_trip',
  'test cuda_smoke elementwise_ops_match_cpu',
  'test cuda_smoke gemv_matches_cpu',
  'test cuda_smoke generated_dispatch_reaches_every_kernel',
  'test cuda_smoke rmsnorm_matches_cpu',
];
const MODEL = 'nvidia/Qwen3.8-27B-NVFP4';
const REV = 'c0ffee'.padEnd(40, '0');
/** The fixture's tests outside the lane: none of them may ever run. */
const EXCLUDED = ['dispatch_table_unit', 'llama_3_70b_fp8_serving', 'request_shapes_are_valid'];
/** A cold release build of the fixture: ~24 s of CPU, up to 225 s of wall time at load 25 on 2 cores. */
const COLD = 600_000;

let tmp: { dir: string; cleanup: () => void };
let home: string;
let toolchain: { cargo: string; rustc: string };
let cache: string;
let n = 0;

function lease(opts: { cache?: string } = {}) {
  const root = join(tmp.dir, `lease-${++n}`);
  const checkout = join(root, 'butter');
  const head = adopt('butter', checkout);
  return { checkout, head, d: leaseDirs(root, opts.cache) };
}

const sorted = (xs: string[]) => [...xs].sort();
/** The Spark runner's dir: it checks the repository out at one path under it in every lease. */
const runner = () => join(tmp.dir, 'runner');

beforeAll(() => {
  toolchain = requireDebianRust();
  tmp = tempDir('spark-lanes-butter-');
  home = tmp.dir;
  cargoHome(join(home, 'cargo'));
  cache = join(tmp.dir, 'build-cache');
  mkdirSync(cache);
});
afterAll(() => tmp.cleanup());

describe("Butter lanes on Debian's cargo", () => {
  it(
    'spark-test without a build cache: release-mode wh-butter-cuda cuda_smoke only, built cold and cleaned up',
    async () => {
      const { checkout, head, d } = lease();
      const r = await runLane(checkout, ['single'], laneEnv('smoke', d, home));
      expect(r.stderr).not.toMatch(/^spark-test: /m);
      expect(r.code).toBe(0);
      expect(r.stdout.indexOf('== toolchain and source revisions')).toBe(0);
      expect(r.stdout).toContain(`source: ${head}`);
      expect(r.stdout).toContain(`cargo: ${toolchain.cargo}`);
      expect(r.stdout).toContain(`rustc: ${toolchain.rustc}`);
      expect(r.stdout).toContain(
        `build cache: cold ${join(d.work, 'spark-test-scratch', 'cargo-target')} (SPARK_BUILD_CACHE_DIR is not set; removed after a successful run)`,
      );
      expect(r.stdout).toContain(
        '== test smoke: cargo test --release --locked -p wh-butter-cuda --test cuda_smoke',
      );
      expect(sorted(ran(d))).toEqual(SMOKE);
      const rec = laneRecord(d);
      expect(rec).toMatchObject({ lane: 'spark-test', buildCache: 'cold', exit: 0, overTarget: false });
      expect(rec.steps.map((s) => s.name)).toEqual(['build:smoke', 'test:smoke']);
      expect(rec.steps[1]!.passed).toBe(5);
      expect(existsSync(join(d.work, 'spark-test-scratch'))).toBe(false);
    },
    COLD,
  );

  it('spark-test-long refuses a model missing from the managed cache before it builds or writes anything', async () => {
    const { checkout, d } = lease({ cache });
    const before = { work: listing(d.work), models: listing(d.models), cache: listing(cache) };
    const r = await runLane(checkout, ['single'], laneEnv('performance', d, home));
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr.trim().split('\n')).toEqual([
      `spark-test: ${MODEL} is not in the managed model cache ${d.models}/huggingface; a Spark run never downloads weights: pre-warm it on the host (spark-runner-preflight doctor --spec <the host's provisioning spec> --prewarm)`,
    ]);
    expect({ work: listing(d.work), models: listing(d.models), cache: listing(cache) }).toEqual(before);
    expect(ran(d)).toEqual([]);
  });

  it(
    'spark-test-long: the smoke first, then only the Qwen3.8 27B NVFP4 filter, offline, from the cache',
    async () => {
      // at the runner's checkout path, as a Spark runner checks it out: the next case's first lease
      // there then finds this build (run alone, that case builds it itself)
      const { checkout } = runnerCheckout('butter', runner());
      const d = leaseDirs(join(tmp.dir, `lease-${++n}`), cache);
      const snapshot = prewarm(d.models, MODEL, REV, { _name_or_path: MODEL, hidden_size: 32 });
      const r = await runLane(checkout, ['single'], laneEnv('performance', d, home));
      expect(r.stderr).not.toMatch(/^spark-test: /m);
      expect(r.code).toBe(0);
      const lines = ran(d);
      expect(sorted(lines.slice(0, 5))).toEqual(SMOKE);
      expect(lines.slice(5)).toEqual([
        'test model_integration qwen3_8_27b_nvfp4_serving prompt=512 decode=32 warmups=1 runs=2 offline=1',
      ]);
      expect(lines.filter((l) => EXCLUDED.some((x) => l.includes(x)))).toEqual([]);
      expect(r.stdout).toContain(
        `== model: ${MODEL} snapshot ${REV}: 512-token prompt, 32 decode tokens, 1 warmup, 2 measured runs`,
      );
      const bench = JSON.parse(readFileSync(join(resultsDir(d), 'butter-model-bench.json'), 'utf8'));
      expect(bench).toMatchObject({
        model: MODEL,
        snapshot: REV,
        prompt_tokens: 512,
        decode_tokens: 32,
        warmups: 1,
      });
      expect(bench.runs).toHaveLength(2);
      expect(snapshot.endsWith(REV)).toBe(true);
      const rec = laneRecord(d);
      expect(rec).toMatchObject({
        lane: 'spark-test-long',
        targetMinutes: 60,
        buildCache: 'shared',
        exit: 0,
      });
      expect(rec.steps.map((s) => [s.name, s.passed ?? null])).toEqual([
        ['build:smoke', null],
        ['test:smoke', 5],
        ['build:model', null],
        ['test:model', 1],
      ]);
    },
    COLD,
  );

  it(
    'the next lease builds warm (nothing compiles at the runner checkout path), and a filter that matches nothing fails',
    async () => {
      // the runner checks the repository out at one path in every lease (<runner>/_work/butter/butter)
      const first = runnerCheckout('butter', runner());
      const d1 = leaseDirs(join(tmp.dir, `lease-${++n}`), cache);
      prewarm(d1.models, MODEL, REV, { _name_or_path: MODEL });
      expect((await runLane(first.checkout, ['single'], laneEnv('performance', d1, home))).code).toBe(0);
      const next = runnerCheckout('butter', runner());
      const d = leaseDirs(join(tmp.dir, `lease-${++n}`), cache);
      prewarm(d.models, MODEL, REV, { _name_or_path: MODEL });
      const r = await runLane(
        next.checkout,
        ['single'],
        laneEnv('performance', d, home, { BUTTER_MODEL_TEST_FILTER: 'qwen9_405b' }),
      );
      // a new checkout of the same commit at the same path: every tracked path gets its recorded
      // time back, and no unit compiles, the workspace's crates included
      const rec = laneRecord(d);
      expect(rec.sourceTimes).toMatchObject({ status: 'restored', new: 0 });
      for (const step of ['smoke', 'model']) {
        expect(artifacts(d, step).filter((u) => !u.fresh)).toEqual([]);
        expect(rec.steps.find((s) => s.name === `build:${step}`)).toMatchObject({ compiled: 0 });
      }
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(
        "spark-test: the filter 'qwen9_405b' matched no test that ran and passed: the model step would pass without testing it",
      );
      expect(sorted(ran(d))).toEqual(SMOKE);
    },
    COLD,
  );
});
