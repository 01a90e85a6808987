import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  AMD64_ONLY_IMAGE,
  type DstackStandIn,
  MULTI_ARCH_IMAGE,
  startDstackStandIn,
} from '../../scripts/sim/doubles/dstack/server.ts';
import { NO_LIVENESS_TIMINGS } from '../../scripts/sim/doubles/fleet.ts';
import { waitFor } from '../../scripts/sim/doubles/index.ts';
import { REPO } from '../../scripts/sim/harness/github-sim.ts';
import { FAST_TICK_MS, queuedId, type SparkSystem, startSystem } from '../../scripts/sim/harness/system.ts';

/**
 * The task-start timeout (ADR 0120) end to end: the real controller and agent processes, the fake
 * GitHub, and the dstack stand-in holding the task's run in `provisioning` (its instance never
 * becomes ready). The agent submits the task but reports no start (dstack never says `running`);
 * after `timings.taskStartTimeoutS` the controller ends the work as `task_not_started`; the agent
 * stops the run through dstack and reports `cleaned` only once dstack says `terminated`. And when
 * dstack gives up on the run itself first (its runner never answered, or no instance of the fleet
 * fits the run's image), the work fails at once with dstack's reason.
 */

const TIMEOUT_S = 3;

let sys: SparkSystem | null = null;
let dstack: DstackStandIn | null = null;
let dir: string | null = null;
afterEach(async () => {
  expect(sys?.gh.violations ?? []).toEqual([]);
  await sys?.close();
  sys = null;
  if (dstack) {
    expect(dstack.invalid).toEqual([]);
    expect(dstack.active().map((r) => r.name)).toEqual([]);
    await dstack.close();
  }
  dstack = null;
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = null;
});

/** The controller and one agent whose repository's CI runs as a dstack task on `d`. */
async function startTaskSystem(d: DstackStandIn, image = MULTI_ARCH_IMAGE): Promise<SparkSystem> {
  dir = mkdtempSync(join(tmpdir(), 'spark-task-start-'));
  const tokenFile = join(dir, 'dstack-token');
  writeFileSync(tokenFile, `${d.token}\n`, { mode: 0o600 });
  const s = await startSystem({
    // only completed checks' summaries are read (see FAST_TICK_MS)
    tickMs: FAST_TICK_MS,
    hosts: [{ id: 'spark-2' }],
    timings: { ...NO_LIVENESS_TIMINGS, taskStartTimeoutS: TIMEOUT_S },
    controllerConfig: (c) => ({ ...c, repositories: { [REPO]: { executor: 'dstack', ci: 'task' } } }),
    agentConfig: (hostId, c) => ({
      ...c,
      dstack: { url: d.url, project: d.project, tokenFile, fleet: hostId, image, requestTimeoutS: 2 },
    }),
  });
  // the agent's own dirs are the host's, not the job container's (scripts/sim/doubles/dstack/container.ts)
  d.hostOnly.push(...['work', 'state', 'models'].map((x) => join(s.dir, 'spark-2', x)));
  return s;
}

