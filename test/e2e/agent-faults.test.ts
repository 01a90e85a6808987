import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, expect, it, type TestContext } from 'vitest';
import type { AgentState } from '../../agent/state-file.ts';
import { type Fleet, type FleetOptions, startFleet } from '../../scripts/sim/doubles/fleet.ts';
import { isLive, readRunnerMarkers, waitFor } from '../../scripts/sim/doubles/index.ts';

/**
 * Crash safety and fail-closed behaviour of the relay agent, with real processes: the controller
 * in this process, agents as children killed with SIGKILL. The fleet's JIT stand-in takes
 * GitHub's place (scripts/sim/doubles/fleet-jit-stand-in.ts: it inserts each granted lease's jit_handoffs
 * row; the handed-over config is still given out only once the reservation is `preparing`).
 */

/**
 * A fleet of this test's own, closed when the test finishes. Fleets share nothing (temp dirs,
 * ports, runner users, ledgers), so the tests run concurrently: they mostly wait on agents.
 */
async function fleetFor(ctx: TestContext, opts: FleetOptions): Promise<Fleet> {
  const f = await startFleet(opts);
  ctx.onTestFinished(() => f.close());
  return f;
}

function agentState(f: Fleet, hostId: string): AgentState | null {
  const cfg = JSON.parse(readFileSync(f.agentConfigPath(hostId), 'utf8'));
  const file = join(dirname(f.agentConfigPath(hostId)), cfg.stateFile);
  return existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as AgentState) : null;
}

/** Nothing leaked: every reservation ended, no lease binds a host, spark-1 serves Deckard again. */
async function expectConsistent(f: Fleet, id: string, status = 'done') {
  const r = await f.waitReservation(id, ['done', 'failed']);
  expect(r.status, f.agents['spark-1']?.output()).toBe(status);
  await f.waitHostPhase('spark-1', ['service']);
  expect(await f.bindingLeases()).toEqual([]);
  for (const l of await f.leases(id)) expect(l.status).toBe('released');
  expect(f.deckard!.isRunning()).toBe(true);
  // no job ever ran while Deckard held the GPU
  for (const m of readRunnerMarkers(f.markerDir)) expect(m.gpuAtStart).toEqual([]);
}

