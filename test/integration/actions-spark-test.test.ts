import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { parseStoredReceipts } from '../../core/protocol/receipt.ts';
import { tempDir } from '../../scripts/sim/ledger.ts';
import {
  type GrantedLease,
  gitRepo,
  type LeaseFixture,
  runAction,
  runnerEnv,
  shellScript,
  startWithGrantedLease,
} from './actions-lease-fixture.ts';

/**
 * The spark-test action run as the runner runs it against a real controller on loopback, with a
 * consuming repository whose scripts/ci/spark-test.sh records what it was asked to run.
 */

const SCRIPT = `#!/usr/bin/env bash
set -euo pipefail
topology="$1"
echo "phase=\${SPARK_TEST_SUITE} topology=\${topology} lease-token=\${SPARK_LEASE_TOKEN:-absent} fencing=\${SPARK_FENCING_TOKEN:-absent}"
echo "lane=\${SPARK_LANE} target=\${SPARK_LANE_TARGET_MINUTES} deadline=\${SPARK_LANE_DEADLINE:-none} results=\${SPARK_RESULTS_DIR}"
echo "\${SPARK_TEST_SUITE}" >> "\${SPARK_WORK_DIR}/phases.txt"
test -d "\${SPARK_MODEL_CACHE}"
if [ "\${SPARK_FAIL_PHASE:-}" = "\${SPARK_TEST_SUITE}" ]; then
  for i in $(seq 1 60); do echo "noise line $i"; done
  echo "FAILED test_gemv: max abs err 3.2e-1 > 1e-3" >&2
  exit 3
fi
if [ -n "\${SPARK_SLOW:-}" ]; then sleep "\${SPARK_SLOW}"; fi
if [ -n "\${SPARK_HANG:-}" ]; then
  sleep 300 &
  echo "$$ $!" > "\${SPARK_HANG}"
  wait
fi
if [ "$topology" = pair ]; then bash "\${SPARK_DISTRIBUTED_ASSERTION}"; fi
echo "suite \${SPARK_TEST_SUITE} ok"
`;

let tmp: { dir: string; cleanup: () => void };
let repo: string;
let head: string;
let f: LeaseFixture | null = null;
let path: string;

beforeAll(() => {
  tmp = tempDir('spark-test-action-');
  repo = join(tmp.dir, 'iron');
  head = gitRepo(repo, {
    'scripts/ci/spark-test.sh': SCRIPT,
    'scripts/ci/assert-distributed.sh': '#!/usr/bin/env bash\necho "allreduce across 2 ranks matches"\n',
  });
  // a quick `python --version` (the host's pyenv shim takes seconds); the rest of PATH is real
  shellScript(join(tmp.dir, 'bin', 'python'), "echo 'Python 3.11.7'");
  path = `${join(tmp.dir, 'bin')}:${process.env.PATH}`;
});
afterEach(async () => {
  await f?.controller.close();
  f = null;
});
afterAll(() => tmp.cleanup());

/** True while `pid` runs; a zombie (exited, not yet reaped) counts as gone. */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

/** Polls `cond` until it holds or `ms` pass (no fixed sleeps). */
async function waitFor(cond: () => boolean, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 25));
  }
}

function dirs() {
  const workDir = join(tmp.dir, `work-${Math.random().toString(16).slice(2)}`);
  const modelCache = join(tmp.dir, `models-${Math.random().toString(16).slice(2)}`);
  mkdirSync(workDir);
  mkdirSync(modelCache);
  return { workDir, modelCache };
}

async function sparkTest(
  fx: LeaseFixture,
  lease: GrantedLease,
  inputs: Record<string, string> = {},
  env: Record<string, string> = {},
) {
  const d = dirs();
  const r = await runAction('spark-test', {
    inputs: {
      reservation_id: fx.reservation.id,
      head_sha: head,
      topology: fx.reservation.topology,
      suite: fx.reservation.suite!,
      ...inputs,
    },
    env: { ...runnerEnv(fx, lease, d), PATH: path, ...env },
    workspace: repo,
    tmp: tmp.dir,
  });
  const phasesFile = join(d.workDir, 'phases.txt');
  let phases: string[] = [];
  try {
    phases = readFileSync(phasesFile, 'utf8').trim().split('\n').filter(Boolean);
  } catch {
    phases = [];
  }
  return { ...r, phases };
}