describe('task-start timeout (stand-in dstack, fake GitHub)', { timeout: 120_000 }, () => {
  it('a task dstack keeps provisioning ends as task_not_started; the run is stopped and terminated before the host is freed', async () => {
    dstack = await startDstackStandIn();
    const d = dstack;
    d.faults.holdProvisioning = 1;
    // every stop is refused until the test lets dstack answer
    d.faults.stop5xx = 1_000_000;
    sys = await startTaskSystem(d);
    const s = sys;
    const sha = 'c'.repeat(40);
    s.openPr(1, { sha });
    const rid = queuedId(await s.label(1, 'spark-test'));

    // the task is submitted and held in provisioning: no start is reported for it
    const run = await waitFor(
      'the task submitted and provisioning',
      () =>
        [...d.runs.values()].find((r) => r.name.startsWith(`spark-${rid}-`) && r.status === 'provisioning'),
      30_000,
    );
    expect((await s.leases(rid))[0]?.runnerStartedAt ?? null).toBeNull();

    const releasing = await s.waitReservation(rid, ['releasing', 'failed', 'done'], 60_000);
    expect(releasing, await s.diagnostics()).toMatchObject({ outcome: 'task_not_started' });
    expect(releasing.reason).toBe(
      `dstack did not start the CI task on spark-2 within ${TIMEOUT_S} s of its hand-over (not retried)`,
    );
    // dstack refuses the stops (unreachable behind a proxy): the run keeps provisioning, and
    // nothing frees the host meanwhile, however often the agent tries
    await waitFor(
      'stops refused by dstack',
      () => d.calls.filter((c) => c.route === 'stop').length >= 2,
      30_000,
    );
    expect(run.status).toBe('provisioning');
    expect((await s.reservation(rid)).status).toBe('releasing');
    expect((await s.leases(rid))[0]?.status).toBe('releasing');
    expect((await s.host('spark-2')).phase).toBe('cleaning');
    d.faults.stop5xx = 0;

    const ended = await s.waitReservation(rid, ['failed', 'done'], 60_000);
    expect(ended).toMatchObject({ status: 'failed', outcome: 'task_not_started', reason: releasing.reason });
    // stopped through dstack from provisioning, never run, confirmed terminated before the release
    expect(run.history).toEqual(['submitted', 'provisioning', 'terminating', 'terminated']);
    expect(run.job.exitStatus).toBeNull();
    expect(run.job.terminationReason).toBe('terminated_by_user');
    // one task only: no retry, no second token
    expect([...d.runs.values()].filter((r) => r.name.startsWith(`spark-${rid}-`))).toHaveLength(1);
    expect(
      s.gh.calls('POST', /\/app\/installations\/\d+\/access_tokens$/).filter((c) => c.body),
    ).toHaveLength(1);
    // not a test result: the cause in the spec's words, GitHub's cancelled (ADR 0177)
    const check = await s.waitCheck(rid, 'Spark test not run — the task never started');
    expect(check).toMatchObject({ status: 'completed', conclusion: 'cancelled', head_sha: sha });
    expect(check.output.summary).toContain(`Not run: ${releasing.reason}.`);
    const history = (await s.history(rid)).map((e) => e.type);
    expect(history).not.toContain('reservation.running');
    await s.waitHostPhase('spark-2', ['idle']);
  });

  it("a task dstack gives up on while provisioning (its runner never answered) fails at once with dstack's reason, no start, no retry", async () => {
    dstack = await startDstackStandIn();
    const d = dstack;
    d.faults.failProvisioning = 1;
    sys = await startTaskSystem(d);
    const s = sys;
    const sha = 'd'.repeat(40);
    s.openPr(1, { sha });
    const rid = queuedId(await s.label(1, 'spark-test'));
    const ended = await s.waitReservation(rid, ['failed', 'done'], 60_000);
    expect(ended, await s.diagnostics()).toMatchObject({ status: 'failed' });
    const run = [...d.runs.values()].find((r) => r.name.startsWith(`spark-${rid}-`))!;
    expect(run.history).toEqual(['submitted', 'provisioning', 'terminating', 'failed']);
    expect((await s.leases(rid))[0]?.runnerStartedAt ?? null).toBeNull();
    expect([...d.runs.values()].filter((r) => r.name.startsWith(`spark-${rid}-`))).toHaveLength(1);
    // the PR's script never started: not a test failure (ADR 0177)
    expect(ended.outcome).toBe('task_not_started');
    const history = await s.history(rid);
    expect(history.map((e) => e.type)).not.toContain('reservation.running');
    expect(run.job.terminationReason).toBe('waiting_runner_limit_exceeded');
    // dstack's own reason, not a guess, is what the receipt and the release say
    const why = `dstack run ${run.name} failed before its commands ended (waiting_runner_limit_exceeded: Runner did not become available in time); the script did not run`;
    expect(history.find((e) => e.type === 'reservation.releasing')?.cause).toBe(
      `the dstack task on spark-2 never started: ${why}`,
    );
    expect(JSON.parse(ended.receiptJson!).byHost['spark-2']).toMatchObject({
      result: 'failed',
      phases: [],
      reason: `the task never started: ${why}`,
    });
    const check = await s.waitCheck(rid, 'Spark test not run — the task never started');
    expect(check).toMatchObject({ status: 'completed', conclusion: 'cancelled', head_sha: sha });
    expect(check.output.summary).toContain(`- Spark 2: not run — the task never started: ${why}`);
    expect(check.output.summary).toContain('comment `/spark test` on the PR to run it again');
    await s.waitHostPhase('spark-2', ['idle']);
  });
  it('an image without an arm64 build never starts on the aarch64 fleet: dstack fails it for no capacity, and the release says so', async () => {
    // dstack reads the image's manifest: one built for linux/amd64 only makes the job require an
    // x86 CPU (configurators/base.py `_requirements`), which no instance of the DGX Spark fleet has
    dstack = await startDstackStandIn({ arch: 'arm' });
    const d = dstack;
    sys = await startTaskSystem(d, AMD64_ONLY_IMAGE);
    const s = sys;
    const sha = 'e'.repeat(40);
    s.openPr(1, { sha });
    const rid = queuedId(await s.label(1, 'spark-test'));
    const ended = await s.waitReservation(rid, ['failed', 'done'], 60_000);
    expect(ended, await s.diagnostics()).toMatchObject({ status: 'failed', outcome: 'task_not_started' });
    const run = [...d.runs.values()].find((r) => r.name.startsWith(`spark-${rid}-`))!;
    expect(run.spec.configuration.image).toBe(AMD64_ONLY_IMAGE);
    expect(run.job.arch).toBe('x86');
    // never placed: no instance, no container, no output
    expect(run.history).toEqual(['submitted', 'terminating', 'failed']);
    expect(run.job.history).toEqual(['submitted', 'terminating', 'failed']);
    expect(run.job.terminationReason).toBe('failed_to_start_due_to_no_capacity');
    expect(run.job.log.events).toEqual([]);
    expect((await s.leases(rid))[0]?.runnerStartedAt ?? null).toBeNull();
    const history = await s.history(rid);
    expect(history.find((e) => e.type === 'reservation.releasing')?.cause).toBe(
      `the dstack task on spark-2 never started: dstack run ${run.name} failed before its commands ended (failed_to_start_due_to_no_capacity: Failed to use specified fleets); the script did not run`,
    );
    await s.waitCheck(rid, 'Spark test not run — the task never started');
    await s.waitHostPhase('spark-2', ['idle']);
  });
});
