import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { describe, expect, it, type TestContext } from 'vitest';
import type { AgentState } from '../../agent/state-file.ts';
import { attachText } from '../../cli/ops.ts';
import { describeReservation } from '../../functions/api/describe.ts';
import { renderCheckRun } from '../../functions/github/check-run.ts';
import { renderContextFor } from '../../functions/github/senders.ts';
import type { GitHubService } from '../../functions/github/service.ts';
import {
  type DstackStandIn,
  envOf,
  MULTI_ARCH_IMAGE,
  outputOf,
  startDstackStandIn,
} from '../../scripts/sim/doubles/dstack/server.ts';
import {
  type Fleet,
  type FleetOptions,
  NO_LIVENESS_TIMINGS,
  startFleet,
} from '../../scripts/sim/doubles/fleet.ts';
import { REPO_ROOT, readRunnerMarkers, waitFor } from '../../scripts/sim/doubles/index.ts';

/**
 * The `dstack` executor (CI tasks) against the dstack stand-in
 * (scripts/sim/doubles/dstack/: real HTTP, every request validated against models written from dstack's
 * source, the task's commands really run on this machine as the aarch64 fleet instance, in a
 * container-like namespace that does not see the agents' own dirs). Each case ends with nothing
 * left running in dstack, no binding lease, and the reservation released only after dstack
 * reported the run finished.
 */

/** One case's dstack stand-in, its token file and the fleets started against it. */
interface Kit {
  dstack: DstackStandIn;
  tokenFile: string;
  fleets: Fleet[];
}

/**
 * A fresh dstack per case (reservation ids and fencing tokens restart with each fleet's ledger):
 * the cases share nothing, so they run concurrently (they mostly wait on the agents). When the
 * case finishes, its fleets are closed and dstack must have seen only valid requests and have
 * nothing left running.
 */
async function standIn(ctx: TestContext): Promise<Kit> {
  const dir = mkdtempSync(join(tmpdir(), 'spark-dstack-token-'));
  const dstack = await startDstackStandIn();
  const tokenFile = join(dir, 'token');
  writeFileSync(tokenFile, `${dstack.token}\n`, { mode: 0o600 });
  const kit: Kit = { dstack, tokenFile, fleets: [] };
  ctx.onTestFinished(async () => {
    for (const f of kit.fleets) await f.close();
    const invalid = dstack.invalid;
    const active = dstack.active().map((r) => r.name);
    await dstack.close();
    rmSync(dir, { recursive: true, force: true });
    expect(invalid).toEqual([]);
    expect(active).toEqual([]);
  });
  return kit;
}

const dstackConfig = (kit: Kit, hostId: string) => ({
  executor: 'dstack',
  dstack: {
    url: kit.dstack.url,
    project: kit.dstack.project,
    tokenFile: kit.tokenFile,
    fleet: hostId,
    image: MULTI_ARCH_IMAGE,
    requestTimeoutS: 1,
  },
});

async function dstackFleet(
  kit: Kit,
  hosts: string[],
  opts: FleetOptions,
  agentConfig: (hostId: string) => Record<string, unknown> = (h) => dstackConfig(kit, h),
) {
  const f = await startFleet({
    hosts: hosts.map((id) => ({ id })),
    githubOutcome: () => 'passed',
    // dstack runs the job as its own runner on the fleet instance, not as the agent's runner user
    runnerUsers: false,
    ...opts,
    // no case here is about a lost host: a heartbeat late on a busy machine must not end a pair
    timings: { ...NO_LIVENESS_TIMINGS, ...opts.timings },
    agentConfig,
  });
  kit.fleets.push(f);
  // the agent's own dirs and the runner's install (runner.dir, the repository here) are the
  // host's, not the job container's (scripts/sim/doubles/dstack/container.ts): the runner reaches the
  // container only as the instance volume the agent mounts
  for (const h of hosts)
    kit.dstack.hostOnly.push(...['work', 'state', 'models'].map((d) => join(f.dir, h, d)));
  kit.dstack.hostOnly.push(REPO_ROOT);
  for (const h of hosts) f.startAgent(h);
  for (const h of hosts) {
    await waitFor(`${h} heartbeat`, async () => (await f.host(h)).lastHeartbeatAt != null);
  }
  return f;
}