describe.concurrent('relay agent: fencing and fail-closed', () => {
  it('refuses a command whose fencing token is lower than one it has seen, and starts nothing', async (ctx) => {
    const fleet = await fleetFor(ctx, { hosts: [{ id: 'spark-2' }] });
    // this agent has already seen token 10 (e.g. the ledger was restored from an old backup)
    const cfgPath = fleet.agentConfigPath('spark-2');
    const stateFile = join(dirname(cfgPath), 'state', 'agent-state.json');
    const { mkdirSync } = await import('node:fs');
    // private, as the agent keeps it (it refuses a state dir or file other users can reach)
    mkdirSync(dirname(stateFile), { recursive: true, mode: 0o700 });
    writeFileSync(stateFile, JSON.stringify({ v: 1, maxFencingToken: 10, lease: null, restore: null }), {
      mode: 0o600,
    });
    const agent = fleet.startAgent('spark-2');
    await waitFor('spark-2 heartbeat', async () => (await fleet!.host('spark-2')).lastHeartbeatAt != null);
    const id = await fleet.reserve();
    await fleet.waitReservation(id, ['allocated']);
    await waitFor('the refusal in the agent log', () =>
      agent.output().includes('refusing a command with a stale fencing token'),
    );
    const [lease] = await fleet.leases(id);
    expect(lease!.fencingToken).toBe(1);
    expect(lease!.preparedAt).toBeNull();
    expect((await fleet.reservation(id)).status).toBe('allocated');
    expect(readRunnerMarkers(fleet.markerDir)).toEqual([]);
    expect(agentState(fleet, 'spark-2')).toMatchObject({ maxFencingToken: 10, lease: null });
  });

  it('starts nothing while the controller is down, then finishes the job it already runs', async (ctx) => {
    const fleet = await fleetFor(ctx, {
      hosts: [{ id: 'spark-2' }],
      runner: () => ({ exitCode: 0, sleepMs: 1500 }),
      githubOutcome: () => 'passed',
    });
    const agent = fleet.startAgent('spark-2');
    await waitFor('spark-2 heartbeat', async () => (await fleet!.host('spark-2')).lastHeartbeatAt != null);
    const id = await fleet.reserve();
    await fleet.waitReservation(id, ['running']);
    await fleet.stopController();
    const marker = await waitFor('the runner marker', () => readRunnerMarkers(fleet!.markerDir)[0]);
    // the runner finishes while the controller is away
    await waitFor('the runner to exit', () => !isLive(marker.pid), 20_000);
    await waitFor(
      'two failed polls with backoff',
      () => agent.output().split('controller unreachable').length > 2,
      20_000,
    );
    const state = agentState(fleet, 'spark-2')!;
    expect(state.lease).toMatchObject({ phase: 'running' });
    expect(state.lease!.runner!.exitReported).toBe(false);
    expect(existsSync(marker.workDir)).toBe(true); // no cleanup without the controller's word
    expect(readRunnerMarkers(fleet.markerDir)).toHaveLength(1);

    await fleet.startControllerAgain();
    await expect(fleet.waitReservation(id, ['done', 'failed'])).resolves.toMatchObject({ status: 'done' });
    expect(existsSync(marker.workDir)).toBe(false);
    expect(await fleet.bindingLeases()).toEqual([]);
    expect(readRunnerMarkers(fleet.markerDir)).toHaveLength(1);
  });

  it('replaces a runner the controller replaced (new handoff): stops its own, starts the new one', async (ctx) => {
    const fleet = await fleetFor(ctx, {
      hosts: [{ id: 'spark-2' }],
      runner: () => ({ exitCode: 0, sleepMs: 60_000 }),
      githubOutcome: () => 'passed',
    });
    fleet.startAgent('spark-2');
    const id = await fleet.reserve();
    await fleet.waitReservation(id, ['running']);
    const [lease] = await fleet.leases(id);
    const first = await waitFor('first runner', () => readRunnerMarkers(fleet!.markerDir)[0]);
    const name = await fleet.replaceRunner(lease!.id, { exitCode: 0, sleepMs: 300 });
    await expect(fleet.waitReservation(id, ['done', 'failed'])).resolves.toMatchObject({ status: 'done' });
    const markers = readRunnerMarkers(fleet.markerDir);
    expect(markers.map((m) => m.runnerName)).toEqual([first.runnerName, name]);
    expect(isLive(first.pid)).toBe(false);
    const evidence = JSON.parse((await fleet.leases(id))[0]!.evidenceJson!);
    expect(evidence.runner.runnerName).toBe(name);
  });
});

type Step = 'draining' | 'stopping' | 'running' | 'cleaning' | 'restoring';

describe.concurrent('relay agent: kill -9 at each step, then restart', () => {
  const at: Record<Step, (s: AgentState | null) => boolean> = {
    draining: (s) => s?.lease?.lendStep === 'draining',
    stopping: (s) => s?.lease?.lendStep === 'stopping',
    running: (s) => s?.lease?.runner?.pid != null && s.lease.runner.startReported,
    cleaning: (s) => s?.lease?.phase === 'cleaning',
    restoring: (s) => s?.restore != null,
  };

  it.for(Object.keys(at) as Step[])(
    'kill -9 while %s: the ledger ends consistent, nothing leaked',
    async (step, ctx) => {
      const fleet = await fleetFor(ctx, {
        hosts: [{ id: 'spark-1', homeService: 'deckard' }],
        runner: () =>
          step === 'cleaning'
            ? { exitCode: 0, sleepMs: 60_000, ignoreTermMs: 1000 }
            : { exitCode: 0, sleepMs: 1000 },
        githubOutcome: () => 'passed',
        deckardReadyDelayMs: step === 'restoring' ? 1500 : 0,
      });
      const f = fleet;
      await f.deckard!.start();
      if (step === 'draining') f.deckard!.setDelay('drain', 1000);
      if (step === 'stopping') f.deckard!.setDelay('stop', 1000);
      const agent = f.startAgent('spark-1');
      await f.waitHostPhase('spark-1', ['service']);
      const id = await f.reserve();
      if (step === 'cleaning') {
        await f.waitReservation(id, ['running']).catch((e: Error) => {
          throw new Error(`${e.message}\n${f.agents['spark-1']?.output()}`);
        });
        // an operator release while the job still runs; the job is slow to stop
        await f.controller.ledger.beginRelease(id, 'released', 'operator release', 'test');
      }
      await waitFor(`the agent to be ${step}`, () => at[step](agentState(f, 'spark-1')), 30_000, 10);
      await agent.kill('SIGKILL');
      if (step === 'draining' || step === 'stopping') {
        // while lending is half done nothing may run, and the lease is not prepared
        expect((await f.leases(id))[0]!.preparedAt).toBeNull();
      }
      f.startAgent('spark-1');
      await expectConsistent(f, id);
      expect(readRunnerMarkers(f.markerDir).filter((m) => m.reservationId === id).length).toBeLessThanOrEqual(
        1,
      );
      await waitFor('the agent state to settle', () => {
        const s = agentState(f, 'spark-1');
        return s?.lease === null && s.restore === null;
      });
    },
  );
});

