import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { parseStoredReceipts } from '../../core/protocol/receipt.ts';
import {
  adopt,
  artifacts,
  cargoHome,
  laneEnv,
  laneRecord,
  leaseDirs,
  ran,
  requireDebianRust,
  resultsDir,
  runLane,
  runnerCheckout,
} from '../../scripts/sim/harness/lanes.ts';
import { tempDir } from '../../scripts/sim/ledger.ts';
import { type LeaseFixture, runAction, runnerEnv, startWithGrantedLease } from './actions-lease-fixture.ts';

/**
 * Iron's lane script (workflows-templates/iron/scripts/ci/spark-test.sh), adopted into a checkout
 * of the Iron-shaped fixture (scripts/sim/fixtures/lanes/iron: plain-Rust "CUDA" kernels against CPU
 * oracles) and run by Debian's real cargo and rustc, offline. The fixture records every test and
 * bench that runs, so each case shows what the lane ran and that nothing else did.
 */

const CORRECTNESS = [
  'test cuda_backend binary_add_matches_cpu_oracle',
  'test cuda_backend binary_multiply_matches_cpu_oracle',
  'test cuda_backend gemv_matches_cpu_oracle',
  'test cuda_backend rmsnorm_matches_cpu_oracle',
];
/** The fixture's tests and benches outside the lane: none of them may ever run. */
const EXCLUDED = ['binary_subtract', 'softmax', 'codegen_emits_kernel_names'];

let tmp: { dir: string; cleanup: () => void };
let home: string;
let toolchain: { cargo: string; rustc: string };
let cache: string;
let f: LeaseFixture | null = null;
let n = 0;
/**
 * A checkout already built into `cache` (cases about one lease reuse it: nothing compiles): the
 * performance case's, which built both the correctness tests and the benches there; a case run alone
 * builds its own.
 */
let built: ReturnType<typeof lease> | null = null;

/** A cold release build of the fixture: ~9 s of CPU, but up to 100 s of wall time on a 2-core machine at load 25. */
const COLD = 600_000;

/** A fresh lease: a new checkout (new path, new file times) and new dirs; the build cache is shared. */
function lease(opts: { cache?: string } = {}) {
  const root = join(tmp.dir, `lease-${++n}`);
  const checkout = join(root, 'iron');
  const head = adopt('iron', checkout);
  return { checkout, head, d: leaseDirs(root, opts.cache) };
}

const sorted = (xs: string[]) => [...xs].sort();

/** A checkout whose lane ran once with the shared cache (so a re-run compiles nothing). */
async function builtCheckout(): Promise<ReturnType<typeof lease>> {
  if (!built) {
    const l = lease({ cache });
    const r = await runLane(l.checkout, ['single'], laneEnv('smoke', l.d, home));
    if (r.code !== 0) throw new Error(`the first lane run failed: ${r.stderr}`);
    built = l;
  }
  return built;
}

/** New lease dirs for a re-run in an existing checkout. */
function again(l: ReturnType<typeof lease>): ReturnType<typeof lease> {
  return { ...l, d: leaseDirs(join(tmp.dir, `lease-${++n}`), cache) };
}

/** Polls `cond` every 25 ms until it holds (no fixed sleeps). */
async function until(cond: () => boolean, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 25));
  }
}
const noneExcluded = (lines: string[]) => lines.filter((l) => EXCLUDED.some((x) => l.includes(x)));

beforeAll(() => {
  toolchain = requireDebianRust();
  tmp = tempDir('spark-lanes-iron-');
  home = tmp.dir;
  cargoHome(join(home, 'cargo'));
  cache = join(tmp.dir, 'build-cache');
  mkdirSync(cache);
});
afterEach(async () => {
  await f?.controller.close();
  f = null;
});
afterAll(() => tmp.cleanup());

