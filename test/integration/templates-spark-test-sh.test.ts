import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { parseStoredReceipts } from '../../core/protocol/receipt.ts';
import { tempDir } from '../helpers/ledger.ts';
import {
  gitRepo,
  type LeaseFixture,
  repoRoot,
  runAction,
  runnerEnv,
  shellScript,
  startWithGrantedLease,
} from './actions-lease-fixture.ts';

/**
 * The Butter and Iron `scripts/ci/spark-test.sh` templates (the seed's lanes, issue 14 item 5) run
 * for real with bash, with stand-in `cargo`, server and bench commands on PATH that record exactly
 * what they were asked to run and whether the shared build lock was held; and the Iron template
 * end to end through the spark-test action against a real controller.
 */

const template = (project: 'butter' | 'iron') =>
  join(repoRoot, 'workflows-templates', project, 'scripts', 'ci', 'spark-test.sh');

const QWEN = 'nvidia/Qwen3.8-27B-NVFP4';
const QWEN_REV = 'c0ffee'.padEnd(40, '0');

let tmp: { dir: string; cleanup: () => void };
let fakeBin: string;
let f: LeaseFixture | null = null;

// each call appends one line: the tool and its argv, separated by US (0x1f)
const record = (tool: string) =>
  `{ printf '%s' '${tool}'; printf '\\037%s' "$@"; printf '\\n'; } >> "$RECORD"`;
const lockState = `if flock -n "$CARGO_TARGET_DIR/.spark-build.lock" true; then echo 'lock free' >> "$RECORD"; else echo 'lock held' >> "$RECORD"; fi`;