async function stored(fx: LeaseFixture) {
  return parseStoredReceipts((await fx.reservationRow()).receiptJson);
}

describe('actions/spark-test (run as the runner runs it)', () => {
  it('runs the smoke suite, posts the receipt, and ties summary, log and ledger together', async () => {
    f = await startWithGrantedLease({ headSha: head });
    const lease = f.leases[0]!;
    const r = await sparkTest(f, lease);
    expect(r.output).toContain('::group::Toolchain and source revisions');
    expect(r.output).toContain(`source: ${head}`);
    // the PR's script gets no lease credentials
    expect(r.output).toContain('phase=smoke topology=single lease-token=absent fencing=absent');
    expect(r.code).toBe(0);
    expect(r.phases).toEqual(['smoke']);
    expect(r.outputs.result).toBe('passed');

    const log = readFileSync(r.outputs.log_path!);
    expect(createHash('sha256').update(log).digest('hex')).toBe(r.outputs.log_sha256);

    const receipt = (await stored(f))!.byHost['spark-2']!;
    expect(receipt).toMatchObject({
      reservationId: f.reservation.id,
      hostId: 'spark-2',
      fencingToken: lease.fencingToken,
      headSha: head,
      suite: 'smoke',
      topology: 'single',
      // the receipt names the backend that ran the work
      executor: 'dstack',
      result: 'passed',
      exitCode: 0,
      repo: 'acme/butter',
      runUrl: 'https://github.com/acme/butter/actions/runs/4242/attempts/1',
      log: { sha256: r.outputs.log_sha256 },
    });
    expect(receipt.lastLines).toBeUndefined();
    expect(receipt.toolchain.source).toBe(head);
    // the spec's lane and its target travel with the evidence; the script learns its target and
    // where its results go, never a deadline (a target is not a kill)
    expect(receipt.lane).toMatchObject({
      name: 'spark-test',
      targetMinutes: 30,
      withinTarget: true,
      overTarget: false,
      elapsedSeconds: Math.floor(receipt.lane!.elapsedMs / 1000),
    });
    expect(r.output).toContain(`lane=spark-test target=30 deadline=none results=${r.outputs.results_dir}`);
    expect(r.summary).toMatch(/spark-test: \d+\.\d of 30 min target — within target/);
    // the results dir holds the full log and the receipt as posted, for the workflow's artifact
    expect(r.outputs.log_path!.startsWith(`${r.outputs.results_dir}/`)).toBe(true);
    expect(readFileSync(join(r.outputs.results_dir!, 'receipt.json'), 'utf8')).toBe(
      `${JSON.stringify(receipt)}\n`,
    );
    expect(createHash('sha256').update(JSON.stringify(receipt)).digest('hex')).toBe(r.outputs.receipt_sha256);

    expect(r.summary).toContain('Spark test passed');
    expect(r.summary).toContain(r.outputs.receipt_sha256);
    expect(r.summary).toContain('recorded by the controller');
    // the job's receipt is detail: the check's verdict is the host's (ADR 0160)
    expect(r.summary).toContain("the check's verdict comes from the Spark agent's own evidence on the host");
    // `::add-mask::` is consumed by the runner (it masks the value from then on), never shown
    const shown = r.output
      .split('\n')
      .filter((l) => !l.startsWith('::add-mask::'))
      .join('\n');
    expect(r.output).toContain(`::add-mask::${lease.jobToken}`);
    for (const secret of [lease.jobToken, lease.leaseId, 'fencingToken']) {
      expect(r.summary).not.toContain(secret);
      expect(shown).not.toContain(secret);
    }
    const events = (await f.ledger.history('reservation', f.reservation.id)).filter(
      (e) => e.type === 'reservation.receipt',
    );
    expect(events).toHaveLength(1);
  });

  it('a failing lane fails with its exit and the last log lines', async () => {
    f = await startWithGrantedLease({ headSha: head, suite: 'performance' });
    const lease = f.leases[0]!;
    const failing = await sparkTest(f, lease, {}, { SPARK_FAIL_PHASE: 'performance' });
    expect(failing.code).toBe(1);
    expect(failing.phases).toEqual(['performance']);
    expect(failing.output).toContain('::error::Spark test failed: spark-test-long (performance) exited 3');
    const receipt = (await stored(f))!.byHost['spark-2']!;
    expect(receipt.result).toBe('failed');
    expect(receipt.phases).toEqual([{ suite: 'performance', exitCode: 3, durationMs: expect.any(Number) }]);
    expect(receipt.lastLines).toHaveLength(40);
    expect(receipt.lastLines!.at(-1)).toBe('FAILED test_gemv: max abs err 3.2e-1 > 1e-3');
    expect(failing.summary).toContain('Spark test failed');
    expect(failing.summary).toContain('FAILED test_gemv');
  });

  it('runs the script once for the performance lane: the script runs correctness first itself', async () => {
    f = await startWithGrantedLease({ headSha: head, suite: 'performance' });
    const r = await sparkTest(f, f.leases[0]!);
    expect(r.code).toBe(0);
    expect(r.phases).toEqual(['performance']);
    const receipt = (await stored(f))!.byHost['spark-2']!;
    expect(receipt.phases.map((p) => p.suite)).toEqual(['performance']);
    expect(receipt.lane).toMatchObject({ name: 'spark-test-long', targetMinutes: 60, overTarget: false });
    expect(r.output).toContain('lane=spark-test-long target=60 deadline=none');
  });

  it('never stops a run over its lane time target: the receipt, the summary and a warning say it went over', async () => {
    f = await startWithGrantedLease({ headSha: head, suite: 'performance' });
    const lease = f.leases[0]!;
    // 0.001 minutes (60 ms): the script's half-second run is over its target
    const r = await sparkTest(f, lease, { time_target_minutes: '0.001' }, { SPARK_SLOW: '0.5' });
    expect(r.code).toBe(0);
    expect(r.outputs.result).toBe('passed');
    expect(r.output).toContain('suite performance ok');
    expect(r.output).toMatch(
      /::warning::lane spark-test-long took \d+\.\d min, over its 0\.001-minute target/,
    );
    const receipt = (await stored(f))!.byHost['spark-2']!;
    expect(receipt.result).toBe('passed');
    expect(receipt.reason).toBeUndefined();
    expect(receipt.lane).toMatchObject({
      name: 'spark-test-long',
      targetMinutes: 0.001,
      withinTarget: false,
      overTarget: true,
    });
    expect(receipt.lane!.elapsedMs).toBeGreaterThan(60);
    expect(r.summary).toContain(
      "over target (a target, not a limit: the job's limit is its timeout-minutes)",
    );
    const bad = await sparkTest(f, lease, { time_target_minutes: 'soon' });
    expect(bad.code).toBe(1);
    expect(bad.output).toContain('time_target_minutes must be a number of minutes');
  });

  it('fails a pair with a clear message until a distributed assertion is declared', async () => {
    f = await startWithGrantedLease({ headSha: head, topology: 'pair' });
    const [a, b] = [f.leases[0]!, f.leases[1]!];
    const refused = await sparkTest(f, a);
    expect(refused.code).toBe(1);
    expect(refused.phases).toEqual([]);
    expect(refused.output).toContain(
      '::error::Spark test failed: topology pair needs a real distributed assertion: declare a script that proves both hosts computed together (SPARK_DISTRIBUTED_ASSERTION or the distributed_assertion input)',
    );
    const receipt = (await stored(f))!.byHost[a.hostId]!;
    expect(receipt.result).toBe('failed');
    expect(receipt.reason).toContain('distributed assertion');

    const missing = await sparkTest(f, b, { distributed_assertion: 'scripts/ci/nope.sh' });
    expect(missing.code).toBe(1);
    expect(missing.output).toContain('the declared distributed assertion scripts/ci/nope.sh does not exist');
  });

  it('runs a pair on both hosts when the assertion exists, each posting its receipt', async () => {
    f = await startWithGrantedLease({ headSha: head, topology: 'pair' });
    for (const lease of f.leases) {
      const r = await sparkTest(
        f,
        lease,
        {},
        { SPARK_DISTRIBUTED_ASSERTION: 'scripts/ci/assert-distributed.sh' },
      );
      expect(r.output).toContain('allreduce across 2 ranks matches');
      expect(r.code).toBe(0);
    }
    const all = (await stored(f))!;
    expect(Object.values(all.byHost).map((x) => [x.hostId, x.result])).toEqual([
      ['spark-1', 'passed'],
      ['spark-2', 'passed'],
    ]);
  });

  it('fails the job when the controller refuses the receipt (stale fencing token)', async () => {
    f = await startWithGrantedLease({ headSha: head });
    const lease = f.leases[0]!;
    const r = await sparkTest(f, lease, {}, { SPARK_FENCING_TOKEN: String(lease.fencingToken + 5) });
    expect(r.phases).toEqual(['smoke']);
    expect(r.code).toBe(1);
    expect(r.output).toMatch(
      /::error::job receipt not recorded: controller refused the receipt \(409 stale_fencing_token: fencing token \d+ for spark-2 is not current/,
    );
    expect(r.summary).toContain('controller refused the receipt');
    expect((await f.reservationRow()).receiptJson).toBeNull();
  });

  it('on job cancellation stops only its own test process and posts a cancelled receipt', async () => {
    f = await startWithGrantedLease({ headSha: head });
    const lease = f.leases[0]!;
    const pidFile = join(tmp.dir, `hang-${Date.now()}.pid`);
    const d = dirs();
    const r = await runAction('spark-test', {
      inputs: { reservation_id: f.reservation.id, head_sha: head, topology: 'single', suite: 'smoke' },
      env: { ...runnerEnv(f, lease, d), PATH: path, SPARK_HANG: pidFile },
      workspace: repo,
      tmp: tmp.dir,
      onStart: (child) => {
        // the runner cancels a job by signalling the step process once the test is under way
        void waitFor(() => existsSync(pidFile) && readFileSync(pidFile, 'utf8').trim() !== '', 20_000).then(
          () => child.kill('SIGTERM'),
        );
      },
    });
    const pids = readFileSync(pidFile, 'utf8').trim().split(' ').map(Number);
    expect(r.code).toBe(1);
    expect(r.outputs.result).toBe('cancelled');
    expect(r.output).toContain('::error::Spark test cancelled');
    const receipt = (await stored(f))!.byHost['spark-2']!;
    expect(receipt.result).toBe('cancelled');
    expect(receipt.phases[0]!.exitCode).not.toBe(0);
    // the script and its own child (one process group, started by the action) are gone
    await waitFor(() => pids.every((pid) => !alive(pid)), 10_000);
  });

  it('refuses a runner started for another reservation or topology', async () => {
    f = await startWithGrantedLease({ headSha: head });
    const lease = f.leases[0]!;
    const other = await sparkTest(f, lease, { reservation_id: 'r-77' });
    expect(other.code).toBe(1);
    expect(other.output).toContain(`this runner was started for reservation ${f.reservation.id}, not r-77`);
    const topo = await sparkTest(f, lease, { topology: 'pair' });
    expect(topo.code).toBe(1);
    expect(topo.output).toContain('topology input is pair but this runner was admitted for single');
    expect(other.phases).toEqual([]);
  });
});