describe.concurrent('trust boundary: the job runs as its own unprivileged user', () => {
  it('a job cannot read the token, config or state, cannot signal the agent, and cannot reach the next reservation', async (ctx) => {
    let paths: string[] = [];
    const fleet = await fleetFor(ctx, {
      hosts: [{ id: 'spark-2' }],
      githubOutcome: () => 'passed',
      runner: (rid) =>
        rid === 'r-1'
          ? { exitCode: 0, sleepMs: 300, probe: { read: paths }, leaveDaemon: true }
          : { exitCode: 0, sleepMs: 1500 },
    });
    const f = fleet;
    const user = f.runnerUsers['spark-2'];
    if (!user) throw new Error('the fleet made no runner user: run the agent tests as root (CI does)');
    const hostDir = dirname(f.agentConfigPath('spark-2'));
    paths = [
      join(hostDir, 'agent.token'),
      f.agentConfigPath('spark-2'),
      join(hostDir, 'state', 'agent-state.json'),
    ];
    const agent = f.startAgent('spark-2');
    await waitFor('spark-2 heartbeat', async () => (await f.host('spark-2')).lastHeartbeatAt != null);

    const first = await f.reserve();
    await expect(f.waitReservation(first, ['done', 'failed'])).resolves.toMatchObject({ status: 'done' });
    const m1 = readRunnerMarkers(f.markerDir).find((m) => m.reservationId === first)!;
    expect(m1.uid).toBe(user.uid);
    const probe = m1.probe!;
    // the agent is where the job can find it, and its command line names the config...
    expect(probe.agentPid).toBe(agent.proc.pid);
    expect(probe.agentCmdline).toContain(f.agentConfigPath('spark-2'));
    // ...but none of the agent's files opens, its environment is closed, and it cannot be signalled
    expect(probe.read).toEqual(Object.fromEntries(paths.map((p) => [p, 'EACCES'])));
    expect(probe.agentEnviron).toBe('EACCES');
    expect(probe.signalAgent).toBe('EPERM');
    // a fresh environment: nothing of the agent's own (the test process's variables) reached the job
    expect(m1.env).not.toContain('SPARK_TEST_AGENT_BUNDLE');
    expect(m1.env).not.toContain('VITEST');
    // the process the job left behind (outside its process group) ended with the lease
    expect(m1.daemonPid).not.toBeNull();
    expect(isLive(m1.daemonPid!)).toBe(false);

    const second = await f.reserve({ pr: 8 });
    await f.waitReservation(second, ['running']);
    const m2 = await waitFor('the second runner', () =>
      readRunnerMarkers(f.markerDir).find((m) => m.reservationId === second),
    );
    await expect(f.waitReservation(second, ['done', 'failed'])).resolves.toMatchObject({ status: 'done' });
    expect(m2.workDir).not.toBe(m1.workDir);
    // nothing of the first job ever wrote into the second reservation's work dir
    const log = join(f.markerDir, 'intrusions.log');
    expect(existsSync(log) ? readFileSync(log, 'utf8') : '').toBe('');
  });
});
