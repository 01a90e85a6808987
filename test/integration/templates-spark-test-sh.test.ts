import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listing } from '../../scripts/sim/harness/lanes.ts';
import { tempDir } from '../../scripts/sim/ledger.ts';
import { readOnlyView } from '../helpers/read-only-view.ts';
import { repoRoot } from './actions-lease-fixture.ts';

/**
 * What the Butter and Iron lane scripts refuse before they do anything: bad input gets one line
 * on stderr, exit 2, and no file anywhere (work dir, model cache, build cache). The scripts run in
 * a directory that is no cargo workspace, so a case that reached cargo would print cargo's own
 * error, not the one line expected; the lanes themselves run on Debian's real cargo in
 * templates-lanes-{butter,iron}.test.ts. Also: both scripts share one prelude, word for word.
 */

const PROJECTS = ['butter', 'iron'] as const;
type Project = (typeof PROJECTS)[number];
const script = (p: Project) => join(repoRoot, 'workflows-templates', p, 'scripts', 'ci', 'spark-test.sh');

let tmp: { dir: string; cleanup: () => void };
let n = 0;

beforeAll(() => {
  tmp = tempDir('spark-lane-input-');
});
afterAll(() => tmp.cleanup());

/** Fresh controller-provided dirs: work dir, model cache and build cache. */
function dirs() {
  const root = join(tmp.dir, `run-${++n}`);
  const d = { work: join(root, 'work'), models: join(root, 'models'), cache: join(root, 'cache') };
  for (const p of Object.values(d)) mkdirSync(p, { recursive: true });
  return { root, ...d };
}

