import { eq } from 'drizzle-orm';
import { describe, expect, it, type TestContext } from 'vitest';
import type { DesiredState, PollResponse } from '../../core/protocol/agent.ts';
import { createAgentToken } from '../../functions/auth/tokens.ts';
import { githubService } from '../../functions/github/service.ts';
import { sweepRunnerPickup, sweepTaskStart } from '../../functions/github/sweeps.ts';
import * as t from '../../functions/ledger/schema.ts';
import { example, type Harness } from '../../scripts/sim/fake-github/harness.ts';
import { adoptAll, idleFacts } from '../../scripts/sim/ledger.ts';
import { startHarnessFor } from '../fake-github/harness-for-test.ts';

/**
 * The task-start timeout (ADR 0120) against the real controller, its ledger file and the fake
 * GitHub, with the agent's side spoken over the real agent API (`/agent/v1/poll`, `/report`):
 * a CI task (`ci: "task"`, ADR 0110) handed to its agent but never reported started (dstack kept
 * it provisioning) ends as `task_not_started` after `timings.taskStartTimeoutS`, through the
 * ordinary release — the hosts are freed only when the agent reports `cleaned`. A task that
 * started is never swept, and the runner path's pickup sweep is what it was. The clock is the
 * harness's, moved forward by the test.
 */

const REPO = 'Codertocat/Hello-World';
const SHA = 'ec26c3e57ca3a959ca5aad62de7213c562f8c821';
/** Long enough that the real time a step takes never adds up to it; short of offline (40 s). */
const TIMEOUT_S = 20;

function labeled(label = 'spark-test') {
  const p = example('pull_request', 'labeled');
  p.label.name = label;
  p.sender.login = 'Codertocat';
  p.pull_request.labels = [{ ...p.label }];
  return p;
}

/**
 * A controller whose {@link REPO} runs CI as a dstack task (`task`) or on a JIT runner (`runner`),
 * with its own fake GitHub, ledger and clock: closed when the test finishes, after checking every
 * request it made to GitHub matched GitHub's schema. Nothing is shared, so the tests run
 * concurrently.
 */
async function start(
  ctx: TestContext,
  ci: 'task' | 'runner',
  timings: Record<string, number> = {},
): Promise<Harness> {
  const h = await startHarnessFor(ctx, {
    config: {
      repositories: ci === 'task' ? { [REPO]: { executor: 'dstack', ci: 'task' } } : {},
      timings: { taskStartTimeoutS: TIMEOUT_S, ...timings },
    },
  });
  h.gh.addRepo(REPO, {
    installationId: 1,
    collaborators: { Codertocat: 'admin' },
    pulls: { 2: { state: 'open', headSha: SHA, headRepo: REPO, labels: ['spark-test'] } },
    headSha: 'b'.repeat(40),
  });
  for (const host of h.c.ledger.config.hosts) await h.c.ledger.setManaged(host.id, true, 'test');
  expect((await h.enable(REPO)).status).toBe(200);
  return h;
}

