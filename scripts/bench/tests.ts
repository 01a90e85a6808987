/**
 * `npm run bench -- tests`: the developer loop's wall times, `tests.fastS` (`npm run test:fast`)
 * and `tests.fullS` (`npm test`), each from a fresh clone as a newcomer runs them
 * (docs/performance.md, "Test wall time"). A fresh clone matters: vitest orders files by its
 * results cache (node_modules/.vite) when one exists and by test/setup/durations.json otherwise,
 * and a checkout that ran the suite before has that cache.
 *
 * The clone is of the committed HEAD (`git clone --local`, into a temp dir beside the checkout,
 * removed afterwards; uncommitted changes are not measured),
 * installed with `npm ci --prefer-offline` (timed apart, not part of either figure). Both commands
 * run as child processes; their output goes to log files kept in the temp dir (the paths are
 * printed; vitest's per-file times are there), their exit codes are recorded, and a failed run is
 * a failed part. The 1-minute load average is sampled every 5 s while each runs, because
 * these figures move with whatever else the machine runs (they are not comparable across loads).
 *
 * A plain `npm run bench` runs it last (scripts/bench/run.ts), so its ~5 minutes of both cores
 * disturb no other part's figures; alone: `npm run bench -- tests`.
 */
import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, closeSync, mkdtempSync, openSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import type { BenchRunner } from './types.ts';

const root = resolve(import.meta.dirname, '..', '..');
/** Targets from the developer-loop goals (docs/performance.md, "Test wall time"). */
const FAST_TARGET_S = 60;
const FULL_TARGET_S = 300;

interface Timed {
  seconds: number;
  exitCode: number;
  load1: { start: number; mean: number; max: number; end: number };
}

/** Runs `npm <args>` in `cwd` with its output to `log`, timing it and sampling the load average. */
function timeNpm(cwd: string, args: string[], log: string): Promise<Timed> {
  return new Promise((done, fail) => {
    const samples = [loadavg()[0]!];
    const timer = setInterval(() => samples.push(loadavg()[0]!), 5_000);
    const t0 = performance.now();
    const out = openSync(log, 'w');
    const child = spawn('npm', args, { cwd, stdio: ['ignore', out, out] });
    child.once('error', (e) => {
      clearInterval(timer);
      fail(e);
    });
    child.once('close', (code) => {
      clearInterval(timer);
      closeSync(out);
      const end = loadavg()[0]!;
      samples.push(end);
      const r = (x: number) => Math.round(x * 100) / 100;
      done({
        seconds: Math.round((performance.now() - t0) / 100) / 10,
        exitCode: code ?? 1,
        load1: {
          start: r(samples[0]!),
          mean: r(samples.reduce((a, b) => a + b, 0) / samples.length),
          max: r(Math.max(...samples)),
          end: r(end),
        },
      });
    });
  });
}

export const run: BenchRunner = async (progress) => {
  // beside the checkout, not under /tmp: the e2e fleets run each host's runner as its own user
  // in its lease sandbox (when root), which binds a fresh /tmp (agent/host/spark-lease-sandbox.sh),
  // so a clone under /tmp cannot run the runner's test doubles (scripts/sim/doubles/fake-runner.mjs);
  // 0711 lets those users through
  const dir = mkdtempSync(join(dirname(root), '.spark-bench-tests-'));
  chmodSync(dir, 0o711);
  const logs = mkdtempSync(join(tmpdir(), 'spark-bench-tests-logs-'));
  const logOf = (name: string) => join(logs, `${name}.log`);
  try {
    const clone = join(dir, 'spark-controller');
    const head = execFileSync('git', ['rev-parse', 'HEAD'], { cwd: root, encoding: 'utf8' }).trim();
    execFileSync('git', ['clone', '--quiet', '--local', root, clone], { stdio: 'ignore' });
    progress(`fresh clone of ${head.slice(0, 12)}; npm ci`);
    const install = await timeNpm(
      clone,
      ['ci', '--prefer-offline', '--no-audit', '--no-fund'],
      logOf('npm-ci'),
    );
    if (install.exitCode !== 0)
      throw new Error(`npm ci in the clone failed (exit ${install.exitCode}; ${logOf('npm-ci')})`);
    progress(`npm run test:fast (load ${loadavg()[0]!.toFixed(1)})`);
    const fast = await timeNpm(clone, ['run', 'test:fast'], logOf('test-fast'));
    progress(`  ${fast.seconds} s, exit ${fast.exitCode}; npm test (load ${loadavg()[0]!.toFixed(1)})`);
    const full = await timeNpm(clone, ['test'], logOf('test-full'));
    progress(`  ${full.seconds} s, exit ${full.exitCode}; output in ${logs}`);
    const failed = [
      ...(fast.exitCode ? [`npm run test:fast exited ${fast.exitCode}`] : []),
      ...(full.exitCode ? [`npm test exited ${full.exitCode}`] : []),
    ];
    if (failed.length) throw new Error(`${failed.join('; ')} (fresh clone of ${head}; output in ${logs})`);
    const load = (t: Timed) => `load ${t.load1.start}→${t.load1.end} (mean ${t.load1.mean})`;
    return {
      key: 'tests',
      json: {
        commit: head,
        fastS: fast.seconds,
        fullS: full.seconds,
        fast,
        full,
        npmCiS: install.seconds,
        logs,
        conditions:
          'fresh git clone of HEAD, npm ci --prefer-offline, then npm run test:fast and npm test as child processes; load1 = 1-minute load average sampled every 5 s',
      },
      rows: [
        {
          metric: `npm run test:fast wall time (${load(fast)})`,
          value: `${fast.seconds} s`,
          target: `≤ ${FAST_TARGET_S} s`,
          met: fast.seconds <= FAST_TARGET_S,
        },
        {
          metric: `npm test wall time, fresh clone (${load(full)})`,
          value: `${full.seconds} s`,
          target: `≤ ${FULL_TARGET_S} s`,
          met: full.seconds <= FULL_TARGET_S,
        },
      ],
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
};