describe("Iron lanes on Debian's cargo", () => {
  it(
    'spark-test without a build cache: the filtered correctness subset only, built cold and cleaned up',
    async () => {
      const { checkout, head, d } = lease();
      const r = await runLane(checkout, ['single'], laneEnv('smoke', d, home));
      expect(r.stderr).not.toMatch(/^spark-test: /m);
      expect(r.code).toBe(0);
      // revisions first: the commit and Debian's toolchain, not a rustup one
      expect(r.stdout.indexOf('== toolchain and source revisions')).toBe(0);
      expect(r.stdout).toContain(`source: ${head}`);
      expect(r.stdout).toContain(`cargo: ${toolchain.cargo}`);
      expect(r.stdout).toContain(`rustc: ${toolchain.rustc}`);
      expect(r.stdout).toContain('build cache: cold');
      expect(sorted(ran(d))).toEqual(CORRECTNESS);
      const rec = laneRecord(d);
      expect(rec).toMatchObject({ lane: 'spark-test', suite: 'smoke', targetMinutes: 30, overTarget: false });
      expect(rec.buildCache).toBe('cold');
      expect(rec.steps.map((s) => [s.name, s.exit])).toEqual([
        ['build:correctness', 0],
        ['test:correctness', 0],
      ]);
      expect(rec.steps[1]!.passed).toBe(4);
      // the disposable work dir, its cold cargo target included, is gone; the results stay
      expect(existsSync(join(d.work, 'spark-test-scratch'))).toBe(false);
      expect(r.stdout).toContain(
        `spark-test: removed the disposable work dir ${join(d.work, 'spark-test-scratch')}`,
      );
      expect(existsSync(join(resultsDir(d), 'cargo-build-correctness.jsonl'))).toBe(true);
    },
    COLD,
  );

  it(
    'spark-test-long: correctness first, then only the GEMV and RMSNorm benches, 2 warmups and 5 runs',
    async () => {
      const l = lease({ cache });
      const { checkout, d } = l;
      const r = await runLane(checkout, ['single'], laneEnv('performance', d, home));
      expect(r.code).toBe(0);
      built = l;
      const lines = ran(d);
      expect(sorted(lines.slice(0, 4))).toEqual(CORRECTNESS);
      expect(lines.slice(4)).toEqual(['bench gemv warmup=2 runs=5', 'bench rmsnorm warmup=2 runs=5']);
      expect(noneExcluded(lines)).toEqual([]);
      for (const bench of ['gemv', 'rmsnorm']) {
        const json = JSON.parse(readFileSync(join(resultsDir(d), `iron-bench-${bench}.json`), 'utf8'));
        expect(json).toMatchObject({ bench, warmups: 2, runs: 5 });
        expect(json.samples_ns).toHaveLength(5);
      }
      expect(existsSync(join(resultsDir(d), 'iron-bench-softmax.json'))).toBe(false);
      const rec = laneRecord(d);
      expect(rec).toMatchObject({
        lane: 'spark-test-long',
        targetMinutes: 60,
        buildCache: 'shared',
        exit: 0,
      });
      expect(rec.steps.map((s) => s.name)).toEqual([
        'build:correctness',
        'test:correctness',
        'build:benches',
        'bench:gemv',
        'bench:rmsnorm',
      ]);
      expect(r.stdout).toContain(`build cache: shared ${join(cache, 'cargo-target')}`);
      expect(existsSync(join(cache, 'cargo-target', 'release'))).toBe(true);
    },
    COLD,
  );

  it(
    'waits for the build lock another build holds, and a killed holder cannot keep it',
    async () => {
      const { checkout, d } = again(await builtCheckout());
      const lock = join(cache, 'spark-build.lock');
      // another job's build holds the lock on its own open file (as the script does), then hangs
      const holder = spawn('bash', ['-c', 'exec 9>>"$0" && flock 9 && exec sleep 300', lock], {
        stdio: 'ignore',
      });
      const held = () => spawnSync('flock', ['--nonblock', lock, 'true']).status === 1;
      await until(held);
      try {
        const r = await runLane(checkout, ['single'], laneEnv('smoke', d, home), (child, output) => {
          void until(() => output().includes('waiting for the build lock') || child.exitCode != null).then(
            () =>
              // the holder crashes: the kernel drops its lock with its open file
              holder.kill('SIGKILL'),
          );
        });
        expect(r.stderr).toContain(
          `spark-test: waiting for the build lock ${join(cache, 'spark-build.lock')} (another build of this repository holds it)`,
        );
        expect(r.code).toBe(0);
        expect(holder.signalCode).toBe('SIGKILL');
        expect(laneRecord(d).steps[0]!.lockWaitMs).toBeGreaterThan(0);
        expect(sorted(ran(d))).toEqual(CORRECTNESS);
      } finally {
        holder.kill('SIGKILL');
      }
    },
    COLD,
  );

  it(
    'a filter that matches no test fails the lane instead of passing it untested',
    async () => {
      const { checkout, d } = again(await builtCheckout());
      const r = await runLane(
        checkout,
        ['single'],
        laneEnv('smoke', d, home, { IRON_CORRECTNESS_FILTERS: 'binary_add fused_attention' }),
      );
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(
        "spark-test: the filter 'fused_attention' matched no test that ran and passed: the correctness step would pass without testing it",
      );
      expect(ran(d)).toEqual(['test cuda_backend binary_add_matches_cpu_oracle']);
      // a failed lane keeps its scratch dir for inspection
      expect(existsSync(join(d.work, 'spark-test-scratch', 'test-correctness.log'))).toBe(true);
      expect(laneRecord(d).exit).toBe(1);
    },
    COLD,
  );

  it(
    'through the spark-test action: one run of the script, results and receipt in the results dir',
    async () => {
      const { checkout, head, d } = again(await builtCheckout());
      f = await startWithGrantedLease({ headSha: head, suite: 'performance' });
      const lease0 = f.leases[0]!;
      const run = await runAction('spark-test', {
        inputs: {
          reservation_id: f.reservation.id,
          head_sha: head,
          topology: 'single',
          suite: 'performance',
        },
        env: {
          ...runnerEnv(f, lease0, { workDir: d.work, modelCache: d.models }),
          ...laneEnv('performance', d, home),
        },
        workspace: checkout,
        tmp: tmp.dir,
      });
      expect(run.code).toBe(0);
      const lines = ran(d);
      // correctness once (the script runs it first itself), then the two benches
      expect(sorted(lines.slice(0, 4))).toEqual(CORRECTNESS);
      expect(lines.slice(4)).toEqual(['bench gemv warmup=2 runs=5', 'bench rmsnorm warmup=2 runs=5']);
      const results = run.outputs.results_dir!;
      expect(results).toBe(resultsDir(d));
      const receipt = parseStoredReceipts((await f.reservationRow()).receiptJson)!.byHost[lease0.hostId]!;
      expect(receipt).toMatchObject({ result: 'passed', suite: 'performance' });
      expect(receipt.phases.map((p) => [p.suite, p.exitCode])).toEqual([['performance', 0]]);
      expect(receipt.lane).toMatchObject({ name: 'spark-test-long', targetMinutes: 60, overTarget: false });
      expect(JSON.parse(readFileSync(join(results, 'receipt.json'), 'utf8'))).toEqual(receipt);
      for (const file of ['iron-bench-gemv.json', 'iron-bench-rmsnorm.json', 'spark-lane.json'])
        expect(existsSync(join(results, file)), file).toBe(true);
    },
    COLD,
  );
  it(
    'the next lease at the runner checkout path compiles nothing; at another path only the workspace compiles',
    async () => {
      // the runner checks a repository out at one path in every lease (<runner>/_work/iron/iron);
      // the cache's record of source times is of the earlier leases' other paths, so this lease
      // stamps every file new: the workspace's own crates compile, every dependency is reused
      await builtCheckout();
      const runner = join(tmp.dir, 'runner');
      const first = runnerCheckout('iron', runner);
      const d1 = leaseDirs(join(tmp.dir, `lease-${++n}`), cache);
      const r1 = await runLane(first.checkout, ['single'], laneEnv('smoke', d1, home));
      expect(r1.code).toBe(0);
      expect(r1.stdout).toContain('source times: the record is of another checkout path: every path is new');
      const deps = artifacts(d1, 'correctness').filter((u) => !u.packageId.includes('path+file://'));
      expect(deps.length).toBeGreaterThan(0);
      expect(deps.filter((u) => !u.fresh)).toEqual([]);
      const build1 = laneRecord(d1).steps[0]!;
      expect(build1.compiled).toBeGreaterThan(0);
      expect(build1.compiled).toBe(build1.compiledWorkspace);
      // the next lease: a new checkout (new files, new times) at the same path, same content:
      // every tracked path gets its recorded time back and nothing compiles
      const next = runnerCheckout('iron', runner);
      const d2 = leaseDirs(join(tmp.dir, `lease-${++n}`), cache);
      const r2 = await runLane(next.checkout, ['single'], laneEnv('smoke', d2, home));
      expect(r2.code).toBe(0);
      const rec2 = laneRecord(d2);
      expect(rec2.sourceTimes).toMatchObject({ status: 'restored', new: 0 });
      expect(rec2.sourceTimes.restored).toBeGreaterThan(0);
      expect(rec2.steps[0]).toMatchObject({ name: 'build:correctness', compiled: 0 });
      expect(artifacts(d2, 'correctness').every((u) => u.fresh)).toBe(true);
      expect(sorted(ran(d2))).toEqual(CORRECTNESS);
      // the same checkout run again (a re-run of the lane) compiles nothing either
      const rerun = again({ ...next, d: d2 });
      expect((await runLane(next.checkout, ['single'], laneEnv('smoke', rerun.d, home))).code).toBe(0);
      expect(laneRecord(rerun.d).steps[0]).toMatchObject({ compiled: 0 });
      // the lock file stays in the cache, and no one holds it once the lane is over
      expect(spawnSync('flock', ['--nonblock', join(cache, 'spark-build.lock'), 'true']).status).toBe(0);
    },
    COLD,
  );

  it(
    'a source changed between leases is compiled and tested, never served stale from the cache',
    async () => {
      const runner = join(tmp.dir, 'runner');
      const fixture = (p: string) =>
        readFileSync(join(import.meta.dirname, '../../scripts/sim/fixtures/lanes/iron', p), 'utf8');
      const gemvV2 = fixture('benches/gemv.rs').replace('harness::run("gemv"', 'harness::run("gemv-v2"');
      const brokenAdd = fixture('src/lib.rs').replace(
        'binary(a, b, |x, y| x + y)',
        'binary(a, b, |x, y| x - y)',
      );
      expect(gemvV2).not.toBe(fixture('benches/gemv.rs'));
      expect(brokenAdd).not.toBe(fixture('src/lib.rs'));
      const leaseAt = async (suite: string, overlay: Record<string, string>) => {
        const { checkout } = runnerCheckout('iron', runner, overlay);
        const d = leaseDirs(join(tmp.dir, `lease-${++n}`), cache);
        const r = await runLane(checkout, ['single'], laneEnv(suite, d, home));
        return { r, d, rec: laneRecord(d) };
      };
      // 1. the performance lane builds the benches (the GEMV bench as the fixture has it)
      expect((await leaseAt('performance', {})).r.code).toBe(0);
      // 2. a lease whose lane builds no bench brings a changed GEMV bench: nothing compiles, and
      //    the record now holds the changed file with a time later than the bench's build
      const smoke = await leaseAt('smoke', { 'benches/gemv.rs': gemvV2 });
      expect(smoke.r.code).toBe(0);
      expect(smoke.rec.sourceTimes.new).toBeGreaterThan(0);
      expect(smoke.rec.steps[0]).toMatchObject({ compiled: 0 });
      // 3. the performance lane with that same change: the record's time for the file is later
      //    than the bench unit built in 1, so the bench compiles and its new code runs (restoring
      //    a commit time, or any time before that build, would have run the old bench)
      const perf = await leaseAt('performance', { 'benches/gemv.rs': gemvV2 });
      expect(perf.r.code).toBe(0);
      expect(ran(perf.d).slice(4)).toEqual([
        'bench gemv-v2 warmup=2 runs=5',
        'bench rmsnorm warmup=2 runs=5',
      ]);
      const benches = perf.rec.steps.find((s) => s.name === 'build:benches')!;
      expect(benches).toMatchObject({ compiled: 1, compiledWorkspace: 1 });
      // 4. a broken kernel in the library: it compiles, and its test fails (a stale library passes)
      const broken = await leaseAt('smoke', { 'benches/gemv.rs': gemvV2, 'src/lib.rs': brokenAdd });
      expect(broken.r.code).not.toBe(0);
      expect(broken.rec.steps[0]!.compiledWorkspace).toBeGreaterThan(0);
      expect(broken.r.stdout).toMatch(/^test binary_add_matches_cpu_oracle \.\.\. FAILED$/m);
      // 5. the library as it was: content unlike the record's, so it compiles again, and passes
      const fixed = await leaseAt('smoke', { 'benches/gemv.rs': gemvV2 });
      expect(fixed.r.code).toBe(0);
      expect(fixed.rec.steps[0]!.compiledWorkspace).toBeGreaterThan(0);
      expect(sorted(ran(fixed.d))).toEqual(CORRECTNESS);
    },
    COLD,
  );
});