/** The agent of one host, speaking the agent protocol over HTTP to the controller. */
async function agentOf(h: Harness, hostId: string) {
  const { token } = await createAgentToken(h.c.ledger, hostId, 'test');
  const post = async (path: string, body: unknown) => {
    const res = await fetch(`${h.c.url}/agent/v1${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };
  return {
    async poll(): Promise<DesiredState> {
      const r = await post('/poll', { maxWaitMs: 0 });
      expect(r.status).toBe(200);
      return (r.body as unknown as PollResponse).desired;
    },
    report: (body: Record<string, unknown>) => post('/report', body),
    /** Keeps the host online and its CI lease renewed while the test moves the clock. */
    async heartbeat() {
      expect((await post('/heartbeat', { facts: idleFacts() })).status).toBe(200);
    },
  };
}

const reservation = async (h: Harness) => (await h.c.ledger.getReservation(undefined, 'r-1'))!;

/**
 * Label → granted → the workload's credential stored → the agent reports its host prepared and
 * takes the `run` state (the hand-over). Returns the agent, its lease and the run state.
 */
async function handedOver(h: Harness, credential: 'clone token' | 'JIT config') {
  await adoptAll(h.c.ledger);
  expect((await (await h.deliver('pull_request', labeled())).json()).result).toBe('queued r-1');
  await h.until('allocated', async () => (await reservation(h)).status === 'allocated');
  const lease = (await h.c.ledger.leasesOf(undefined, 'r-1'))[0]!;
  await h.until(`the ${credential} stored`, async () => {
    await h.drain();
    const rows = await h.c.ledger.db.select().from(t.jitHandoffs).where(eq(t.jitHandoffs.leaseId, lease.id));
    return rows.length > 0;
  });
  const agent = await agentOf(h, lease.hostId);
  expect(
    (await agent.report({ type: 'prepared', fencingToken: lease.fencingToken, serviceLent: false })).status,
  ).toBe(200);
  const run = await agent.poll();
  expect(run.state).toBe('run');
  if (run.state !== 'run') throw new Error('unreachable');
  expect(credential === 'clone token' ? run.cloneToken : run.jitConfig).toBeTruthy();
  return { agent, lease, run };
}

describe.concurrent('task-start timeout: a CI task dstack never starts', () => {
  it('ends as task_not_started after the timeout through the normal release; hosts freed only on cleaned', async (ctx) => {
    const h = await start(ctx, 'task');
    const { agent, lease, run } = await handedOver(h, 'clone token');
    const svc = githubService(h.c.ctx);

    // within the timeout nothing happens (dstack may still be provisioning)
    h.clock.advance((TIMEOUT_S - 10) * 1000);
    await agent.heartbeat();
    expect(await sweepTaskStart(svc)).toBe(0);
    expect((await reservation(h)).status).toBe('preparing');

    // past it, the work ends with the outcome and the cause, once
    h.clock.advance(11_000);
    await agent.heartbeat();
    const r = await h.until('released: task not started', async () => {
      const cur = await reservation(h);
      return cur.status === 'releasing' ? cur : null;
    });
    expect(r.outcome).toBe('task_not_started');
    expect(r.reason).toBe(
      `dstack did not start the CI task on ${lease.hostId} within ${TIMEOUT_S} s of its hand-over (not retried)`,
    );
    expect(await sweepTaskStart(svc)).toBe(0);
    // no retry: no second token is minted, no second task handed over
    expect(h.gh.calls('POST', /\/app\/installations\/1\/access_tokens$/).filter((c) => c.body)).toHaveLength(
      1,
    );
    expect(await h.c.ledger.db.select().from(t.jitHandoffs)).toHaveLength(1);

    // the check run says what happened at once, while the hosts are cleaned: not run (ADR 0177)
    const releasing = await h.until('check run shows the timeout', () =>
      h.gh.checkRuns.find(
        (c) =>
          c.external_id === 'r-1' &&
          c.output.title === 'Spark test not run — the task never started' &&
          c.status === 'completed',
      ),
    );
    expect(releasing.conclusion).toBe('cancelled');
    expect(releasing.output.summary).toContain(`Not run: ${r.reason}.`);
    expect(releasing.output.summary).toContain('The hosts are being cleaned and released.');

    // the agent is told to clean: stop the dstack run it submitted
    expect(await agent.poll()).toMatchObject({ state: 'clean', lease: { leaseId: lease.id } });
    // a start report with a fencing token that is not the lease's is refused and changes nothing
    const wrong = await agent.report({
      type: 'runner_started',
      fencingToken: lease.fencingToken + 1,
      runnerName: run.state === 'run' ? run.runnerName : '',
    });
    expect(wrong.status).toBe(409);

    // nothing frees the host before the agent confirms dstack terminated the run: not time either
    h.clock.advance(120_000);
    await h.c.loop.settle();
    expect(await sweepTaskStart(svc)).toBe(0);
    const [held] = await h.c.ledger.leasesOf(undefined, 'r-1');
    expect(held).toMatchObject({ status: 'releasing', runnerStartedAt: null });
    expect((await h.c.ledger.getHost(undefined, lease.hostId))?.phase).toBe('cleaning');
    expect((await reservation(h)).status).toBe('releasing');

    // the stopped run's exit (dstack: terminated, no exit status), then cleanup confirmed
    expect(
      (
        await agent.report({
          type: 'runner_exited',
          fencingToken: lease.fencingToken,
          runnerName: run.runnerName,
          exitCode: null,
          lastLines: [],
        })
      ).status,
    ).toBe(200);
    expect((await reservation(h)).status).toBe('releasing');
    expect((await agent.report({ type: 'cleaned', fencingToken: lease.fencingToken })).status).toBe(200);
    const ended = await reservation(h);
    expect(ended).toMatchObject({ status: 'failed', outcome: 'task_not_started', reason: r.reason });
    expect((await h.c.ledger.getHost(undefined, lease.hostId))?.phase).toBe('idle');

    const check = await h.until('check run final', async () => {
      await h.drain();
      const c = h.gh.checkRuns.find((x) => x.external_id === 'r-1');
      return c && !c.output.summary?.includes('The hosts are being cleaned') ? c : null;
    });
    expect(check).toMatchObject({
      status: 'completed',
      conclusion: 'cancelled',
      head_sha: SHA,
      output: { title: 'Spark test not run — the task never started' },
    });
    expect(check.output.summary).toContain(`Not run: ${r.reason}.`);
    expect(check.output.summary).toContain('comment `/spark test` on the PR to run it again');
    expect(h.gh.checkRuns.filter((c) => c.external_id === 'r-1')).toHaveLength(1);
    const history = (await h.c.ledger.history('reservation', 'r-1')).map((e) => `${e.type}: ${e.cause}`);
    expect(history).toContain(`reservation.releasing: ${r.reason}`);
  });

  it('a task that started is never swept, however long it runs', async (ctx) => {
    const h = await start(ctx, 'task');
    const { agent, lease, run } = await handedOver(h, 'clone token');
    if (run.state !== 'run') throw new Error('unreachable');
    // dstack runs it: the agent reports the start (ADR 0120: only once dstack says running)
    h.clock.advance((TIMEOUT_S - 10) * 1000);
    expect(
      (
        await agent.report({
          type: 'runner_started',
          fencingToken: lease.fencingToken,
          runnerName: run.runnerName,
          executor: 'dstack',
        })
      ).status,
    ).toBe(200);
    expect((await reservation(h)).status).toBe('running');
    const svc = githubService(h.c.ctx);
    // ten timeouts, in steps short of offline, the host heartbeating as a live one does
    for (let step = 0; step < 20; step++) {
      h.clock.advance(TIMEOUT_S * 500);
      await agent.heartbeat();
      expect(await sweepTaskStart(svc)).toBe(0);
      await h.c.loop.settle();
      expect(await reservation(h)).toMatchObject({ status: 'running', outcome: null });
    }
    expect(await agent.poll()).toMatchObject({ state: 'run' });
  });

  it('a task not handed over yet (its agent has not taken the run state) is not timed', async (ctx) => {
    const h = await start(ctx, 'task');
    await adoptAll(h.c.ledger);
    expect((await (await h.deliver('pull_request', labeled())).json()).result).toBe('queued r-1');
    await h.until('allocated', async () => (await reservation(h)).status === 'allocated');
    const lease = (await h.c.ledger.leasesOf(undefined, 'r-1'))[0]!;
    await h.until('the clone token stored', async () => {
      await h.drain();
      return (await h.c.ledger.db.select().from(t.jitHandoffs)).length > 0;
    });
    const agent = await agentOf(h, lease.hostId);
    expect(
      (await agent.report({ type: 'prepared', fencingToken: lease.fencingToken, serviceLent: false })).status,
    ).toBe(200);
    h.clock.advance((TIMEOUT_S + 10) * 1000);
    await agent.heartbeat();
    expect(await sweepTaskStart(githubService(h.c.ctx))).toBe(0);
    expect((await reservation(h)).status).toBe('preparing');
    // its clock starts at the hand-over
    expect((await agent.poll()).state).toBe('run');
    expect(await sweepTaskStart(githubService(h.c.ctx))).toBe(0);
    expect((await reservation(h)).status).toBe('preparing');
    h.clock.advance(TIMEOUT_S * 1000);
    await agent.heartbeat();
    // the background tick or this call ends it, once
    await sweepTaskStart(githubService(h.c.ctx));
    expect(await reservation(h)).toMatchObject({ status: 'releasing', outcome: 'task_not_started' });
  });
});

describe.concurrent('task-start timeout: a pair', () => {
  it('one node started, the other never: the pair fails as a unit naming the node that did not start', async (ctx) => {
    const h = await start(ctx, 'task');
    await adoptAll(h.c.ledger);
    expect((await h.enable(REPO, { pairEnabled: true })).status).toBe(200);
    // GitHub's PR carries the pair label (the token is minted only for work still wanted)
    h.gh.repos.get(REPO.toLowerCase())!.pulls[2]!.labels = ['spark-pair-test'];
    expect((await (await h.deliver('pull_request', labeled('spark-pair-test'))).json()).result).toBe(
      'queued r-1',
    );
    await h.until('allocated', async () => (await reservation(h)).status === 'allocated');
    const leases = await h.c.ledger.leasesOf(undefined, 'r-1');
    expect(leases.map((l) => l.hostId).sort()).toEqual(['spark-1', 'spark-2']);
    await h.until('both clone tokens stored', async () => {
      await h.drain();
      return (await h.c.ledger.db.select().from(t.jitHandoffs)).length === 2;
    });
    const nodes = await Promise.all(
      leases.map(async (lease) => ({ lease, agent: await agentOf(h, lease.hostId) })),
    );
    for (const { lease, agent } of nodes) {
      const prepared = { type: 'prepared', fencingToken: lease.fencingToken, serviceLent: lease.lend };
      expect((await agent.report(prepared)).status).toBe(200);
    }
    const runs = new Map<string, string>();
    for (const { lease, agent } of nodes) {
      const run = await agent.poll();
      if (run.state !== 'run') throw new Error(`${lease.hostId}: expected run, got ${run.state}`);
      runs.set(lease.hostId, run.runnerName);
    }
    // spark-2's dstack runs its task; spark-1's never does
    const two = nodes.find((n) => n.lease.hostId === 'spark-2')!;
    const started = {
      type: 'runner_started',
      fencingToken: two.lease.fencingToken,
      runnerName: runs.get('spark-2'),
      executor: 'dstack',
    };
    expect((await two.agent.report(started)).status).toBe(200);
    expect((await reservation(h)).status).toBe('running');

    h.clock.advance((TIMEOUT_S + 1) * 1000);
    for (const { agent } of nodes) await agent.heartbeat();
    const r = await h.until('released: task not started', async () => {
      const cur = await reservation(h);
      return cur.status === 'releasing' ? cur : null;
    });
    expect(r).toMatchObject({
      outcome: 'task_not_started',
      reason: `dstack did not start the CI task on spark-1 within ${TIMEOUT_S} s of its hand-over (not retried)`,
    });
    // both nodes stop their tasks (the started one too); neither host is freed yet
    for (const { lease, agent } of nodes) {
      expect(await agent.poll()).toMatchObject({ state: 'clean', lease: { leaseId: lease.id } });
      expect((await h.c.ledger.getHost(undefined, lease.hostId))?.phase).toBe('cleaning');
    }
    for (const { lease, agent } of nodes) {
      const exited = {
        type: 'runner_exited',
        fencingToken: lease.fencingToken,
        runnerName: runs.get(lease.hostId),
        exitCode: null,
        lastLines: [],
      };
      expect((await agent.report(exited)).status).toBe(200);
      expect((await agent.report({ type: 'cleaned', fencingToken: lease.fencingToken })).status).toBe(200);
    }
    expect(await reservation(h)).toMatchObject({
      status: 'failed',
      outcome: 'task_not_started',
      reason: r.reason,
    });
  });
});

describe.concurrent('task-start timeout: the runner path is unchanged', () => {
  it('a JIT runner past the task timeout is left to the pickup sweep, which replaces it as before', async (ctx) => {
    const h = await start(ctx, 'runner', { runnerPickupTimeoutS: 3 * TIMEOUT_S, runnerRetries: 1 });
    const { agent, lease } = await handedOver(h, 'JIT config');
    const svc = githubService(h.c.ctx);
    // well past the task timeout, within the pickup timeout: nothing is ended, nothing replaced
    for (let step = 0; step < 4; step++) {
      h.clock.advance(TIMEOUT_S * 500);
      await agent.heartbeat();
      expect(await sweepTaskStart(svc)).toBe(0);
    }
    expect(await sweepRunnerPickup(svc)).toBe(0);
    expect(await reservation(h)).toMatchObject({ status: 'preparing', outcome: null });
    // past the pickup timeout the runner is replaced (attempt 1), not ended as a task
    h.clock.advance((TIMEOUT_S + 5) * 1000);
    await agent.heartbeat();
    // the replacement is registered after its backoff (15 s for the first): the clock moves on
    const replaced = await h.until(
      'replacement runner',
      async () => {
        h.clock.advance(2_000);
        await agent.heartbeat();
        const rows = await h.c.ledger.db.select().from(t.jitHandoffs).where(eq(t.jitHandoffs.attempt, 1));
        return rows[0];
      },
      20_000,
    );
    expect(replaced.leaseId).toBe(lease.id);
    expect(await reservation(h)).toMatchObject({ status: 'preparing', outcome: null });
    const retry = (await h.c.ledger.history('reservation', 'r-1')).find(
      (e) => e.type === 'reservation.runner_retry',
    );
    expect(retry?.cause).toMatch(/not picked up after \d+ s; replacing it \(attempt 1 of 1\)/);
  });
});