function run(
  project: Project,
  args: string[],
  env: Record<string, string>,
  opts: { readOnly?: string } = {},
): { code: number | null; stdout: string; stderr: string } {
  const base = { PATH: '/usr/bin:/bin', HOME: tmp.dir, ...env };
  const [cmd, argv] = opts.readOnly
    ? readOnlyView(opts.readOnly, '/bin/bash', [script(project), ...args])
    : ['/bin/bash', [script(project), ...args]];
  const r = spawnSync(cmd, argv, { env: base, encoding: 'utf8', cwd: tmp.dir });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('the lane scripts refuse bad input before touching anything', () => {
  for (const project of PROJECTS) {
    const name = project === 'butter' ? 'Butter' : 'Iron';

    it(`${name}: each refusal is one line, exit 2, and no file written anywhere`, () => {
      const d = dirs();
      const env = (over: Record<string, string | undefined> = {}) => {
        const e: Record<string, string | undefined> = {
          SPARK_TEST_SUITE: 'smoke',
          SPARK_WORK_DIR: d.work,
          SPARK_MODEL_CACHE: d.models,
          SPARK_BUILD_CACHE_DIR: d.cache,
          ...over,
        };
        return Object.fromEntries(Object.entries(e).filter((x): x is [string, string] => x[1] !== undefined));
      };
      const cases: [string[], Record<string, string | undefined>, string][] = [
        [
          ['single'],
          { SPARK_WORK_DIR: undefined },
          'SPARK_WORK_DIR is not set: run this through the Spark workflow on a runner the Spark agent started (the agent provides it)',
        ],
        [
          ['single'],
          { SPARK_MODEL_CACHE: undefined },
          'SPARK_MODEL_CACHE is not set: run this through the Spark workflow on a runner the Spark agent started (the agent provides it)',
        ],
        [
          ['single'],
          { SPARK_TEST_SUITE: undefined },
          'SPARK_TEST_SUITE is not set (smoke or performance): run this through the Spark workflow on a runner the Spark agent started',
        ],
        [
          ['single'],
          { SPARK_TEST_SUITE: 'soak' },
          "SPARK_TEST_SUITE must be smoke or performance (got 'soak')",
        ],
        [['triple'], {}, "usage: scripts/ci/spark-test.sh <single|pair> (got 'triple')"],
        [[], {}, 'usage: scripts/ci/spark-test.sh <single|pair> (got 0 arguments)'],
        [['single', 'extra'], {}, 'usage: scripts/ci/spark-test.sh <single|pair> (got 2 arguments)'],
        [['single'], { SPARK_WORK_DIR: 'work' }, "SPARK_WORK_DIR must be an absolute path (got 'work')"],
        [
          ['single'],
          { SPARK_MODEL_CACHE: join(d.root, 'nowhere') },
          `SPARK_MODEL_CACHE ${join(d.root, 'nowhere')} is not a directory`,
        ],
        [
          ['single'],
          { SPARK_BUILD_CACHE_DIR: join(d.root, 'nowhere') },
          `SPARK_BUILD_CACHE_DIR ${join(d.root, 'nowhere')} is not a directory`,
        ],
        [
          ['single'],
          { SPARK_RESULTS_DIR: 'results' },
          "SPARK_RESULTS_DIR must be an absolute path (got 'results')",
        ],
        [
          ['single'],
          { SPARK_LANE_TARGET_MINUTES: 'soon' },
          "SPARK_LANE_TARGET_MINUTES must be a number of minutes (got 'soon')",
        ],
        [
          ['pair'],
          {},
          `topology pair refused: ${name} has no distributed test yet, and a pair run must exercise both hosts together, never run independent commands on two of them; request single-host runs`,
        ],
      ];
      const before = listing(d.root);
      for (const [args, over, line] of cases) {
        const r = run(project, args, env(over));
        expect({ args, over, code: r.code, stdout: r.stdout, stderr: r.stderr }).toEqual({
          args,
          over,
          code: 2,
          stdout: '',
          stderr: `spark-test: ${line}\n`,
        });
        expect(listing(d.root)).toEqual(before);
      }
    });

    it(`${name}: a build cache the job cannot write is refused, and nothing is written`, () => {
      const d = dirs();
      const before = listing(d.root);
      const r = run(
        project,
        ['single'],
        {
          SPARK_TEST_SUITE: 'smoke',
          SPARK_WORK_DIR: d.work,
          SPARK_MODEL_CACHE: d.models,
          SPARK_BUILD_CACHE_DIR: d.cache,
        },
        { readOnly: d.cache },
      );
      expect(r.stderr).toBe(
        `spark-test: SPARK_BUILD_CACHE_DIR ${d.cache} is not writable by this job: the shared build cache must be (the Spark agent provides it per repository)\n`,
      );
      expect(r.code).toBe(2);
      expect(listing(d.root)).toEqual(before);
    });
  }

  it("Iron: empty filter or bench lists are refused (the lane is a filtered subset, never 'everything')", () => {
    const d = dirs();
    const env = { SPARK_TEST_SUITE: 'smoke', SPARK_WORK_DIR: d.work, SPARK_MODEL_CACHE: d.models };
    const before = listing(d.root);
    expect(run('iron', ['single'], { ...env, IRON_CORRECTNESS_FILTERS: ' ' }).stderr).toBe(
      'spark-test: IRON_CORRECTNESS_FILTERS is empty: the smoke lane is a filtered correctness subset\n',
    );
    expect(run('iron', ['single'], { ...env, IRON_BENCHES: ' ' }).stderr).toBe(
      'spark-test: IRON_BENCHES is empty: the performance lane runs the GEMV and RMSNorm benches\n',
    );
    expect(listing(d.root)).toEqual(before);
  });

  it('Butter: the model filter must be one libtest name filter', () => {
    const d = dirs();
    const r = run('butter', ['single'], {
      SPARK_TEST_SUITE: 'smoke',
      SPARK_WORK_DIR: d.work,
      SPARK_MODEL_CACHE: d.models,
      BUTTER_MODEL_TEST_FILTER: 'qwen --exact',
    });
    expect(r.stderr).toBe(
      "spark-test: BUTTER_MODEL_TEST_FILTER must be one libtest name filter (letters, digits, _ and ::), got 'qwen --exact'\n",
    );
    expect(r.code).toBe(2);
  });
});

describe('one prelude for both lanes', () => {
  it('the common part of the Butter and Iron scripts is the same, word for word', () => {
    const prelude = (p: Project) => {
      const text = readFileSync(script(p), 'utf8');
      const start = text.indexOf('# ---- begin common lane prelude');
      const end = text.indexOf('# ---- end common lane prelude ----');
      expect(start, p).toBeGreaterThan(0);
      expect(end, p).toBeGreaterThan(start);
      return text.slice(start, end);
    };
    expect(prelude('butter')).toBe(prelude('iron'));
  });
});
