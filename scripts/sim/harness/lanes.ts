import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import {
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { join, relative } from 'node:path';

/**
 * Runs the shipped Butter and Iron lane scripts the way a consuming repository does: the fixture
 * workspace (scripts/sim/fixtures/lanes/) is copied into a fresh git checkout, the script is installed by
 * scripts/ci/install-spark-templates.sh and committed, and the script runs with Debian's cargo.
 *
 * Debian's `/usr/bin/cargo` and `/usr/bin/rustc`, never a rustup toolchain earlier on PATH
 * (`~/.cargo/bin`): they are pinned by the distribution (no toolchain download, no network) and
 * match the offline crates directory Debian ships for them (/usr/share/cargo/registry, read
 * through scripts/sim/fixtures/lanes/cargo-config.toml), which is built for Debian's rustc.
 * Also used by `npm run bench -- lanes` (scripts/bench/lanes.ts), so it imports no test runner.
 */

const repoRoot = join(import.meta.dirname, '..', '..', '..');
export const DEBIAN_CARGO = '/usr/bin/cargo';
export const DEBIAN_RUSTC = '/usr/bin/rustc';
const FIXTURES = join(repoRoot, 'scripts', 'sim', 'fixtures', 'lanes');
const INSTALLER = join(repoRoot, 'scripts', 'ci', 'install-spark-templates.sh');
const PIN = 'acme/spark-controller@0123456789abcdef0123456789abcdef01234567';

/** Fails with the fix when Debian's toolchain is missing (scripts/setup-test-deps.sh installs it). */
export function requireDebianRust(): { cargo: string; rustc: string } {
  for (const p of [DEBIAN_CARGO, DEBIAN_RUSTC, '/usr/share/cargo/registry']) {
    if (!existsSync(p))
      throw new Error(
        `${p} is missing: run scripts/setup-test-deps.sh (Debian cargo, rustc, librust-criterion-dev)`,
      );
  }
  const version = (bin: string) => execFileSync(bin, ['--version'], { encoding: 'utf8' }).trim();
  return { cargo: version(DEBIAN_CARGO), rustc: version(DEBIAN_RUSTC) };
}

/** A test-local CARGO_HOME whose config reads crates.io from Debian's crates directory, offline. */
export function cargoHome(dir: string): string {
  mkdirSync(dir, { recursive: true });
  copyFileSync(join(FIXTURES, 'cargo-config.toml'), join(dir, 'config.toml'));
  return dir;
}

const git = (cwd: string, ...args: string[]) =>
  execFileSync('git', args, {
    cwd,
    encoding: 'utf8',
    env: {
      PATH: '/usr/bin:/bin',
      HOME: cwd,
      GIT_CONFIG_NOSYSTEM: '1',
      GIT_AUTHOR_NAME: 'Test',
      GIT_AUTHOR_EMAIL: 'test@example.invalid',
      GIT_COMMITTER_NAME: 'Test',
      GIT_COMMITTER_EMAIL: 'test@example.invalid',
    },
  }).trim();

/**
 * A checkout of the fixture workspace `project` at `dir` with the lane script installed and
 * committed, as the repository would hold it; `overlay` files are written over it first.
 * Returns the commit.
 */
export function adopt(project: 'butter' | 'iron', dir: string, overlay: Record<string, string> = {}): string {
  mkdirSync(dir, { recursive: true });
  git(dir, 'init', '-q', '-b', 'main');
  cpSync(join(FIXTURES, project), dir, { recursive: true });
  for (const [path, text] of Object.entries(overlay)) writeFileSync(join(dir, path), text);
  const installed = execFileSync('bash', [INSTALLER, project, dir, PIN], { encoding: 'utf8' });
  if (!installed.includes('installed')) throw new Error(`install-spark-templates.sh: ${installed}`);
  git(dir, 'add', '-A');
  git(dir, 'commit', '-q', '-m', `adopt the Spark lane (${project})`);
  return git(dir, 'rev-parse', 'HEAD');
}

/**
 * A new lease's checkout of `project` where a Spark runner puts it: `<runnerDir>/_work/<name>/<name>`,
 * the same path in every lease of the repository (actions/checkout's `$GITHUB_WORKSPACE`; the
 * lease sees the runner dir at one path, agent/host/spark-lease-sandbox.sh). Whatever an earlier
 * lease left there is removed first: the files are new, as in a new lease.
 */
export function runnerCheckout(
  project: 'butter' | 'iron',
  runnerDir: string,
  overlay: Record<string, string> = {},
): { checkout: string; head: string } {
  const checkout = join(runnerDir, '_work', project, project);
  rmSync(checkout, { recursive: true, force: true });
  return { checkout, head: adopt(project, checkout, overlay) };
}

export interface LaneDirs {
  work: string;
  models: string;
  /** SPARK_BUILD_CACHE_DIR; absent: the cold build in the work dir. */
  cache?: string;
  /** The file every fixture test and bench appends its name to. */
  ran: string;
}

/** Makes a lease's dirs under `root` (the build cache is passed in: it outlives leases). */
export function leaseDirs(root: string, cache?: string): LaneDirs {
  const d = { work: join(root, 'work'), models: join(root, 'models'), ran: join(root, 'ran.log') };
  mkdirSync(d.work, { recursive: true });
  mkdirSync(d.models, { recursive: true });
  return cache ? { ...d, cache } : d;
}

/** The environment a Spark runner gives the script, with Debian's toolchain first and alone. */
export function laneEnv(
  suite: string,
  d: LaneDirs,
  home: string,
  extra: Record<string, string> = {},
): Record<string, string> {
  return {
    // no ~/.cargo/bin: `cargo` and `rustc` resolve to Debian's
    PATH: '/usr/bin:/bin',
    HOME: home,
    CARGO_HOME: join(home, 'cargo'),
    RUSTC: DEBIAN_RUSTC,
    SPARK_TEST_SUITE: suite,
    SPARK_WORK_DIR: d.work,
    SPARK_MODEL_CACHE: d.models,
    ...(d.cache ? { SPARK_BUILD_CACHE_DIR: d.cache } : {}),
    LANE_FIXTURE_LOG: d.ran,
    ...extra,
  };
}

export interface LaneRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the checkout's scripts/ci/spark-test.sh; `onStart` sees the process (e.g. to watch its output). */
export function runLane(
  checkout: string,
  args: string[],
  env: Record<string, string>,
  onStart?: (child: ChildProcess, output: () => string) => void,
): Promise<LaneRun> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', [join(checkout, 'scripts', 'ci', 'spark-test.sh'), ...args], {
      cwd: checkout,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => {
      stdout += d;
    });
    child.stderr.setEncoding('utf8').on('data', (d: string) => {
      stderr += d;
    });
    onStart?.(child, () => stdout + stderr);
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** What ran, in order, from the fixture's log (empty when nothing did). */
export function ran(d: LaneDirs): string[] {
  return existsSync(d.ran) ? readFileSync(d.ran, 'utf8').split('\n').filter(Boolean) : [];
}

