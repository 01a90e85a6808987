import { eq } from 'drizzle-orm';
import { describe, expect, it, type TestContext } from 'vitest';
import type { DesiredState, PollResponse } from '../../core/protocol/agent.ts';
import type { ReservationInfo } from '../../core/protocol/api.ts';
import { createAgentToken } from '../../functions/auth/tokens.ts';
import { loadDashboardData } from '../../functions/dashboard/index.ts';
import { githubService } from '../../functions/github/service.ts';
import { sweepRunnerPickup } from '../../functions/github/sweeps.ts';
import * as t from '../../functions/ledger/schema.ts';
import { toEventView } from '../../functions/views.ts';
import { example, type Harness, workflowJobEvent } from '../../scripts/sim/fake-github/harness.ts';
import { adoptAll, idleFacts } from '../../scripts/sim/ledger.ts';
import { startHarnessFor } from '../fake-github/harness-for-test.ts';
import { hostEvidence, jobReceipt } from '../helpers/host-evidence.ts';

/**
 * An infrastructure failure says so (ADR 0177), through the real controller, its ledger file and
 * the fake GitHub, with the agent's side spoken over the real agent API: work that ended before
 * the PR's script started reads "Spark test not run — <the cause in the spec's words>" with
 * GitHub's `cancelled` conclusion — the task never started, the runner never picked the job up,
 * the host preflight refused, the lease was lost — and its summary says how to queue it again. A
 * test that ran and failed still reads "Spark test failed". Nothing is queued again by itself.
 */

const REPO = 'Codertocat/Hello-World';
const SHA = 'ec26c3e57ca3a959ca5aad62de7213c562f8c821';
const AGAIN = 'Nothing is queued again by itself: comment `/spark test` on the PR to run it again.';

function labeled() {
  const p = example('pull_request', 'labeled');
  p.label.name = 'spark-test';
  p.sender.login = 'Codertocat';
  p.pull_request.labels = [{ ...p.label }];
  return p;
}

