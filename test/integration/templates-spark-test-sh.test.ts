import { spawnSync } from 'node:child_process';
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
 * The Butter and Iron `scripts/ci/spark-test.sh` templates run for real with bash, with fake
 * `python` / `cargo` on PATH that record exactly what they were asked to run; and the Iron template
 * end to end through the spark-test action against a real controller.
 */

const template = (project: 'butter' | 'iron') =>
  join(repoRoot, 'workflows-templates', project, 'scripts', 'ci', 'spark-test.sh');

let tmp: { dir: string; cleanup: () => void };
let fakeBin: string;
let f: LeaseFixture | null = null;

beforeAll(() => {
  tmp = tempDir('spark-templates-sh-');
  fakeBin = join(tmp.dir, 'bin');
  mkdirSync(fakeBin);
  // each call appends one line: the tool and its argv, separated by US (0x1f)
  const record = (tool: string) =>
    `{ printf '%s' '${tool}'; printf '\\037%s' "$@"; printf '\\n'; } >> "$RECORD"`;
  shellScript(
    join(fakeBin, 'python'),
    `${record('python')}\nprintf 'env HF_HOME=%s HF_HUB_OFFLINE=%s\\n' "$HF_HOME" "$HF_HUB_OFFLINE" >> "$RECORD"`,
  );
  // a cargo that also reports whether it runs under the shared target-dir lock
  shellScript(
    join(fakeBin, 'cargo'),
    `${record('cargo')}\nif flock -n "$CARGO_TARGET_DIR/.spark-build.lock" true; then echo 'lock free' >> "$RECORD"; else echo 'lock held' >> "$RECORD"; fi\necho "cargo $1 ok"`,
  );
});
afterEach(async () => {
  await f?.controller.close();
  f = null;
});
afterAll(() => tmp.cleanup());

function runTemplate(
  project: 'butter' | 'iron',
  topology: string,
  suite: string,
  env: Record<string, string> = {},
) {
  const dir = join(tmp.dir, `${project}-${Math.random().toString(16).slice(2)}`);
  const workDir = join(dir, 'work');
  const modelCache = join(dir, 'models');
  mkdirSync(workDir, { recursive: true });
  mkdirSync(modelCache, { recursive: true });
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

describe('Butter spark-test.sh template', () => {
  it('smoke runs the CUDA smoke tests offline against the managed model cache', () => {
    const r = runTemplate('butter', 'single', 'smoke');
    expect(r.code).toBe(0);
    expect(r.calls).toEqual([
      ['python', '-m', 'pytest', '-q', '-m', 'cuda_smoke', 'tests'],
      [`env HF_HOME=${r.modelCache}/huggingface HF_HUB_OFFLINE=1`],
    ]);
  });

  it('performance serves Qwen with a 512-token prompt, 32 decode tokens, 1 warmup, 2 runs', () => {
    const r = runTemplate('butter', 'single', 'performance');
    expect(r.code).toBe(0);
    expect(r.calls[0]).toEqual([
      'python',
      '-m',
      'butter.bench.serving',
      '--model',
      'Qwen/Qwen2.5-7B-Instruct',
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
  });

  it('refuses pair without a distributed assertion, a bad topology and a bad suite', () => {
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
  });
});

describe('Iron spark-test.sh template', () => {
  it('smoke runs CUDA correctness for add/multiply, GEMV and RMSNorm under the target-dir lock', () => {
    const r = runTemplate('iron', 'single', 'smoke');
    expect(r.code).toBe(0);
    expect(r.calls).toEqual([
      [
        'cargo',
        'test',
        '--release',
        '--locked',
        '--test',
        'cuda_correctness',
        '--',
        'add',
        'multiply',
        'gemv',
        'rmsnorm',
      ],
      ['lock held'],
    ]);
  });

  it('performance benches GEMV and RMSNorm with 2 warmups and 5 measured runs each', () => {
    const r = runTemplate('iron', 'single', 'performance');
    expect(r.code).toBe(0);
    const benches = r.calls.filter((c) => c[0] === 'cargo');
    expect(benches.map((c) => c.slice(1, 5))).toEqual([
      ['bench', '--locked', '--bench', 'gemv'],
      ['bench', '--locked', '--bench', 'rmsnorm'],
    ]);
    for (const b of benches) expect(b.slice(5, 10)).toEqual(['--', '--warmup', '2', '--runs', '5']);
    expect(r.calls.filter((c) => c[0] === 'lock held')).toHaveLength(2);
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
    // toolchain revisions are printed first, then correctness, then the two benches
    expect(cargo).toEqual(['--version', 'test', 'bench', 'bench']);
    const receipt = parseStoredReceipts((await f.reservationRow()).receiptJson)!.byHost[lease.hostId]!;
    expect(receipt.result).toBe('passed');
    expect(receipt.phases.map((p) => [p.suite, p.exitCode])).toEqual([
      ['smoke', 0],
      ['performance', 0],
    ]);
  });
});