/** The stand-in's runs of reservation `id` (run names start `spark-<id>-`). */
const runsOf = (kit: Kit, id: string) =>
  [...kit.dstack.runs.values()].filter((r) => r.name.startsWith(`spark-${id}-`));

/** The reservation was released (its `done`/`failed` event) no earlier than its last run finished. */
async function releasedAfterTermination(kit: Kit, f: Fleet, id: string) {
  const events = await f.controller.ledger.history('reservation', id);
  const end = events.find((e) => e.type === 'reservation.done' || e.type === 'reservation.failed');
  expect(end, events.map((e) => e.type).join(',')).toBeDefined();
  for (const r of runsOf(kit, id)) {
    expect(r.finishedAt, `${r.name} finished`).not.toBeNull();
    expect(end!.at).toBeGreaterThanOrEqual(r.finishedAt!);
  }
}

// concurrent: each case has its own dstack and fleet (see standIn)
describe.concurrent('dstack executor (stand-in dstack server)', () => {
  it('runs a single reservation as a dstack task on the host fleet and releases it after dstack reports done', async (ctx) => {
    const kit = await standIn(ctx);
    const fleet = await dstackFleet(kit, ['spark-2'], { runner: () => ({ exitCode: 0, sleepMs: 300 }) });
    const f = fleet;
    const id = await f.reserve();
    const r = await f.waitReservation(id, ['done', 'failed'], 60_000);
    expect(r.status, f.agents['spark-2']!.output().slice(-3000)).toBe('done');
    const [run] = runsOf(kit, id);
    // every end passes through terminating (dstack's _terminate_job), with the job's reason
    expect(run!.history).toEqual(['submitted', 'provisioning', 'running', 'terminating', 'done']);
    expect(run!.terminationReason).toBe('all_jobs_done');
    expect(run!.job.terminationReason).toBe('done_by_runner');
    const c = run!.spec.configuration;
    expect(c.type).toBe('task');
    const env = envOf(run!);
    if (c.type === 'task') {
      expect(c.fleets).toEqual(['spark-2']);
      expect(c.nodes).toBe(1);
      expect(c.image).toBe(MULTI_ARCH_IMAGE);
      expect(env.SPARK_RESERVATION_ID).toBe(id);
      // the JIT config goes in the task's environment, never its commands
      expect(env.ACTIONS_RUNNER_INPUT_JITCONFIG).toBeTruthy();
      expect((c.commands ?? []).join(' ')).not.toContain(env.ACTIONS_RUNNER_INPUT_JITCONFIG!);
      // the container sees the runner's install only as an instance volume
      expect(c.volumes).toContainEqual({ instance_path: REPO_ROOT, path: REPO_ROOT });
    }
    const [lease] = await f.leases(id);
    expect(lease!.exitCode).toBe(0);
    expect(readRunnerMarkers(f.markerDir).some((m) => m.reservationId === id)).toBe(true);
    // the check run names the backend the agent reported; renderContextFor reads the ledger only
    const svc = { ledger: f.controller.ledger } as unknown as GitHubService;
    const row = await f.reservation(id);
    expect(renderCheckRun(row, await renderContextFor(svc, row)).summary).toContain('- Backend: dstack');
    expect(await f.bindingLeases()).toEqual([]);
    await releasedAfterTermination(kit, f, id);
  });

  it('runs a pair as one task per host, each pinned to its own fleet, released as a unit', async (ctx) => {
    const kit = await standIn(ctx);
    const fleet = await dstackFleet(kit, ['spark-2', 'spark-3'], {
      runner: () => ({ exitCode: 0, sleepMs: 300 }),
    });
    const f = fleet;
    const id = await f.reserve({ topology: 'pair' });
    const r = await f.waitReservation(id, ['done', 'failed'], 60_000);
    expect(r.status, `${r.outcome}: ${r.reason}\n${f.agents['spark-3']!.output().slice(-2000)}`).toBe('done');
    const leases = await f.leases(id);
    expect(leases.map((l) => [l.hostId, l.status, l.exitCode])).toEqual([
      ['spark-2', 'released', 0],
      ['spark-3', 'released', 0],
    ]);
    const fleets = runsOf(kit, id)
      .map((x) => (x.spec.configuration.type === 'task' ? x.spec.configuration.fleets?.[0] : null))
      .sort();
    expect(fleets).toEqual(['spark-2', 'spark-3']);
    expect(runsOf(kit, id).map((x) => x.status)).toEqual(['done', 'done']);
    await releasedAfterTermination(kit, f, id);
  });

  it('a release while the task runs stops it through dstack and waits for terminated before cleaned', async (ctx) => {
    const kit = await standIn(ctx);
    const fleet = await dstackFleet(kit, ['spark-2'], { runner: () => ({ exitCode: 0, sleepMs: 120_000 }) });
    const f = fleet;
    const id = await f.reserve();
    await f.waitReservation(id, ['running'], 60_000);
    const m = await waitFor(
      'the task to start',
      () => readRunnerMarkers(f.markerDir).find((x) => x.reservationId === id),
      30_000,
    );
    await f.controller.ledger.beginRelease(id, 'released', 'operator release', 'test');
    await expect(f.waitReservation(id, ['done', 'failed'], 60_000)).resolves.toMatchObject({
      status: 'done',
    });
    expect(m.reservationId).toBe(id);
    const [run] = runsOf(kit, id);
    // the job's container is gone (its PID namespace, every process of the task with it)
    expect(run!.job.proc).toBeNull();
    expect(run!.history.slice(-2)).toEqual(['terminating', 'terminated']);
    expect(run!.terminationReason).toBe('stopped_by_user');
    expect(run!.job.terminationReason).toBe('terminated_by_user');
    // stopped by dstack, not ended by its commands: no exit status
    expect(run!.job.exitStatus).toBeNull();
    expect(f.agents['spark-2']!.output()).toContain('stopping the dstack run this lease created');
    await releasedAfterTermination(kit, f, id);
  });

  it('kill -9 of the agent while the task runs: the restarted agent finds its run by name and reports its exit', async (ctx) => {
    const kit = await standIn(ctx);
    const fleet = await dstackFleet(kit, ['spark-2'], {
      runner: () => ({ exitCode: 4, sleepMs: 3000 }),
      // no GitHub result: the task's exit status decides
      githubOutcome: () => null,
    });
    const f = fleet;
    const stateFile = join(dirname(f.agentConfigPath('spark-2')), 'state', 'agent-state.json');
    const id = await f.reserve();
    await waitFor(
      'the run to be running',
      () =>
        (JSON.parse(readFileSync(stateFile, 'utf8')) as AgentState).lease?.runner?.jobId &&
        runsOf(kit, id)[0]?.status === 'running',
      30_000,
    );
    await f.agents['spark-2']!.kill('SIGKILL');
    // dstack owns the run: it goes on without the agent
    expect(runsOf(kit, id)[0]!.status).toBe('running');
    f.startAgent('spark-2');
    const r = await f.waitReservation(id, ['done', 'failed'], 60_000);
    expect(r.status).toBe('failed');
    const [lease] = await f.leases(id);
    expect(lease!.exitCode).toBe(4);
    // found again, never created twice
    expect(
      kit.dstack.calls.filter((c) => c.route === 'apply' && c.runName?.startsWith(`spark-${id}-`)),
    ).toHaveLength(1);
    expect(await f.bindingLeases()).toEqual([]);
    await releasedAfterTermination(kit, f, id);
  });

  it('dstack answering 5xx and timing out on stop (and 5xx on get) keeps the reservation until dstack confirms terminated', async (ctx) => {
    const kit = await standIn(ctx);
    const fleet = await dstackFleet(kit, ['spark-2'], { runner: () => ({ exitCode: 0, sleepMs: 120_000 }) });
    const f = fleet;
    const id = await f.reserve();
    await f.waitReservation(id, ['running'], 60_000);
    await waitFor(
      'the task to start',
      () => readRunnerMarkers(f.markerDir).find((x) => x.reservationId === id),
      30_000,
    );
    kit.dstack.faults.stop5xx = 2;
    kit.dstack.faults.stopHang = 1;
    kit.dstack.faults.get5xx = 3;
    const stops = () => kit.dstack.calls.filter((c) => c.route === 'stop').length;
    await f.controller.ledger.beginRelease(id, 'released', 'operator release', 'test');
    await waitFor('two refused stops', () => stops() >= 2, 30_000);
    // dstack has not stopped the run: the reservation is not released
    expect(runsOf(kit, id)[0]!.status).toBe('running');
    expect((await f.reservation(id)).status).not.toBe('done');
    expect(await f.bindingLeases()).toHaveLength(1);
    await expect(f.waitReservation(id, ['done', 'failed'], 60_000)).resolves.toMatchObject({
      status: 'done',
    });
    expect(stops()).toBeGreaterThanOrEqual(4);
    expect(f.agents['spark-2']!.output()).toContain('dstack stop not confirmed');
    const [run] = runsOf(kit, id);
    expect(run!.status).toBe('terminated');
    await releasedAfterTermination(kit, f, id);
  });

  it('an apply whose answer is lost (the run was created, dstack answered 502): the agent finds the run by name, creates no second one', async (ctx) => {
    const kit = await standIn(ctx);
    const fleet = await dstackFleet(kit, ['spark-2'], { runner: () => ({ exitCode: 0, sleepMs: 300 }) });
    const f = fleet;
    kit.dstack.faults.apply5xxAfterCreate = 1;
    const id = await f.reserve();
    const r = await f.waitReservation(id, ['done', 'failed'], 60_000);
    expect(r.status, f.agents['spark-2']!.output().slice(-3000)).toBe('done');
    expect(f.agents['spark-2']!.output()).toContain('dstack apply not confirmed');
    expect(kit.dstack.calls.filter((c) => c.route === 'apply')).toHaveLength(1);
    expect(runsOf(kit, id).map((x) => x.status)).toEqual(['done']);
    expect((await f.leases(id))[0]!.exitCode).toBe(0);
    await releasedAfterTermination(kit, f, id);
  });

  it('a repository configured for dstack runs its CI as a dstack task on a jit-runner host; another repository there keeps the JIT runner', async (ctx) => {
    const kit = await standIn(ctx);
    const fleet = await dstackFleet(
      kit,
      ['spark-2'],
      {
        runner: () => ({ exitCode: 0, sleepMs: 300 }),
        repositories: { 'acme/butter': { executor: 'dstack' } },
      },
      // the host's own backend is the JIT runner; it also knows the dstack server
      (h) => ({ ...dstackConfig(kit, h), executor: 'jit-runner' }),
    );
    const f = fleet;
    const svc = { ledger: f.controller.ledger } as unknown as GitHubService;
    const butter = await f.reserve({ repo: 'acme/butter' });
    expect((await f.waitReservation(butter, ['done', 'failed'], 60_000)).status).toBe('done');
    expect(runsOf(kit, butter).map((x) => [x.status, x.spec.configuration.fleets])).toEqual([
      ['done', ['spark-2']],
    ]);
    const [bl] = await f.leases(butter);
    expect(JSON.parse(bl!.evidenceJson!).executor).toBe('dstack');
    const br = await f.reservation(butter);
    expect(renderCheckRun(br, await renderContextFor(svc, br)).summary).toContain('- Backend: dstack');
    // the job was told which backend ran it (its receipt's `executor`)
    expect(envOf(runsOf(kit, butter)[0]!).SPARK_EXECUTOR).toBe('dstack');
    await releasedAfterTermination(kit, f, butter);

    const iron = await f.reserve({ repo: 'acme/iron' });
    expect((await f.waitReservation(iron, ['done', 'failed'], 60_000)).status).toBe('done');
    expect(runsOf(kit, iron)).toEqual([]);
    const [il] = await f.leases(iron);
    expect(JSON.parse(il!.evidenceJson!).executor).toBe('jit-runner');
    const ir = await f.reservation(iron);
    expect(renderCheckRun(ir, await renderContextFor(svc, ir)).summary).toContain('- Backend: jit-runner');
    expect(await f.bindingLeases()).toEqual([]);
  });

  it("kill -9 mid-run of a repository's dstack task on a jit-runner host: the restarted agent goes on with dstack (recorded with the lease)", async (ctx) => {
    const kit = await standIn(ctx);
    const fleet = await dstackFleet(
      kit,
      ['spark-2'],
      {
        runner: () => ({ exitCode: 6, sleepMs: 3000 }),
        githubOutcome: () => null,
        repositories: { 'acme/butter': { executor: 'dstack' } },
      },
      (h) => ({ ...dstackConfig(kit, h), executor: 'jit-runner' }),
    );
    const f = fleet;
    const stateFile = join(dirname(f.agentConfigPath('spark-2')), 'state', 'agent-state.json');
    const id = await f.reserve({ repo: 'acme/butter' });
    await waitFor(
      'the run to be running',
      () =>
        (JSON.parse(readFileSync(stateFile, 'utf8')) as AgentState).lease?.runner?.jobId &&
        runsOf(kit, id)[0]?.status === 'running',
      30_000,
    );
    expect((JSON.parse(readFileSync(stateFile, 'utf8')) as AgentState).lease?.executor).toBe('dstack');
    await f.agents['spark-2']!.kill('SIGKILL');
    f.startAgent('spark-2');
    const r = await f.waitReservation(id, ['done', 'failed'], 60_000);
    expect(r.status).toBe('failed');
    // the task's exit status, which only dstack knows: the restarted agent asked dstack, not /proc
    expect((await f.leases(id))[0]!.exitCode).toBe(6);
    expect(kit.dstack.calls.filter((c) => c.route === 'apply')).toHaveLength(1);
    expect(await f.bindingLeases()).toEqual([]);
    await releasedAfterTermination(kit, f, id);
  });

  it('a repository asking for dstack on a host without dstack settings fails preparation with the reason; nothing is created', async (ctx) => {
    const kit = await standIn(ctx);
    const fleet = await dstackFleet(
      kit,
      ['spark-2'],
      { repositories: { 'acme/butter': { executor: 'dstack' } } },
      () => ({ executor: 'jit-runner' }),
    );
    const f = fleet;
    const id = await f.reserve({ repo: 'acme/butter' });
    const r = await f.waitReservation(id, ['done', 'failed'], 60_000);
    expect(r.status).toBe('failed');
    const causes = (await f.controller.ledger.history('reservation', id)).map((e) => e.cause).join('\n');
    expect(causes).toContain(
      'preparation failed on spark-2: this lease\'s repository runs on executor "dstack", which this host cannot run',
    );
    expect(causes).toContain('"dstack" section');
    expect(kit.dstack.calls).toEqual([]);
    expect(readRunnerMarkers(f.markerDir)).toEqual([]);
    expect(await f.bindingLeases()).toEqual([]);
  });

  it("a failed task's last output lines come from dstack's logs API into the lease evidence", async (ctx) => {
    const kit = await standIn(ctx);
    const fleet = await dstackFleet(kit, ['spark-2'], {
      runner: () => ({
        exitCode: 3,
        sleepMs: 200,
        lastLines: ['FAILED tests/test_attention.py::test_fp8', 'E   assert 0.51 < 0.5'],
      }),
      githubOutcome: () => null,
    });
    const f = fleet;
    const id = await f.reserve();
    expect((await f.waitReservation(id, ['done', 'failed'], 60_000)).status).toBe('failed');
    const [lease] = await f.leases(id);
    const ev = JSON.parse(lease!.evidenceJson!) as { runner: { exitCode: number; lastLines: string[] } };
    expect(ev.runner.exitCode).toBe(3);
    expect(ev.runner.lastLines).toEqual(
      expect.arrayContaining([
        'FAILED tests/test_attention.py::test_fp8',
        'E   assert 0.51 < 0.5',
        // the runner's own result line, as actions/runner prints it (JobDispatcher.cs, ADR 0160)
        expect.stringMatching(
          /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ: Job spark-test completed with result: Failed$/,
        ),
      ]),
    );
    // the secrets the task got in its environment never come back as evidence
    const [run] = runsOf(kit, id);
    expect(ev.runner.lastLines.join('\n')).not.toContain(envOf(run!).ACTIONS_RUNNER_INPUT_JITCONFIG!);
    // what dstack's runner shipped: one pty stream, lines ending \r\n; the evidence has whole lines
    expect(outputOf(run!)).toContain('E   assert 0.51 < 0.5\r\n');
    expect(run!.job.terminationReason).toBe('container_exited_with_error');
    expect(run!.job.exitStatus).toBe(3);
    expect(kit.dstack.calls.some((c) => c.route === 'logs/poll' && c.runName === run!.name)).toBe(true);
    await releasedAfterTermination(kit, f, id);
  });

  it('dstack logs unavailable (5xx): the evidence says so and the release still waits only for termination', async (ctx) => {
    const kit = await standIn(ctx);
    const fleet = await dstackFleet(kit, ['spark-2'], {
      runner: () => ({ exitCode: 5, sleepMs: 200 }),
      githubOutcome: () => null,
    });
    const f = fleet;
    kit.dstack.faults.logs5xx = 100;
    const id = await f.reserve();
    expect((await f.waitReservation(id, ['done', 'failed'], 60_000)).status).toBe('failed');
    const [lease] = await f.leases(id);
    const ev = JSON.parse(lease!.evidenceJson!) as { runner: { lastLines: string[] } };
    expect(ev.runner.lastLines.join('\n')).toMatch(/dstack logs of spark-r-\S+ not available: .*HTTP 500/);
    await releasedAfterTermination(kit, f, id);
  });

  const devReservation = (f: Fleet, input: Record<string, unknown>) =>
    f.reserve({
      kind: 'development',
      ttlS: 600,
      requester: 'dev',
      repo: null,
      pr: null,
      headSha: null,
      suite: null,
      ...input,
    });

  /** The reservation as sparkctl/MCP get it from the operator API. */
  async function info(f: Fleet, id: string) {
    const principal = { kind: 'api' as const, tokenId: 't-1', name: 'dev', scopes: [] };
    return describeReservation(
      f.controller.ledger,
      await f.reservation(id),
      await f.leases(id),
      principal,
      null,
    );
  }

  it('a development lease gets a dev environment on the host fleet; sparkctl shows `dstack attach`, release waits for terminated', async (ctx) => {
    const kit = await standIn(ctx);
    const fleet = await dstackFleet(kit, ['spark-2'], {});
    const f = fleet;
    const id = await devReservation(f, { targetHost: 'spark-2' });
    await f.waitReservation(id, ['running'], 60_000);
    const [run] = runsOf(kit, id);
    // reported active only once dstack runs it
    expect(run!.status).toBe('running');
    expect(run!.spec.configuration).toMatchObject({ type: 'dev-environment', fleets: ['spark-2'] });
    const r = await info(f, id);
    expect(r.leases.map((l) => l.attach)).toEqual([`dstack attach ${run!.name}`]);
    const text = attachText(r);
    expect(text).toContain(`attach:   dstack attach ${run!.name}`);
    expect(text).not.toMatch(/ssh/);
    await f.controller.ledger.beginRelease(id, 'released', 'developer release', 'dev');
    await expect(f.waitReservation(id, ['done', 'failed'], 60_000)).resolves.toMatchObject({
      status: 'done',
    });
    expect(run!.history.slice(-2)).toEqual(['terminating', 'terminated']);
    await releasedAfterTermination(kit, f, id);
  });

  it('a pair development lease gets one dev environment per host, each attachable, both stopped before release', async (ctx) => {
    const kit = await standIn(ctx);
    const fleet = await dstackFleet(kit, ['spark-2', 'spark-3'], {});
    const f = fleet;
    const id = await devReservation(f, { topology: 'pair' });
    await f.waitReservation(id, ['running'], 60_000);
    const first = await info(f, id);
    // the reservation runs once a host reports; until both have, the other is "still starting"
    if (first.leases.some((l) => !l.attach)) expect(attachText(first)).toContain('is still starting');
    const r = await waitFor(
      'both dev environments to be attachable',
      async () => {
        const x = await info(f, id);
        return x.leases.every((l) => l.attach) ? x : null;
      },
      30_000,
    );
    const names = runsOf(kit, id)
      .map((x) => x.name)
      .sort();
    expect(names).toHaveLength(2);
    expect(r.leases.map((l) => l.attach).sort()).toEqual(names.map((n) => `dstack attach ${n}`));
    expect(attachText(r).match(/attach: {3}dstack attach /g)).toHaveLength(2);
    await f.controller.ledger.beginRelease(id, 'released', 'developer release', 'dev');
    await expect(f.waitReservation(id, ['done', 'failed'], 60_000)).resolves.toMatchObject({
      status: 'done',
    });
    expect(runsOf(kit, id).map((x) => x.status)).toEqual(['terminated', 'terminated']);
    await releasedAfterTermination(kit, f, id);
  });
});