beforeAll(() => {
  tmp = tempDir('spark-templates-sh-');
  fakeBin = join(tmp.dir, 'bin');
  mkdirSync(fakeBin);
  // Butter's server: records its argv, says ready through the file it is given (as the real
  // server's --ready-file does), serves until it is stopped, and records that it was stopped
  const serve = `${record('butter-serve')}
ready=""; while [ $# -gt 0 ]; do [ "$1" = --ready-file ] && ready="$2"; shift; done
trap 'echo "butter-serve stopped" >> "$RECORD"; kill "$child" 2>/dev/null; exit 0' TERM
[ -n "$SERVE_CRASH" ] && { echo "CUDA error: out of memory" >&2; exit 1; }
: > "$ready"
sleep 300 & child=$!
wait "$child"`;
  const bench = `${record('butter-bench')}
out=""; while [ $# -gt 0 ]; do [ "$1" = --output ] && out="$2"; shift; done
echo '{"tokens_per_s": 41.5}' > "$out"`;
  // cargo records its argv and the lock state; `build` leaves the binaries where cargo would, and
  // CARGO_HANG makes a test build wait for the lane to end
  shellScript(
    join(fakeBin, 'cargo'),
    `${record('cargo')}
[ "$1" = --version ] && { echo 'cargo 1.91.0 (stand-in)'; exit 0; }
${lockState}
if [ "$1" = build ]; then
  mkdir -p "$CARGO_TARGET_DIR/release"
  printf '#!/bin/sh\\n%s\\n' '${serve.replace(/'/g, `'"'"'`)}' > "$CARGO_TARGET_DIR/release/butter-serve"
  printf '#!/bin/sh\\n%s\\n' '${bench.replace(/'/g, `'"'"'`)}' > "$CARGO_TARGET_DIR/release/butter-bench"
  chmod +x "$CARGO_TARGET_DIR/release/butter-serve" "$CARGO_TARGET_DIR/release/butter-bench"
fi
echo "cargo $1 ok"`,
  );
});
afterEach(async () => {
  await f?.controller.close();
  f = null;
});
afterAll(() => tmp.cleanup());

/** Puts the model into a managed HF cache the way huggingface_hub lays it out. */
function prewarm(modelCache: string, model = QWEN, rev = QWEN_REV): string {
  const repoDir = join(modelCache, 'huggingface', 'hub', `models--${model.replace('/', '--')}`);
  mkdirSync(join(repoDir, 'refs'), { recursive: true });
  mkdirSync(join(repoDir, 'snapshots', rev), { recursive: true });
  writeFileSync(join(repoDir, 'refs', 'main'), rev);
  writeFileSync(join(repoDir, 'snapshots', rev, 'config.json'), '{"model_type":"qwen3"}');
  return join(repoDir, 'snapshots', rev);
}

function runTemplate(
  project: 'butter' | 'iron',
  topology: string,
  suite: string,
  env: Record<string, string> = {},
  setup: (dirs: { modelCache: string; workDir: string }) => void = () => {},
) {
  const dir = join(tmp.dir, `${project}-${Math.random().toString(16).slice(2)}`);
  const workDir = join(dir, 'work');
  const modelCache = join(dir, 'models');
  mkdirSync(workDir, { recursive: true });
  mkdirSync(modelCache, { recursive: true });
  setup({ modelCache, workDir });
  const recordFile = join(dir, 'record.txt');
  writeFileSync(recordFile, '');
  const r = spawnSync('bash', [template(project), topology], {
    cwd: dir,
    encoding: 'utf8',
    env: {
      PATH: `${fakeBin}:${process.env.PATH}`,
      SPARK_TEST_SUITE: suite,
      SPARK_WORK_DIR: workDir,
      SPARK_MODEL_CACHE: modelCache,
      RECORD: recordFile,
      ...env,
    },
  });
  const calls = readFileSync(recordFile, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => l.split('\x1f'));
  return { code: r.status, out: r.stdout + r.stderr, calls, workDir, modelCache };
}

/** The recorded calls without the revision probes every run starts with. */
const work = (calls: string[][]) => calls.filter((c) => !(c[0] === 'cargo' && c[1] === '--version'));

describe('Butter spark-test.sh template', () => {
  it('spark-test: prints revisions first, then release-mode wh-butter-cuda cuda_smoke under the build lock', () => {
    const r = runTemplate('butter', 'single', 'smoke');
    expect(r.code).toBe(0);
    expect(r.calls[0]).toEqual(['cargo', '--version']);
    expect(work(r.calls)).toEqual([
      ['cargo', 'test', '--release', '--locked', '-p', 'wh-butter-cuda', '--test', 'cuda_smoke'],
      ['lock held'],
    ]);
    expect(r.out.indexOf('== toolchain and source revisions')).toBeLessThan(
      r.out.indexOf('== Butter CUDA smoke'),
    );
    expect(r.out).toContain('cargo: cargo 1.91.0 (stand-in)');
    expect(r.out).toContain('lane: spark-test (30-minute target), topology single');
  });

  it('spark-test-long: serves Qwen3.8 27B NVFP4 from the cache, 512/32 tokens, 1 warmup, 2 runs, then stops its server', () => {
    let snapshot = '';
    const r = runTemplate('butter', 'single', 'performance', {}, ({ modelCache }) => {
      snapshot = prewarm(modelCache);
    });
    expect(r.out).not.toContain('spark-test:');
    expect(r.code).toBe(0);
    const calls = work(r.calls);
    expect(calls[0]).toEqual([
      'cargo',
      'build',
      '--release',
      '--locked',
      '-p',
      'wh-butter-serve',
      '--bin',
      'butter-serve',
      '--bin',
      'butter-bench',
    ]);
    expect(calls[1]).toEqual(['lock held']);
    const serve = calls.find((c) => c[0] === 'butter-serve')!;
    expect(serve.slice(1, 3)).toEqual(['--model', snapshot]);
    expect(calls.find((c) => c[0] === 'butter-bench')!.slice(1)).toEqual([
      '--url',
      'http://127.0.0.1:18731',
      '--prompt-tokens',
      '512',
      '--decode-tokens',
      '32',
      '--warmup',
      '1',
      '--runs',
      '2',
      '--output',
      `${r.workDir}/butter-serving-bench.json`,
    ]);
    expect(calls.at(-1)).toEqual(['butter-serve stopped']);
    expect(r.out).toContain(`model: ${QWEN} snapshot ${QWEN_REV}`);
    expect(r.out).toContain('lane: spark-test-long (60-minute target)');
  });

  it('fails clearly, before building anything, when the model is not in the managed cache (never downloads)', () => {
    const r = runTemplate('butter', 'single', 'performance');
    expect(r.code).toBe(2);
    expect(r.out).toContain(`spark-test: Qwen3.8 27B NVFP4 (${QWEN}) is not in the managed model cache`);
    expect(r.out).toContain('a Spark run never downloads weights');
    expect(work(r.calls)).toEqual([]);
    // a pinned revision that is not the cached one is absent too
    const pinned = runTemplate(
      'butter',
      'single',
      'performance',
      { BUTTER_QWEN_REVISION: 'f'.repeat(40) },
      ({ modelCache }) => {
        prewarm(modelCache);
      },
    );
    expect(pinned.code).toBe(2);
    expect(pinned.out).toContain(`(${QWEN} at ${'f'.repeat(40)}) is not in the managed model cache`);
  });

  it('fails when its server dies before it is ready, naming it', () => {
    const r = runTemplate('butter', 'single', 'performance', { SERVE_CRASH: '1' }, ({ modelCache }) => {
      prewarm(modelCache);
    });
    expect(r.code).toBe(2);
    expect(r.out).toContain('CUDA error: out of memory');
    expect(r.out).toContain('butter-serve exited before it was ready');
    expect(work(r.calls).some((c) => c[0] === 'butter-bench')).toBe(false);
  });

  it('starts nothing past the lane deadline and waits for the build lock no longer than the lane', () => {
    const late = runTemplate('butter', 'single', 'smoke', {
      SPARK_LANE_DEADLINE: String(Math.floor(Date.now() / 1000) - 1),
    });
    expect(late.code).toBe(124);
    expect(late.out).toContain(
      'spark-test: lane spark-test exceeded its 30-minute time target before: cuda_smoke',
    );
    expect(work(late.calls)).toEqual([]);
    // another build holds the shared target dir's lock until after the deadline
    const target = join(tmp.dir, `shared-target-${Math.random().toString(16).slice(2)}`);
    mkdirSync(target);
    const holder = spawn('flock', [join(target, '.spark-build.lock'), 'sleep', '300'], {
      stdio: 'ignore',
      detached: true,
    });
    try {
      const blocked = runTemplate('butter', 'single', 'smoke', {
        BUTTER_CARGO_TARGET_DIR: target,
        SPARK_LANE_DEADLINE: String(Math.floor(Date.now() / 1000) + 4),
      });
      expect(blocked.code).toBe(124);
      expect(blocked.out).toContain('exceeded its 30-minute time target waiting for the build lock');
      expect(work(blocked.calls)).toEqual([]);
    } finally {
      process.kill(-holder.pid!, 'SIGKILL');
    }
  });

  it('refuses pair without a distributed assertion, a bad topology, a bad suite and a bad deadline', () => {
    const pair = runTemplate('butter', 'pair', 'smoke');
    expect(pair.code).toBe(2);
    expect(pair.out).toContain('spark-test: topology pair needs a real distributed assertion');
    expect(pair.calls).toEqual([]);
    const topo = runTemplate('butter', 'triple', 'smoke');
    expect(topo.code).toBe(2);
    expect(topo.out).toContain("usage: scripts/ci/spark-test.sh <single|pair> (got 'triple')");
    const suite = runTemplate('butter', 'single', 'soak');
    expect(suite.code).toBe(2);
    expect(suite.out).toContain("SPARK_TEST_SUITE must be smoke or performance (got 'soak')");
    const deadline = runTemplate('butter', 'single', 'smoke', { SPARK_LANE_DEADLINE: 'tomorrow' });
    expect(deadline.code).toBe(2);
    expect(deadline.out).toContain("SPARK_LANE_DEADLINE must be epoch seconds (got 'tomorrow')");
    expect(deadline.calls).toEqual([]);
  });
});

describe('Iron spark-test.sh template', () => {
  it('spark-test: revisions first, then filtered CUDA correctness (binary add/multiply, GEMV, RMSNorm) under the lock', () => {
    const r = runTemplate('iron', 'single', 'smoke');
    expect(r.code).toBe(0);
    expect(r.calls[0]).toEqual(['cargo', '--version']);
    expect(work(r.calls)).toEqual([
      [
        'cargo',
        'test',
        '--release',
        '--locked',
        '--test',
        'cuda_correctness',
        '--',
        'binary_add',
        'binary_multiply',
        'gemv',
        'rmsnorm',
      ],
      ['lock held'],
    ]);
    expect(r.out.indexOf('== toolchain and source revisions')).toBeLessThan(
      r.out.indexOf('== Iron CUDA correctness'),
    );
  });

  it('spark-test-long: only the GEMV and RMSNorm benches, 2 warmups and 5 measured runs each', () => {
    const r = runTemplate('iron', 'single', 'performance');
    expect(r.code).toBe(0);
    const benches = work(r.calls).filter((c) => c[0] === 'cargo');
    expect(benches.map((c) => c.slice(1, 5))).toEqual([
      ['bench', '--locked', '--bench', 'gemv'],
      ['bench', '--locked', '--bench', 'rmsnorm'],
    ]);
    for (const b of benches) expect(b.slice(5, 10)).toEqual(['--', '--warmup', '2', '--runs', '5']);
    expect(r.calls.filter((c) => c[0] === 'lock held')).toHaveLength(2);
    expect(r.out).toContain('lane: spark-test-long (60-minute target)');
  });

  it('starts nothing past the lane deadline', () => {
    const late = runTemplate('iron', 'single', 'performance', { SPARK_LANE_DEADLINE: '1' });
    expect(late.code).toBe(124);
    expect(late.out).toContain(
      'lane spark-test-long exceeded its 60-minute time target before: the gemv benchmark',
    );
    expect(work(late.calls)).toEqual([]);
  });

  it('runs the declared distributed assertion for a pair, and refuses a pair without one', () => {
    const refused = runTemplate('iron', 'pair', 'smoke');
    expect(refused.code).toBe(2);
    expect(refused.out).toContain('Iron declares none, so a pair run fails instead of passing vacuously');
    const assertion = shellScript(join(tmp.dir, 'assert.sh'), 'echo "2 ranks agree on the GEMV result"');
    const ok = runTemplate('iron', 'pair', 'smoke', { SPARK_DISTRIBUTED_ASSERTION: assertion });
    expect(ok.code).toBe(0);
    expect(ok.out).toContain('2 ranks agree on the GEMV result');
  });
});

describe('Iron template through the spark-test action', () => {
  it('runs correctness then benches and records a passed receipt on the controller', async () => {
    const repo = join(tmp.dir, 'iron-repo');
    const head = gitRepo(repo, { 'scripts/ci/spark-test.sh': readFileSync(template('iron'), 'utf8') });
    f = await startWithGrantedLease({ headSha: head, suite: 'performance' });
    const lease = f.leases[0]!;
    const workDir = join(tmp.dir, 'iron-work');
    const modelCache = join(tmp.dir, 'iron-models');
    mkdirSync(workDir);
    mkdirSync(modelCache);
    const recordFile = join(tmp.dir, 'iron-record.txt');
    writeFileSync(recordFile, '');
    const r = await runAction('spark-test', {
      inputs: { reservation_id: f.reservation.id, head_sha: head, topology: 'single', suite: 'performance' },
      env: {
        ...runnerEnv(f, lease, { workDir, modelCache }),
        PATH: `${fakeBin}:${process.env.PATH}`,
        RECORD: recordFile,
      },
      workspace: repo,
      tmp: tmp.dir,
    });
    expect(r.code).toBe(0);
    const cargo = readFileSync(recordFile, 'utf8')
      .split('\n')
      .filter((l) => l.startsWith('cargo'))
      .map((l) => l.split('\x1f').slice(1, 2)[0]);
    // toolchain revisions are printed first (by the action, then by the script in each phase),
    // then correctness, then the two benches
    expect(cargo).toEqual(['--version', '--version', 'test', '--version', 'bench', 'bench']);
    const receipt = parseStoredReceipts((await f.reservationRow()).receiptJson)!.byHost[lease.hostId]!;
    expect(receipt.result).toBe('passed');
    expect(receipt.phases.map((p) => [p.suite, p.exitCode])).toEqual([
      ['smoke', 0],
      ['performance', 0],
    ]);
    expect(receipt.lane).toMatchObject({ name: 'spark-test-long', targetMinutes: 60, withinTarget: true });
  });
});