async function start(
  ctx: TestContext,
  ci: 'task' | 'runner' | 'runner-on-dstack',
  timings: Record<string, number> = {},
) {
  const h = await startHarnessFor(ctx, {
    config: {
      repositories:
        ci === 'task'
          ? { [REPO]: { executor: 'dstack', ci: 'task' } }
          : ci === 'runner-on-dstack'
            ? { [REPO]: { executor: 'dstack' } }
            : {},
      timings: { runnerPickupTimeoutS: 5, runnerRetries: 0, ...timings },
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
    async report(body: Record<string, unknown>) {
      const r = await post('/report', body);
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      return r.body;
    },
    async heartbeat(facts = idleFacts()) {
      expect((await post('/heartbeat', { facts })).status).toBe(200);
    },
  };
}

const reservation = async (h: Harness) => (await h.c.ledger.getReservation(undefined, 'r-1'))!;

/** Label → granted: the lease and its agent (not prepared yet). */
async function granted(h: Harness) {
  await adoptAll(h.c.ledger);
  expect((await (await h.deliver('pull_request', labeled())).json()).result).toBe('queued r-1');
  await h.until('allocated', async () => (await reservation(h)).status === 'allocated');
  const lease = (await h.c.ledger.leasesOf(undefined, 'r-1'))[0]!;
  return { lease, agent: await agentOf(h, lease.hostId) };
}

/** … → the agent reports prepared and takes the `run` state (the workload's hand-over). */
async function handedOver(h: Harness) {
  const { lease, agent } = await granted(h);
  await h.until('the workload credential stored', async () => {
    await h.drain();
    return (
      (await h.c.ledger.db.select().from(t.jitHandoffs).where(eq(t.jitHandoffs.leaseId, lease.id))).length > 0
    );
  });
  await agent.report({ type: 'prepared', fencingToken: lease.fencingToken, serviceLent: false });
  const run = await agent.poll();
  if (run.state !== 'run') throw new Error(`expected the run state, got ${run.state}`);
  return { lease, agent, run };
}

/** The reservation's check run once GitHub shows it completed. */
/** The agent's report of a job whose tests failed: the runner ran it and the host saw it fail. */
const failedExit = (fencingToken: number, runnerName: string) => ({
  type: 'runner_exited' as const,
  fencingToken,
  runnerName,
  exitCode: 1,
  lastLines: ['FAILED gemv_matches_cpu_reference'],
  hostEvidence: hostEvidence(SHA, {
    runner: {
      result: 'Failed',
      job: 'spark-test',
      exitCode: 1,
      stoppedByAgent: false,
      detail: 'runner console: job spark-test Failed',
    },
  }),
});

const finalCheck = (h: Harness) =>
  h.until('the check run completed', () =>
    h.gh.checkRuns.find((c) => c.external_id === 'r-1' && c.status === 'completed'),
  );

/** The public history (the dashboard's) of the reservation's release. */
async function publicRelease(h: Harness) {
  const rows = await h.c.ledger.history('reservation', 'r-1');
  const row = rows.find((e) => e.type === 'reservation.releasing')!;
  return toEventView({ ...row, id: 1 } as Parameters<typeof toEventView>[0], { publicView: true }).cause;
}

/** What the API behind `sparkctl status` and the dashboard show of r-1. */
async function shown(h: Harness) {
  const res = await fetch(`${h.c.url}/api/v1/reservations/r-1`, {
    headers: { authorization: `Bearer ${await h.operatorToken()}` },
  });
  expect(res.status).toBe(200);
  const api = ((await res.json()) as { reservation: ReservationInfo }).reservation;
  const dash = await loadDashboardData(h.c.ledger, h.c.ctx.services.views, 200);
  // the page people look at (its live fragment), as served
  const page = await fetch(`${h.c.url}/dashboard/live`);
  expect(page.status).toBe(200);
  return {
    api,
    html: await page.text(),
    active: dash.queue.active.find((q) => q.id === 'r-1') ?? null,
    history: dash.events.filter((e) => e.subjectId === 'r-1').map((e) => e.cause),
  };
}

describe.concurrent('an infrastructure failure says so on the check', () => {
  it('the host preflight refused (preparation): "not run", cancelled, the reason and how to queue it again; the echo of the cancelled run keeps it', async (ctx) => {
    const h = await start(ctx, 'runner');
    const { lease, agent } = await granted(h);
    const reason = 'GPU still busy after stopping deckard: 1 process(es) (pid 7 deckard-server); not lent';
    await agent.report({ type: 'prepare_failed', fencingToken: lease.fencingToken, reason });
    expect(await reservation(h)).toMatchObject({
      status: 'releasing',
      outcome: 'preflight_failed',
      reason: `preparation failed on ${lease.hostId}: ${reason}`,
    });
    const check = await finalCheck(h);
    expect(check).toMatchObject({
      conclusion: 'cancelled',
      head_sha: SHA,
      output: { title: 'Spark test not run — the host preflight refused' },
    });
    expect(check.output.summary).toContain(
      `Not run: preparation failed on ${lease.hostId}: ${reason}. The PR's code did not run at \`${SHA}\`, so this is not a test result. ${AGAIN}`,
    );
    expect(await publicRelease(h)).toBe(
      'releasing (allocated → releasing) by an agent: not run — the host preflight refused',
    );
    // the dispatched run is cancelled (ADR 0095); GitHub's report of it changes nothing
    const meta = await h.until('run recorded', async () => {
      const r = await reservation(h);
      return JSON.parse(r.metaJson ?? '{}').runId != null ? r : null;
    });
    const runId = JSON.parse(meta.metaJson!).runId as number;
    await h.until('the admitted run cancelled', () =>
      h.gh.calls('POST', new RegExp(`/actions/runs/${runId}/cancel$`)).some((c) => c.status === 202),
    );
    h.gh.settleCancellations();
    const job = h.gh.jobs.find((j) => j.runId === runId)!;
    const res = await h.deliver('workflow_job', workflowJobEvent(job, 'completed'));
    expect((await res.json()).result).toBe('r-1 outcome preflight_failed');
    await agent.report({ type: 'cleaned', fencingToken: lease.fencingToken });
    expect(await reservation(h)).toMatchObject({ status: 'failed', outcome: 'preflight_failed' });
    await h.drain();
    expect(h.gh.checkRuns.find((c) => c.external_id === 'r-1')!.output.title).toBe(
      'Spark test not run — the host preflight refused',
    );
  });

  it("the host preflight refused (the agent's own, before the runner): not run, naming the check", async (ctx) => {
    const h = await start(ctx, 'runner');
    const { lease, agent, run } = await handedOver(h);
    const e = hostEvidence(SHA, {
      preflight: {
        ok: false,
        at: 1_000,
        checks: [{ name: 'gpu', ok: false, fatal: true, detail: '1 GPU compute process: pid 9 python' }],
      },
      runner: {
        result: null,
        job: null,
        exitCode: null,
        stoppedByAgent: false,
        detail: 'not started: the host preflight failed',
      },
      workTrees: [],
    });
    await agent.report({
      type: 'runner_exited',
      fencingToken: lease.fencingToken,
      runnerName: run.runnerName,
      exitCode: null,
      lastLines: [],
      hostEvidence: e,
    });
    expect(await reservation(h)).toMatchObject({
      status: 'releasing',
      outcome: 'preflight_failed',
      reason: `the host preflight on ${lease.hostId} refused, nothing of the PR ran: gpu: 1 GPU compute process: pid 9 python`,
    });
    const check = await finalCheck(h);
    expect(check).toMatchObject({
      conclusion: 'cancelled',
      output: { title: 'Spark test not run — the host preflight refused' },
    });
    expect(check.output.summary).toContain('preflight FAILED (gpu FAIL)');
  });

  it('the runner never picked the job up: not run, cancelled (after the retries)', async (ctx) => {
    const h = await start(ctx, 'runner');
    await handedOver(h);
    h.clock.advance(6_000);
    await sweepRunnerPickup(githubService(h.c.ctx));
    expect(await reservation(h)).toMatchObject({ status: 'releasing', outcome: 'runner_not_picked_up' });
    const check = await finalCheck(h);
    expect(check).toMatchObject({
      conclusion: 'cancelled',
      output: { title: 'Spark test not run — the runner never picked the job up' },
    });
    expect(check.output.summary).toContain(
      'Not run: runner not picked up: 1 runner(s) waited 5 s each without a job.',
    );
    expect(check.output.summary).toContain(AGAIN);
  });

  it('the task never started (dstack ended its run before it ran): not run, with dstack’s reason; the receipt says so', async (ctx) => {
    const h = await start(ctx, 'task');
    const { lease, agent, run } = await handedOver(h);
    const why =
      'dstack run spark-r-1-spark-2-t1-a0 failed before its commands ended (failed_to_start_due_to_no_capacity: Failed to use specified fleets); the script did not run';
    await agent.report({
      type: 'runner_exited',
      fencingToken: lease.fencingToken,
      runnerName: run.runnerName,
      exitCode: null,
      lastLines: [],
      receipt: jobReceipt(
        { reservationId: 'r-1', hostId: lease.hostId, fencingToken: lease.fencingToken, headSha: SHA },
        {
          repo: REPO,
          executor: 'dstack',
          mode: 'task',
          phases: [],
          result: 'failed',
          exitCode: null,
          reason: `the task never started: ${why}`,
          toolchain: {},
        },
      ),
      hostEvidence: hostEvidence(SHA, {
        mode: 'task',
        runner: {
          result: null,
          job: null,
          exitCode: null,
          stoppedByAgent: false,
          detail: 'dstack: failed_to_start_due_to_no_capacity',
        },
        workTrees: [],
      }),
    });
    expect(await reservation(h)).toMatchObject({
      status: 'releasing',
      outcome: 'task_not_started',
      reason: `the dstack task on ${lease.hostId} never started: ${why}`,
    });
    const check = await finalCheck(h);
    expect(check).toMatchObject({
      conclusion: 'cancelled',
      output: { title: 'Spark test not run — the task never started' },
    });
    // the task's receipt names the cause too
    expect(check.output.summary).toContain(`- Spark 2: not run — the task never started: ${why}`);
    const views = await shown(h);
    expect(views.api).toMatchObject({ status: 'releasing', outcome: 'task_not_started' });
    expect(views.active).toMatchObject({ reason: 'not run — the task never started' });
    expect(views.history).toContain(
      'releasing (preparing → releasing) by an agent: not run — the task never started',
    );
  });

  it('the lease was lost before the work started: not run at once; the host is freed only when its agent confirms', async (ctx) => {
    const h = await start(ctx, 'runner');
    const { lease, agent } = await granted(h);
    // the host goes dark: nothing renews its CI lease
    h.clock.advance((h.c.ledger.config.timings.ciLeaseTtlS + 1) * 1000);
    await h.c.loop.runNow();
    const r = await reservation(h);
    expect(r).toMatchObject({
      status: 'releasing',
      outcome: 'lease_lost',
      reason: `the lease on ${lease.hostId} was lost before its work started: no heartbeat renewed it within ${h.c.ledger.config.timings.ciLeaseTtlS} s`,
    });
    expect((await h.c.ledger.getHost(undefined, lease.hostId))!.phase).toBe('release-required');
    const check = await finalCheck(h);
    expect(check).toMatchObject({
      conclusion: 'cancelled',
      output: { title: 'Spark test not run — the lease was lost' },
    });
    expect(check.output.summary).toContain(AGAIN);
    // the API and the dashboard say the same while the host waits for its agent
    const releasing = await shown(h);
    expect(releasing.api).toMatchObject({ status: 'releasing', outcome: 'lease_lost', reason: r.reason });
    expect(releasing.active).toMatchObject({ status: 'releasing', reason: 'not run — the lease was lost' });
    expect(releasing.html).toMatch(
      /<tr data-reservation="r-1">(?:(?!<\/tr>).)*not run — the lease was lost/s,
    );
    expect(releasing.history).toContain(
      'releasing (allocated → releasing) by the controller: not run — the lease was lost',
    );
    // its agent comes back: told to clean, it confirms, and only then is the host freed
    await agent.heartbeat();
    expect(await agent.poll()).toMatchObject({ state: 'clean', lease: { leaseId: lease.id } });
    await agent.report({ type: 'cleaned', fencingToken: lease.fencingToken });
    expect(await reservation(h)).toMatchObject({ status: 'failed', outcome: 'lease_lost', reason: r.reason });
    expect((await h.c.ledger.getHost(undefined, lease.hostId))!.phase).toBe('idle');
    const ended = await shown(h);
    expect(ended.api).toMatchObject({ status: 'failed', outcome: 'lease_lost', reason: r.reason });
    expect(ended.active).toBeNull();
    expect(ended.history[0]).toBe('failed (releasing → failed) by an agent: not run — the lease was lost');
    await h.drain();
    expect(h.gh.checkRuns.find((c) => c.external_id === 'r-1')).toMatchObject({
      conclusion: 'cancelled',
      output: { title: 'Spark test not run — the lease was lost' },
    });
  });

  it('a JIT runner in a dstack run that dstack ended before it ran: the task never started', async (ctx) => {
    const h = await start(ctx, 'runner-on-dstack');
    const { lease, agent, run } = await handedOver(h);
    const why =
      'dstack run spark-r-1-spark-2-t1-a0 failed before its commands ended (waiting_runner_limit_exceeded: Runner did not become available in time)';
    await agent.report({
      type: 'runner_exited',
      fencingToken: lease.fencingToken,
      runnerName: run.runnerName,
      exitCode: null,
      lastLines: [why],
      hostEvidence: hostEvidence(SHA, {
        runner: { result: null, job: null, exitCode: null, stoppedByAgent: false, detail: 'dstack: failed' },
        workTrees: [],
      }),
    });
    expect(await reservation(h)).toMatchObject({
      status: 'releasing',
      outcome: 'task_not_started',
      reason: `the dstack task on ${lease.hostId} never started: ${why}`,
    });
    expect(await finalCheck(h)).toMatchObject({
      conclusion: 'cancelled',
      output: { title: 'Spark test not run — the task never started' },
    });
  });

  it('the same exit after GitHub gave the runner its job and reported it failed: a test result, "failed"', async (ctx) => {
    const h = await start(ctx, 'runner-on-dstack');
    const { lease, agent, run } = await handedOver(h);
    await h.until(
      'run recorded',
      async () => JSON.parse((await reservation(h)).metaJson ?? '{}').runId != null,
    );
    const job = h.gh.pickUp(run.runnerName)!;
    expect(job).toBeTruthy();
    expect(
      (await (await h.deliver('workflow_job', workflowJobEvent(job, 'in_progress'))).json()).result,
    ).toBe('running r-1');
    const done = await h.deliver(
      'workflow_job',
      workflowJobEvent(h.gh.completeJob(job.id, 'failure'), 'completed'),
    );
    expect((await done.json()).result).toBe('r-1 outcome failed');
    // the agent never saw dstack run it (its start report lost to the run's quick end): no start
    await agent.report(failedExit(lease.fencingToken, run.runnerName));
    expect(await reservation(h)).toMatchObject({ status: 'releasing', outcome: 'failed' });
    expect(await finalCheck(h)).toMatchObject({
      conclusion: 'failure',
      output: { title: `Spark test failed — exact SHA ${SHA.slice(0, 7)}` },
    });
  });

  it('a test that ran and failed still reads "Spark test failed"', async (ctx) => {
    const h = await start(ctx, 'runner');
    const { lease, agent, run } = await handedOver(h);
    await agent.report({
      type: 'runner_started',
      fencingToken: lease.fencingToken,
      runnerName: run.runnerName,
    });
    await agent.report(failedExit(lease.fencingToken, run.runnerName));
    expect((await reservation(h)).outcome).toBe('failed');
    const check = await finalCheck(h);
    expect(check).toMatchObject({
      conclusion: 'failure',
      output: { title: `Spark test failed — exact SHA ${SHA.slice(0, 7)}` },
    });
    expect(check.output.summary).not.toContain('Not run');
    const views = await shown(h);
    expect(views.api).toMatchObject({ status: 'releasing', outcome: 'failed' });
    expect(views.active).toMatchObject({ status: 'releasing', reason: null });
    expect(views.html).toContain('<tr data-reservation="r-1">');
    expect(views.html).not.toContain('not run');
    expect(views.history.join('\n')).not.toContain('not run');
  });
});