export interface LaneStep {
  name: string;
  ms: number;
  lockWaitMs: number;
  /** CPU time of the step's commands (cargo and what it waited for), load-independent. */
  cpuMs: number;
  exit: number;
  compiled?: number;
  compiledWorkspace?: number;
  fresh?: number;
  passed?: number;
}

export interface LaneRecord {
  lane: string;
  suite: string;
  topology: string;
  targetMinutes: number;
  elapsedSeconds: number;
  overTarget: boolean;
  exit: number;
  buildCache: 'shared' | 'cold';
  /** What the lane did with its sources' times (docs/adr/0230-warm-builds-by-content.md). */
  sourceTimes: {
    status: 'off' | 'new' | 'restored';
    restored?: number;
    new?: number;
    untracked?: number;
    ms?: number;
    cpuMs?: number;
  };
  steps: LaneStep[];
}

export const resultsDir = (d: LaneDirs) => join(d.work, 'spark-results');

/** The lane's own record (spark-lane.json in the results dir). */
export function laneRecord(d: LaneDirs): LaneRecord {
  return JSON.parse(readFileSync(join(resultsDir(d), 'spark-lane.json'), 'utf8')) as LaneRecord;
}

/** Cargo's compiler-artifact messages of one build step: package id and whether it was fresh. */
export function artifacts(d: LaneDirs, step: string): { packageId: string; fresh: boolean }[] {
  return readFileSync(join(resultsDir(d), `cargo-build-${step}.jsonl`), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { reason: string; package_id: string; fresh: boolean })
    .filter((m) => m.reason === 'compiler-artifact')
    .map((m) => ({ packageId: m.package_id, fresh: m.fresh }));
}

/** Every file and directory under `dir`, relative, sorted (to prove a run wrote nothing). */
export function listing(dir: string): string[] {
  if (!existsSync(dir)) return [];
  const out: string[] = [];
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      out.push(relative(dir, p));
      if (e.isDirectory()) walk(p);
    }
  };
  walk(dir);
  return out.sort();
}

/** Puts `model` into a managed model cache the way huggingface_hub lays it out; returns the snapshot. */
export function prewarm(modelCache: string, model: string, rev: string, config: object): string {
  const repoDir = join(modelCache, 'huggingface', 'hub', `models--${model.replace('/', '--')}`);
  mkdirSync(join(repoDir, 'refs'), { recursive: true });
  mkdirSync(join(repoDir, 'snapshots', rev), { recursive: true });
  writeFileSync(join(repoDir, 'refs', 'main'), rev);
  writeFileSync(join(repoDir, 'snapshots', rev, 'config.json'), JSON.stringify(config));
  return join(repoDir, 'snapshots', rev);
}
