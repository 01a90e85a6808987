import { eq, sql } from 'drizzle-orm';
import { describe, expect, it, type TestContext } from 'vitest';
import { readMeta } from '../../functions/github/meta.ts';
import { githubService } from '../../functions/github/service.ts';
import { refreshQueuedChecks } from '../../functions/github/sweeps.ts';
import { applyReport } from '../../functions/ledger/agent-reports.ts';
import { computeDesiredState } from '../../functions/ledger/desired-state.ts';
import * as t from '../../functions/ledger/schema.ts';
import {
  example,
  type Harness,
  labelObject,
  SPARK_RUNNER_GROUP,
  workflowJobEvent,
} from '../../scripts/sim/fake-github/harness.ts';
import { validate } from '../../scripts/sim/fake-github/schema.ts';
import type { Job } from '../../scripts/sim/fake-github/server.ts';
import { adoptAll } from '../../scripts/sim/ledger.ts';
import { startHarnessFor } from '../fake-github/harness-for-test.ts';
import { hostEvidence } from '../helpers/host-evidence.ts';

const REPO = 'Codertocat/Hello-World';
const SHA = 'ec26c3e57ca3a959ca5aad62de7213c562f8c821';
/** The default branch tip: a workflow_dispatch run's (and its jobs') head_sha. */
const TIP = 'b'.repeat(40);

function labeled(label = 'spark-test', sender = 'Codertocat') {
  const p = example('pull_request', 'labeled');
  p.label.name = label;
  p.sender.login = sender;
  p.pull_request.labels = [{ ...p.label }];
  return p;
}

async function status(h: Harness, id: string) {
  return (await h.c.ledger.getReservation(undefined, id))?.status;
}

/**
 * One test's world (../fake-github/harness.ts: its own fake GitHub, controller, ledger file and
 * clock) with the enabled repository, and the helpers bound to it. Nothing is shared between
 * tests, so they run concurrently: most of their time is spent waiting on the controller's ticks
 * and GitHub's retry delays. When the test finishes, every request the controller made must have
 * matched GitHub's schema.
 */
async function scenario(ctx: TestContext, opts: { admissionIntervalMs?: number } = {}) {
  const h = await startHarnessFor(ctx, {
    config: { timings: { runnerPickupTimeoutS: 5, runnerRetries: 1 } },
    ...opts,
  });
  h.gh.addRepo(REPO, {
    installationId: 1,
    collaborators: { Codertocat: 'admin', outsider: 'triage' },
    pulls: { 2: { state: 'open', headSha: SHA, headRepo: REPO, labels: ['spark-test'] } },
    headSha: TIP,
  });
  // the rollout gate wants every host adopted; without heartbeats they stay offline (no grants)
  for (const host of h.c.ledger.config.hosts) await h.c.ledger.setManaged(host.id, true, 'test');
  expect((await h.enable(REPO)).status).toBe(200);

  /** Label → granted → the agent reports every lease prepared (agent part, simulated here). */
  async function prepared(rid = 'r-1', waitHandoff = true) {
    await adoptAll(h.c.ledger);
    expect((await (await h.deliver('pull_request', labeled())).json()).result).toBe(`queued ${rid}`);
    await h.until('allocated', async () => (await status(h, rid)) === 'allocated');
    await h.c.ledger.advanceReservation(rid, 'preparing', 'every lease reported prepared', 'agent:spark-2');
    if (!waitHandoff) return null;
    const handoff = await h.until('JIT handoff row', async () => {
      const rows = await h.c.ledger.db
        .select()
        .from(t.jitHandoffs)
        .where(eq(t.jitHandoffs.reservationId, rid));
      return rows[0];
    });
    return handoff;
  }

  /** The reservation's GitHub meta (nonce, recorded run). */
  async function metaOf(rid = 'r-1') {
    return readMeta((await h.c.ledger.getReservation(undefined, rid))!)!;
  }

  /** GitHub hands the runner its job (the fake picks the oldest queued job it fits). */
  async function pickUp(runnerName: string): Promise<Job> {
    await h.until('run recorded', async () => (await metaOf()).runId != null);
    const j = h.gh.pickUp(runnerName);
    if (!j) throw new Error(`no queued job fits runner ${runnerName}`);
    return j;
  }

  /** A job of another workflow run that asks for the fleet labels (and optionally a label). */
  function foreignJob(labels: string[]): Job {
    const now = new Date().toISOString();
    const j: Job = {
      id: 990_001,
      runId: 880_001,
      repo: REPO,
      name: 'grab-the-runner',
      labels: ['self-hosted', 'Linux', 'ARM64', 'waffuru-spark', 'spark-single', ...labels],
      headSha: 'e'.repeat(40),
      headBranch: 'attacker',
      status: 'queued',
      conclusion: null,
      runnerId: null,
      runnerName: null,
      createdAt: now,
      startedAt: null,
      completedAt: null,
    };
    // older than the admitted job: GitHub would give it the runner first
    h.gh.jobs.unshift(j);
    return j;
  }

  /** The admitted run once it is recorded, and the path that cancels it. */
  async function recordedRun(rid = 'r-1') {
    const meta = await h.until('run recorded', async () => {
      const m = await metaOf(rid);
      return m.runId != null ? m : null;
    });
    return { meta, cancelPath: new RegExp(`^/repos/${REPO}/actions/runs/${meta.runId}/cancel$`) };
  }

  return { h, prepared, metaOf, pickUp, foreignJob, recordedRun };
}

// concurrent: every test has a world of its own (see scenario)
describe.concurrent('GitHub lifecycle: dispatch, JIT runners, workflow_job, push policy, outbox', () => {
  it('the fake really checks bodies against the GitHub schema', () => {
    const schema = {
      type: 'object',
      required: ['name', 'head_sha'],
      properties: { name: { type: 'string' }, head_sha: { type: 'string' } },
    };
    // worded as GitHub words them in a 422 "Invalid request." (schema.ts githubMessage)
    expect(validate(schema, { name: 'x' }).map((p) => p.github)).toEqual([`"head_sha" wasn't supplied.`]);
    expect(validate(schema, { name: 1, head_sha: 'a' }).map((p) => p.github)).toEqual([
      "For 'properties/name', 1 is not a string.",
    ]);
  });

  it('prepared → dispatch with the nonce, run recorded, one JIT runner with the seed labels + nonce label', async (ctx) => {
    const { h, prepared, metaOf } = await scenario(ctx);
    const handoff = (await prepared())!;
    expect(handoff).toMatchObject({ hostId: 'spark-2', attempt: 0, runnerName: 'spark-spark-2-r-1-a0' });
    await h.until('dispatch', () => h.gh.dispatches.length === 1);
    const meta = await metaOf();
    expect(meta.nonce).toMatch(/^[0-9a-f]{32}$/);
    expect(h.gh.dispatches[0]).toEqual({
      repo: REPO,
      workflow: 'spark-pr-test.yml',
      ref: 'main',
      inputs: { reservation_id: 'r-1', nonce: meta.nonce, head_sha: SHA, topology: 'single', suite: 'smoke' },
    });
    // the run GitHub created is recorded (from the dispatch's run details) before any runner exists
    const run = h.gh.runs[0]!;
    expect(run).toMatchObject({ displayTitle: 'Spark test r-1', headSha: TIP, runAttempt: 1 });
    expect(meta).toMatchObject({ runId: run.id, runAttempt: 1, nonceLabel: true });
    // the inputs were read from the workflow on the default branch before the dispatch
    const order0 = h.gh.requests.map((r) => `${r.method} ${r.path}`);
    expect(
      order0.indexOf(`GET /repos/${REPO}/contents/.github/workflows/spark-pr-test.yml?ref=main`),
    ).toBeLessThan(order0.indexOf(`POST /repos/${REPO}/actions/workflows/spark-pr-test.yml/dispatches`));
    expect(h.gh.runners).toHaveLength(1);
    expect(h.gh.runners[0]!.labels).toEqual([
      'self-hosted',
      'Linux',
      'ARM64',
      'waffuru-spark',
      'spark-single',
      `spark-r-1-${meta.nonce}`,
    ]);
    // an organization runner in the group restricted to the enabled repositories (the default scope)
    expect(h.gh.runners[0]).toMatchObject({ scope: 'org:Codertocat', runnerGroupId: SPARK_RUNNER_GROUP });
    expect(handoff.jitConfig).toBe(h.gh.runners[0]!.encodedJitConfig);
    // the dispatch re-checked the PR (open, label present, SHA current) first
    const order = h.gh.requests.map((r) => `${r.method} ${r.path.split('?')[0]}`);
    expect(order.indexOf(`GET /repos/${REPO}/pulls/2`)).toBeLessThan(
      order.indexOf(`POST /repos/${REPO}/actions/workflows/spark-pr-test.yml/dispatches`),
    );
  });

  it('the run is dispatched and the runner registered at the grant; its config is handed over only once the host is prepared (ADR 0070)', async (ctx) => {
    const { h } = await scenario(ctx);
    await adoptAll(h.c.ledger);
    expect((await (await h.deliver('pull_request', labeled())).json()).result).toBe('queued r-1');
    const handoff = await h.until('JIT runner registered while the host prepares', async () => {
      const rows = await h.c.ledger.db
        .select()
        .from(t.jitHandoffs)
        .where(eq(t.jitHandoffs.reservationId, 'r-1'));
      return rows[0];
    });
    expect(await status(h, 'r-1')).toBe('allocated');
    expect(h.gh.dispatches).toHaveLength(1);
    const lease = (await h.c.ledger.leasesOf(undefined, 'r-1'))[0]!;
    expect(handoff.leaseId).toBe(lease.id);
    // the agent is told to prepare; the config waits
    const before = await computeDesiredState(h.c.ledger, h.c.ledger.db, lease.hostId, Date.now());
    expect(before.desired.state).toBe('prepare');
    expect(before.pendingHandoff).toBeNull();
    // the agent's report (the real command) makes the reservation preparing: now the config goes
    await applyReport(h.c.ledger, lease.hostId, {
      type: 'prepared',
      fencingToken: lease.fencingToken,
      serviceLent: lease.lend,
    });
    expect(await status(h, 'r-1')).toBe('preparing');
    const after = await computeDesiredState(h.c.ledger, h.c.ledger.db, lease.hostId, Date.now());
    expect(after.desired).toMatchObject({ state: 'run', runnerName: handoff.runnerName });
    expect(after.pendingHandoff?.jitConfig).toBe(h.gh.runners[0]!.encodedJitConfig);
    // one run, one runner: the preparing transition queued neither again
    const queued = await h.c.ledger.db.select().from(t.outbox).where(eq(t.outbox.reservationId, 'r-1'));
    expect(queued.filter((o) => o.kind === 'dispatch')).toHaveLength(1);
    expect(queued.filter((o) => o.kind === 'generate-jitconfig')).toHaveLength(1);
  });

  it('workflow_job in_progress → running with the exact SHA; completed → passed once the host evidence confirms it', async (ctx) => {
    const { h, prepared, pickUp } = await scenario(ctx);
    const handoff = (await prepared())!;
    const picked = await pickUp(handoff.runnerName);
    // GitHub's job carries the default branch tip; the check shows the admitted PR commit
    expect(picked.headSha).toBe(TIP);
    const res = await h.deliver('workflow_job', workflowJobEvent(picked, 'in_progress'));
    expect((await res.json()).result).toBe('running r-1');
    await h.until('running check', () =>
      h.gh.checkRuns.find(
        (c) =>
          c.external_id === 'r-1' && c.output.title === `Spark test running — exact SHA ${SHA.slice(0, 7)}`,
      ),
    );
    const done = await h.deliver('workflow_job', workflowJobEvent(h.gh.completeJob(picked.id), 'completed'));
    expect((await done.json()).result).toBe('r-1 outcome passed');
    // GitHub's word alone does not pass the check (ADR 0160): it waits for the host's evidence
    await h.until('check waiting for the host evidence', () =>
      h.gh.checkRuns.find(
        (c) =>
          c.external_id === 'r-1' &&
          c.status === 'in_progress' &&
          c.output.title === 'Spark test passed on GitHub — waiting for the host evidence',
      ),
    );
    // the agent reports the runner's exit with what it observed itself (the real command)
    const lease = (await h.c.ledger.leasesOf(undefined, 'r-1'))[0]!;
    await applyReport(h.c.ledger, lease.hostId, {
      type: 'runner_exited',
      fencingToken: lease.fencingToken,
      runnerName: handoff.runnerName,
      exitCode: 0,
      lastLines: [],
      hostEvidence: hostEvidence(SHA, {
        workTrees: [{ path: 'Hello-World/Hello-World', sha: SHA, detail: 'detached HEAD' }],
      }),
    });
    const check = await h.until('passed check', () =>
      h.gh.checkRuns.find(
        (c) => c.external_id === 'r-1' && c.output.title === 'Spark test passed — evidence receipt recorded',
      ),
    );
    expect(check.conclusion).toBe('success');
    expect(h.gh.checkRuns.filter((c) => c.external_id === 'r-1')).toHaveLength(1);
  });

  it('host evidence that lands after the release began still re-renders the check (passed, not left waiting)', async (ctx) => {
    const { h, prepared, pickUp } = await scenario(ctx);
    const handoff = (await prepared())!;
    const picked = await pickUp(handoff.runnerName);
    await h.deliver('workflow_job', workflowJobEvent(picked, 'in_progress'));
    await h.deliver('workflow_job', workflowJobEvent(h.gh.completeJob(picked.id), 'completed'));
    await h.until('check waiting for the host evidence', () =>
      h.gh.checkRuns.find(
        (c) =>
          c.external_id === 'r-1' &&
          c.output.title === 'Spark test passed on GitHub — waiting for the host evidence',
      ),
    );
    // the release begins before the agent's exit report lands (e.g. it was held while the
    // controller was unreachable): no reservation event follows the evidence any more
    await h.c.ledger.beginRelease('r-1', 'passed', 'released before the exit report', 'operator:test');
    await h.until('outbox idle', async () =>
      (await h.c.ledger.db.select().from(t.outbox)).every((o) => o.status !== 'pending'),
    );
    const lease = (await h.c.ledger.leasesOf(undefined, 'r-1'))[0]!;
    await applyReport(h.c.ledger, lease.hostId, {
      type: 'runner_exited',
      fencingToken: lease.fencingToken,
      runnerName: handoff.runnerName,
      exitCode: 0,
      lastLines: [],
      hostEvidence: hostEvidence(SHA, {
        workTrees: [{ path: 'Hello-World/Hello-World', sha: SHA, detail: 'detached HEAD' }],
      }),
    });
    const check = await h.until('passed check', () =>
      h.gh.checkRuns.find(
        (c) => c.external_id === 'r-1' && c.output.title === 'Spark test passed — evidence receipt recorded',
      ),
    );
    expect(check.conclusion).toBe('success');
  });

  it('a job asking for a guessed nonce label, or for ours from another run, changes nothing (audited)', async (ctx) => {
    const { h, prepared, metaOf, foreignJob } = await scenario(ctx);
    await prepared();
    const meta = await metaOf();
    const guess = foreignJob([`spark-r-1-${'0'.repeat(32)}`]);
    const res = await h.deliver('workflow_job', workflowJobEvent(guess, 'queued'));
    expect((await res.json()).result).toBe('fault: no such reservation label (r-1)');
    const leaked = foreignJob([`spark-r-1-${meta.nonce}`]);
    leaked.id = 990_002;
    const res2 = await h.deliver('workflow_job', workflowJobEvent(leaked, 'queued'));
    expect((await res2.json()).result).toBe(
      `not admitted: run 880001 is not the dispatched run ${meta.runId}`,
    );
    expect(await status(h, 'r-1')).toBe('preparing');
    const audits = await h.c.ledger.db
      .select()
      .from(t.events)
      .where(eq(t.events.type, 'github.job_mismatch'));
    expect(audits).toHaveLength(1);
    // the audit never repeats a label it was shown (it may be a leaked nonce)
    expect(JSON.stringify(audits)).not.toContain('0'.repeat(32));
  });

  for (const variant of ['fleet labels only', 'the leaked nonce label'] as const) {
    it(`a foreign job (${variant}) on our runner is stopped: check fails, host cleans up, alert fires`, async (ctx) => {
      const { h, prepared, metaOf, pickUp, foreignJob } = await scenario(ctx);
      const handoff = (await prepared())!;
      const meta = await metaOf();
      await h.until('run recorded', async () => (await metaOf()).runId != null);
      foreignJob(variant === 'fleet labels only' ? [] : [`spark-r-1-${meta.nonce}`]);
      const taken = await pickUp(handoff.runnerName);
      expect(taken.id).toBe(990_001);
      const res = await h.deliver('workflow_job', workflowJobEvent(taken, 'in_progress'));
      expect((await res.json()).result).toMatch(
        /^foreign job stopped: workflow job 990001 \(run 880001, .*\) on runner "spark-spark-2-r-1-a0": run 880001 is not the dispatched run/,
      );
      const r = (await h.c.ledger.getReservation(undefined, 'r-1'))!;
      expect(r).toMatchObject({ status: 'releasing', outcome: 'foreign_job' });
      // the agent's desired state is `clean`: it stops the runner it started and cleans the host
      const desired = await computeDesiredState(h.c.ledger, h.c.ledger.db, 'spark-2', h.clock());
      expect(desired.desired.state).toBe('clean');
      expect((await h.c.ledger.db.select().from(t.hosts).where(eq(t.hosts.id, 'spark-2')))[0]?.phase).toBe(
        'cleaning',
      );
      const alerts = await h.c.ledger.db
        .select()
        .from(t.events)
        .where(eq(t.events.type, 'alert.foreign_job'));
      expect(alerts).toHaveLength(1);
      expect(alerts[0]!.cause).toMatch(/^runner taken by a foreign job — stopped: workflow job 990001/);
      const check = await h.until('failed check', () =>
        h.gh.checkRuns.find(
          (c) =>
            c.external_id === 'r-1' &&
            c.output.title === 'Spark test failed — runner taken by a foreign job — stopped',
        ),
      );
      expect(check).toMatchObject({ status: 'completed', conclusion: 'failure', head_sha: SHA });
      // the admitted run is cancelled on GitHub instead of waiting 24 h there (ADR 0090)
      const cancelPath = new RegExp(`^/repos/${REPO}/actions/runs/${meta.runId}/cancel$`);
      const cancel = await h.until('the admitted run cancelled', () => h.gh.calls('POST', cancelPath)[0]);
      expect(cancel).toMatchObject({ status: 202, auth: 'installation' });
      // GitHub ends an accepted cancellation afterwards (asynchronously)
      h.gh.settleCancellations();
      const admittedRun = h.gh.runs.find((x) => x.id === meta.runId)!;
      expect(admittedRun).toMatchObject({ status: 'completed', conclusion: 'cancelled' });
      const admittedJob = h.gh.jobs.find((j) => j.runId === meta.runId)!;
      expect(admittedJob).toMatchObject({ status: 'completed', conclusion: 'cancelled', runnerName: null });
      // GitHub reports the cancelled admitted job: it ends nothing more and keeps the incident's outcome
      const cancelled = await h.deliver('workflow_job', workflowJobEvent(admittedJob, 'completed'));
      expect(cancelled.status).toBeLessThan(300);
      expect((await h.c.ledger.getReservation(undefined, 'r-1'))?.outcome).toBe('foreign_job');
      // its completion changes nothing more; the admitted job never ran
      const done = await h.deliver('workflow_job', workflowJobEvent(h.gh.completeJob(990_001), 'completed'));
      expect((await done.json()).result).toMatch(/^foreign job stopped|^foreign job on ended work/);
      expect((await h.c.ledger.getReservation(undefined, 'r-1'))?.outcome).toBe('foreign_job');
      // one cancellation per incident, whatever else GitHub reports
      await h.drain();
      expect(h.gh.calls('POST', cancelPath)).toHaveLength(1);
      expect(JSON.stringify(h.gh.checkRuns)).not.toContain(meta.nonce!);
    });
  }

  it('a foreign job whose admitted run already completed: GitHub answers 409, recorded once, not retried', async (ctx) => {
    const { h, prepared, metaOf, pickUp, foreignJob } = await scenario(ctx);
    const handoff = (await prepared())!;
    const meta = await h.until('run recorded', async () => {
      const m = await metaOf();
      return m.runId != null ? m : null;
    });
    foreignJob([]);
    const taken = await pickUp(handoff.runnerName);
    // someone cancelled the admitted run on GitHub before the controller did
    const run = h.gh.runs.find((x) => x.id === meta.runId)!;
    Object.assign(run, { status: 'completed', conclusion: 'cancelled' });
    const res = await h.deliver('workflow_job', workflowJobEvent(taken, 'in_progress'));
    expect((await res.json()).result).toMatch(/^foreign job stopped/);
    const cancelPath = new RegExp(`^/repos/${REPO}/actions/runs/${meta.runId}/cancel$`);
    const row = await h.until('the cancel-run row settled', async () => {
      const rows = await h.c.ledger.db.select().from(t.outbox).where(eq(t.outbox.kind, 'cancel-run'));
      return rows[0]?.status === 'pending' ? null : rows[0];
    });
    // a definitive answer: sent with GitHub's refusal as its result, no outbox.failed, no retry
    expect(row).toMatchObject({ status: 'sent', attempts: 1, reservationId: 'r-1' });
    expect(JSON.parse(row.resultJson!)).toEqual({
      runId: meta.runId,
      cancelled: false,
      status: 409,
      message: 'Cannot cancel a workflow run that is completed.',
    });
    await h.drain();
    expect(h.gh.calls('POST', cancelPath).map((c) => c.status)).toEqual([409]);
    const failed = await h.c.ledger.db.select().from(t.events).where(eq(t.events.type, 'outbox.failed'));
    expect(failed).toEqual([]);
    expect((await h.c.ledger.getReservation(undefined, 'r-1'))?.outcome).toBe('foreign_job');
  });

  it('preparation fails after the dispatch: the admitted run is cancelled on GitHub (ADR 0095)', async (ctx) => {
    const { h, recordedRun } = await scenario(ctx);
    await adoptAll(h.c.ledger);
    expect((await (await h.deliver('pull_request', labeled())).json()).result).toBe('queued r-1');
    const { meta, cancelPath } = await recordedRun();
    const lease = (await h.c.ledger.leasesOf(undefined, 'r-1'))[0]!;
    await applyReport(h.c.ledger, lease.hostId, {
      type: 'prepare_failed',
      fencingToken: lease.fencingToken,
      reason: 'GPU busy',
    });
    // the host refused before anything of the PR ran: not a test failure (ADR 0177)
    expect(await h.c.ledger.getReservation(undefined, 'r-1')).toMatchObject({
      status: 'releasing',
      outcome: 'preflight_failed',
    });
    const cancel = await h.until('the admitted run cancelled', () => h.gh.calls('POST', cancelPath)[0]);
    expect(cancel).toMatchObject({ status: 202, auth: 'installation' });
    h.gh.settleCancellations();
    expect(h.gh.runs.find((x) => x.id === meta.runId)).toMatchObject({
      status: 'completed',
      conclusion: 'cancelled',
    });
    const job = h.gh.jobs.find((j) => j.runId === meta.runId)!;
    expect(job).toMatchObject({ status: 'completed', conclusion: 'cancelled', runnerName: null });
    // GitHub's report of the cancelled job keeps the release's outcome
    const res = await h.deliver('workflow_job', workflowJobEvent(job, 'completed'));
    expect((await res.json()).result).toBe('r-1 outcome preflight_failed');
    await h.drain();
    expect(h.gh.calls('POST', cancelPath)).toHaveLength(1);
  });

  it('work released while its job is queued on GitHub: the run is cancelled; the echo keeps the outcome', async (ctx) => {
    const { h, prepared, recordedRun } = await scenario(ctx);
    await prepared();
    const { meta, cancelPath } = await recordedRun();
    expect(h.gh.jobs.find((j) => j.runId === meta.runId)?.status).toBe('queued');
    await h.c.ledger.beginRelease('r-1', 'released', 'released by alice', 'alice');
    await h.until('the admitted run cancelled', () => h.gh.calls('POST', cancelPath)[0]?.status === 202);
    h.gh.settleCancellations();
    const job = h.gh.jobs.find((j) => j.runId === meta.runId)!;
    expect(job).toMatchObject({ status: 'completed', conclusion: 'cancelled' });
    // our own cancellation's echo does not turn the release into a `cancelled` (failed) result
    const res = await h.deliver('workflow_job', workflowJobEvent(job, 'completed'));
    expect((await res.json()).result).toBe('r-1 outcome released');
    expect((await h.c.ledger.getReservation(undefined, 'r-1'))?.outcome).toBe('released');
    const rows = await h.c.ledger.db.select().from(t.outbox).where(eq(t.outbox.kind, 'cancel-run'));
    expect(rows.map((r) => r.idempotencyKey)).toEqual([`cancel-run:r-1:${meta.runId}`]);
  });

  it('a run cancelled on GitHub by someone else while the work is active still counts as cancelled', async (ctx) => {
    const { h, prepared, recordedRun } = await scenario(ctx);
    await prepared();
    const { meta } = await recordedRun();
    const job = h.gh.completeJob(h.gh.jobs.find((j) => j.runId === meta.runId)!.id, 'cancelled');
    const res = await h.deliver('workflow_job', workflowJobEvent(job, 'completed'));
    expect((await res.json()).result).toBe('r-1 outcome cancelled');
  });

  it('the runner exits 0 before GitHub reports the job: the release cancels nothing (ADR 0095)', async (ctx) => {
    const { h, prepared, pickUp } = await scenario(ctx);
    const handoff = (await prepared())!;
    const picked = await pickUp(handoff.runnerName);
    await h.deliver('workflow_job', workflowJobEvent(picked, 'in_progress'));
    const lease = (await h.c.ledger.leasesOf(undefined, 'r-1'))[0]!;
    await applyReport(h.c.ledger, lease.hostId, {
      type: 'runner_exited',
      fencingToken: lease.fencingToken,
      runnerName: handoff.runnerName,
      exitCode: 0,
      lastLines: [],
    });
    expect(await h.c.ledger.getReservation(undefined, 'r-1')).toMatchObject({
      status: 'releasing',
      outcome: 'runner exited 0',
    });
    await h.drain();
    await h.drain();
    expect(h.gh.calls('POST', /\/cancel$/)).toEqual([]);
    const done = await h.deliver('workflow_job', workflowJobEvent(h.gh.completeJob(picked.id), 'completed'));
    expect((await done.json()).result).toBe('r-1 outcome passed');
    expect(await h.c.ledger.db.select().from(t.outbox).where(eq(t.outbox.kind, 'cancel-run'))).toEqual([]);
  });

  it("released while the run is still being looked up by its jobs' nonce label: found, recorded, cancelled", async (ctx) => {
    const { h, metaOf } = await scenario(ctx);
    // without run details (204), the run is found by its jobs' nonce label through find-run rows
    h.gh.fail({ method: 'POST', path: /\/dispatches$/, status: 204, body: null });
    await adoptAll(h.c.ledger);
    expect((await (await h.deliver('pull_request', labeled())).json()).result).toBe('queued r-1');
    const nonce = await h.until('nonce', async () => (await metaOf()).nonce);
    await h.until('the controller dispatched', () => h.gh.calls('POST', /\/dispatches$/).length === 1);
    await h.c.ledger.beginRelease('r-1', 'released', 'released by alice', 'alice');
    // GitHub creates the run a moment later (the injected 204 did not)
    const made = await fetch(`${h.gh.url}/repos/${REPO}/actions/workflows/spark-pr-test.yml/dispatches`, {
      method: 'POST',
      headers: { authorization: `token ${[...h.gh.tokens.keys()][0]}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        ref: 'main',
        inputs: { reservation_id: 'r-1', nonce, head_sha: SHA, topology: 'single', suite: 'smoke' },
      }),
    });
    expect(made.status).toBe(204);
    const runId = h.gh.runs[0]!.id;
    await h.until(
      'the late-found run cancelled',
      async () => {
        h.clock.advance(5_000);
        await h.drain();
        return h.gh.calls('POST', new RegExp(`/actions/runs/${runId}/cancel$`))[0]?.status === 202;
      },
      20_000,
    );
    expect((await metaOf()).runId).toBe(runId);
    h.gh.settleCancellations();
    expect(h.gh.runs[0]).toMatchObject({ status: 'completed', conclusion: 'cancelled' });
    // no runner was ever registered for the ended work
    expect(h.gh.calls('POST', /generate-jitconfig$/)).toEqual([]);
  });

  it("without run details in the dispatch answer (204), the run is found by its jobs' nonce label, never its name", async (ctx) => {
    const { h, prepared, metaOf } = await scenario(ctx);
    // GitHub Enterprise Server without return_run_details answers 204 with no body
    h.gh.fail({
      method: 'POST',
      path: /\/dispatches$/,
      status: 204,
      body: null,
    });
    await prepared('r-1', false);
    // the injected 204 did not create a run: play GitHub creating it a moment later
    const meta = await h.until('nonce', async () => (await metaOf()).nonce);
    await h.until('the controller dispatched', () => h.gh.calls('POST', /\/dispatches$/).length === 1);
    expect(h.gh.runs).toHaveLength(0);
    const other = await fetch(`${h.gh.url}/repos/${REPO}/actions/workflows/spark-pr-test.yml/dispatches`, {
      method: 'POST',
      headers: { authorization: `token ${[...h.gh.tokens.keys()][0]}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        ref: 'main',
        inputs: { reservation_id: 'r-1', nonce: meta, head_sha: SHA, topology: 'single', suite: 'smoke' },
      }),
    });
    expect(other.status).toBe(204);
    const runId = h.gh.runs[0]!.id;
    await h.until(
      "run recorded by its jobs' label",
      async () => {
        await h.drain();
        return (await metaOf()).runId === runId;
      },
      20_000,
    );
    const ev = await h.c.ledger.db
      .select()
      .from(t.events)
      .where(eq(t.events.type, 'reservation.run_recorded'));
    expect(ev[0]?.cause).toMatch(/identified by its jobs' runner label/);
    // the run was found by listing its jobs, never by its name
    expect(h.gh.calls('GET', new RegExp(`/actions/runs/${runId}/jobs`)).length).toBeGreaterThan(0);
    // the runner is registered only now that the run is known
    await h.until('runner registered', () => h.gh.runners.length === 1, 20_000);
  });

  it('label removal while running does not cancel; release deletes the runner (busy 422 retried)', async (ctx) => {
    const { h, prepared, pickUp } = await scenario(ctx);
    const handoff = (await prepared())!;
    const picked = await pickUp(handoff.runnerName);
    await h.deliver('workflow_job', workflowJobEvent(picked, 'in_progress'));
    const p = example('pull_request', 'unlabeled');
    p.label.name = 'spark-test';
    p.pull_request.labels = [];
    p.sender.login = 'Codertocat';
    const res = await h.deliver('pull_request', p);
    expect((await res.json()).result).toBe('kept active r-1');
    expect(await status(h, 'r-1')).toBe('running');
    // GitHub reports the job passed while its JIT runner is still busy winding down
    const passed = { ...picked, status: 'completed' as const, conclusion: 'success' as const };
    expect(
      (await (await h.deliver('workflow_job', workflowJobEvent(passed, 'completed'))).json()).result,
    ).toBe('r-1 outcome passed');
    h.gh.runners[0]!.busy = true;
    await h.c.ledger.beginRelease('r-1', 'passed', 'runner exited 0', 'agent:spark-2');
    await h.until('busy 422 seen', () =>
      h.gh.calls('DELETE', /actions\/runners\/\d+$/).some((r) => r.status === 422),
    );
    expect(h.gh.runners).toHaveLength(1);
    h.gh.runners[0]!.busy = false;
    await h.until(
      'runner deleted',
      async () => {
        const row = (
          await h.c.ledger.db
            .select()
            .from(t.jitHandoffs)
            .where(eq(t.jitHandoffs.runnerName, handoff.runnerName))
        )[0];
        return row?.deletedAt != null && h.gh.runners.length === 0;
      },
      20_000,
    );
    // the admitted job completed: its run is never cancelled (ADR 0095)
    await h.drain();
    expect(h.gh.calls('POST', /\/cancel$/)).toEqual([]);
  });

  it('work no longer wanted at dispatch time is released instead of dispatched', async (ctx) => {
    const { h } = await scenario(ctx);
    h.gh.repos.get(REPO.toLowerCase())!.pulls[2]!.labels = [];
    await adoptAll(h.c.ledger);
    expect((await (await h.deliver('pull_request', labeled())).json()).result).toBe('queued r-1');
    // the dispatch is queued at the grant (ADR 0070): its re-check runs while the hosts prepare
    await h.until('released as withdrawn', async () => {
      const r = await h.c.ledger.getReservation(undefined, 'r-1');
      return r?.status === 'releasing' && r.outcome === 'withdrawn';
    });
    expect(h.gh.dispatches).toHaveLength(0);
    // no run, so no runner was ever registered for it
    expect(h.gh.runners).toHaveLength(0);
    const r = await h.c.ledger.getReservation(undefined, 'r-1');
    expect(r?.reason).toMatch(/label "spark-test" was removed/);
  });

  it('push to the PR supersedes queued work; only an authorized pusher gets the new SHA queued', async (ctx) => {
    const { h } = await scenario(ctx);
    expect((await (await h.deliver('pull_request', labeled())).json()).result).toBe('queued r-1');
    const sync = (sender: string, sha: string) => {
      const p = example('pull_request', 'synchronize');
      p.repository.full_name = REPO;
      p.pull_request.head.sha = sha;
      p.pull_request.head.repo.full_name = REPO;
      p.pull_request.base.repo.full_name = REPO;
      p.pull_request.number = 2;
      p.number = 2;
      p.pull_request.labels = [labelObject(REPO, 'spark-test', 1)];
      p.sender.login = sender;
      return p;
    };
    const a = await h.deliver('pull_request', sync('Codertocat', '1'.repeat(40)));
    expect((await a.json()).result).toBe('superseded r-1, queued r-2');
    expect(await status(h, 'r-1')).toBe('superseded');
    expect((await h.c.ledger.getReservation(undefined, 'r-2'))?.headSha).toBe('1'.repeat(40));
    await h.until('superseded check', () =>
      h.gh.checkRuns.find((c) => c.external_id === 'r-1' && /superseded/.test(c.output.title ?? '')),
    );

    const b = await h.deliver('pull_request', sync('outsider', '2'.repeat(40)));
    expect((await b.json()).result).toBe('superseded r-2, not requeued (sender not authorized)');
    expect(await h.c.ledger.db.all(sql`SELECT id FROM reservations WHERE status = 'queued'`)).toEqual([]);
    const refusal = await h.until('refusal on new SHA', () =>
      h.gh.checkRuns.find((c) => c.head_sha === '2'.repeat(40)),
    );
    expect(refusal.output.title).toMatch(/new commits pushed by @outsider were not queued/);
  });

  it('push to the default branch queues merge CI (70) and supersedes the older queued merge', async (ctx) => {
    const { h } = await scenario(ctx);
    const push = (after: string) => {
      const p = example('push');
      p.repository.full_name = REPO;
      p.repository.default_branch = 'main';
      p.ref = 'refs/heads/main';
      p.after = after;
      p.deleted = false;
      return p;
    };
    expect((await (await h.deliver('push', push('3'.repeat(40)))).json()).result).toBe('queued r-1');
    expect((await (await h.deliver('push', push('4'.repeat(40)))).json()).result).toBe(
      'superseded r-1, queued r-2',
    );
    const r2 = await h.c.ledger.getReservation(undefined, 'r-2');
    expect(r2).toMatchObject({ kind: 'merge', priority: 70, pr: null, headSha: '4'.repeat(40) });
    const other = push('5'.repeat(40));
    other.ref = 'refs/heads/feature';
    expect((await (await h.deliver('push', other)).json()).result).toMatch(/ignored/);
  });

  it('merge CI on push: a malformed SHA is refused, an unauthorized pusher queues nothing (ADR 0003)', async (ctx) => {
    const { h } = await scenario(ctx);
    // item 10
    const push = (after: string, sender = 'Codertocat') => {
      const p = example('push');
      p.repository.full_name = REPO;
      p.repository.default_branch = 'main';
      p.ref = 'refs/heads/main';
      p.after = after;
      p.deleted = false;
      p.sender.login = sender;
      return p;
    };
    // the inbox acknowledges a signed JSON delivery (202) and records a payload that is not the
    // event's shape as invalid (ADR 0035); the SHA never reaches a ledger write or a GitHub URL
    for (const after of ['../../../orgs/acme', 'A'.repeat(40), '3'.repeat(39), `${'3'.repeat(40)}/x`]) {
      const res = await h.deliver('push', push(after));
      expect(res.status, after).toBe(202);
      expect(await res.json(), after).toMatchObject({
        state: 'done',
        result: 'invalid payload: push payload is missing fields: after',
      });
    }
    expect(h.gh.requests.filter((r) => /orgs\/acme|A{40}|3{39}/.test(r.path))).toEqual([]);
    expect(await h.c.ledger.db.all(sql`SELECT id FROM reservations`)).toEqual([]);
    const refused = await h.deliver('push', push('6'.repeat(40), 'outsider'));
    expect((await refused.json()).result).toMatch(
      /^refused: merge CI for 6666666 was not queued: the push by @outsider/,
    );
    expect(await h.c.ledger.db.all(sql`SELECT id FROM reservations`)).toEqual([]);
    const check = await h.until('refusal check', () =>
      h.gh.checkRuns.find((c) => c.head_sha === '6'.repeat(40)),
    );
    expect(check.name).toBe('Spark request refused');
    expect((await (await h.deliver('push', push('7'.repeat(40)))).json()).result).toBe('queued r-1');
  });

  it('outbox retries after GitHub answers 500 and the check run is created exactly once', async (ctx) => {
    const { h } = await scenario(ctx);
    h.gh.fail({ method: 'POST', path: /\/check-runs$/, status: 500 });
    await h.deliver('pull_request', labeled());
    await h.until(
      'check created after retry',
      () => h.gh.checkRuns.find((c) => c.external_id === 'r-1'),
      20_000,
    );
    const posts = h.gh.calls('POST', /\/check-runs$/);
    expect(posts.map((p) => p.status)).toEqual([500, 201]);
    // the send is recorded right after GitHub answers: wait for that write
    const row = await h.until('outbox row marked sent', async () => {
      const rows = await h.c.ledger.db.select().from(t.outbox).where(eq(t.outbox.reservationId, 'r-1'));
      return rows[0]?.status === 'sent' ? rows[0] : null;
    });
    expect(row.attempts).toBe(2);
    expect(h.gh.checkRuns.filter((c) => c.external_id === 'r-1')).toHaveLength(1);
  });

  it('honours Retry-After and rate-limit reset before trying again', async (ctx) => {
    const { h } = await scenario(ctx);
    h.gh.fail({
      method: 'POST',
      path: /\/check-runs$/,
      status: 403,
      headers: { 'retry-after': '2', 'x-ratelimit-remaining': '1' },
    });
    await h.deliver('pull_request', labeled());
    await h.until(
      'created after Retry-After',
      () => h.gh.checkRuns.find((c) => c.external_id === 'r-1'),
      20_000,
    );
    const [first, second] = h.gh.calls('POST', /\/check-runs$/);
    expect(first!.status).toBe(403);
    expect(second!.at - first!.at).toBeGreaterThanOrEqual(1900);

    const reset = Math.ceil((Date.now() + 2000) / 1000);
    h.gh.fail({
      method: 'PATCH',
      path: /\/check-runs\/\d+$/,
      status: 403,
      headers: { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': String(reset) },
    });
    await h.c.ledger.cancelReservation('r-1', 'test', 'test cancel');
    // the first PATCH after the limited one: a queued-check refresh may have patched before the
    // failure was set up, and that one says nothing about the pause
    const afterLimited = () => {
      const patches = h.gh.calls('PATCH', /\/check-runs\/\d+$/);
      const limited = patches.findIndex((r) => r.status === 403);
      return limited < 0 ? undefined : patches.slice(limited + 1).find((r) => r.status === 200);
    };
    const ok = await h.until('patched after reset', afterLimited, 20_000);
    expect(ok.at).toBeGreaterThanOrEqual(reset * 1000 - 50);
  });

  it('a runner not picked up is replaced, then the reservation is released with the reason', async (ctx) => {
    const { h, prepared, metaOf } = await scenario(ctx);
    const first = (await prepared())!;
    h.clock.advance(6_000);
    const second = await h.until(
      'replacement runner',
      async () => {
        h.clock.advance(2_000);
        const rows = await h.c.ledger.db.select().from(t.jitHandoffs).where(eq(t.jitHandoffs.attempt, 1));
        return rows[0];
      },
      20_000,
    );
    expect(second.runnerName).toBe('spark-spark-2-r-1-a1');
    await h.until('old runner deleted', () => !h.gh.runners.some((r) => r.name === first.runnerName));
    h.clock.advance(6_000);
    await h.until(
      'released: runner not picked up',
      async () => {
        h.clock.advance(1_000);
        const r = await h.c.ledger.getReservation(undefined, 'r-1');
        return r?.status === 'releasing' && r.outcome === 'runner_not_picked_up';
      },
      20_000,
    );
    await h.until('check shows the reason', () =>
      h.gh.checkRuns.find(
        (c) =>
          c.external_id === 'r-1' &&
          c.output.title === 'Spark test not run — the runner never picked the job up' &&
          c.conclusion === 'cancelled',
      ),
    );
    await h.until('every runner deregistered', () => h.gh.runners.length === 0);
    // nothing of ours will take its job now: the run is cancelled, not left queued (ADR 0095)
    const runId = (await metaOf()).runId;
    await h.until('the admitted run cancelled', () =>
      h.gh.calls('POST', new RegExp(`/actions/runs/${runId}/cancel$`)).some((c) => c.status === 202),
    );
    h.gh.settleCancellations();
    expect(h.gh.jobs.find((j) => j.runId === runId)).toMatchObject({ conclusion: 'cancelled' });
  });

  it('JIT registrations share one 10,000/h bucket per App: an empty bucket defers to the next hour', async (ctx) => {
    const { h, prepared } = await scenario(ctx);
    const hour = Math.floor(h.clock() / 3_600_000);
    await h.c.ledger.db
      .insert(t.meta)
      .values({ key: 'github:jit_bucket', value: JSON.stringify({ hour, used: 10_000 }) });
    await prepared('r-1', false);
    const row = await h.until('JIT row deferred', async () => {
      const rows = await h.c.ledger.db.select().from(t.outbox).where(eq(t.outbox.kind, 'generate-jitconfig'));
      return rows[0]?.lastError ? rows[0] : null;
    });
    expect(row.status).toBe('pending');
    expect(row.lastError).toMatch(/JIT registration budget \(10000\/h per App\) used up/);
    expect(row.nextAttemptAt).toBeGreaterThanOrEqual((hour + 1) * 3_600_000);
    expect(h.gh.runners).toHaveLength(0);
  });

  it('a check run GitHub refuses for good fails once, is audited, and is not retried every tick', async (ctx) => {
    const { h } = await scenario(ctx);
    h.gh.fail({ method: 'POST', path: /\/check-runs$/, status: 403, times: 100 });
    await h.deliver('pull_request', labeled());
    // every row the outbox holds for r-1 has been tried (a change may have queued a second sync
    // while the first was failing); the refusal fails each once
    const rows = await h.until('outbox rows failed', async () => {
      const all = await h.c.ledger.db.select().from(t.outbox).where(eq(t.outbox.reservationId, 'r-1'));
      return all.some((r) => r.status === 'failed') && all.every((r) => r.status !== 'pending') && all;
    });
    expect(rows.map((r) => [r.status, r.attempts])).toEqual(rows.map(() => ['failed', 1]));
    const ev = await h.c.ledger.db.select().from(t.events).where(eq(t.events.type, 'outbox.failed'));
    expect(ev[0]?.cause).toMatch(/check-run gave up after 1 attempt\(s\): POST .*check-runs → 403/);
    expect(await refreshQueuedChecks(githubService(h.c.ctx))).toBe(0);
    h.gh.failures.length = 0;
  });

  it('a queued check whose wait reason changes under the same title is re-sent once, with the new reason', async (ctx) => {
    // no periodic pass: the reason written below stays until the refresh has seen it (a kicked
    // pass only follows changes the ledger announces)
    const { h } = await scenario(ctx, { admissionIntervalMs: 3_600_000 });
    expect((await (await h.deliver('pull_request', labeled())).json()).result).toBe('queued r-1');
    const svc = githubService(h.c.ctx);
    const sent = () => h.gh.checkRuns.find((c) => c.external_id === 'r-1');
    const settled = async () => {
      const rows = await h.c.ledger.db.select().from(t.outbox).where(eq(t.outbox.reservationId, 'r-1'));
      return rows.length > 0 && rows.every((r) => r.status !== 'pending');
    };
    await h.until('the queued check sent and its outbox settled', async () => !!sent() && (await settled()));
    // nothing moved since it was sent: the refresh sends nothing
    expect(await refreshQueuedChecks(svc)).toBe(0);
    const before = sent()!;
    expect(before.status).toBe('queued');
    // the wait reason changes and nothing else does (as when a check went out before the pass
    // that wrote the reason): the title stays, the summary does not
    await h.c.ledger.db
      .update(t.reservations)
      .set({ reason: 'Spark 2 is draining for this request' })
      .where(eq(t.reservations.id, 'r-1'));
    expect(await refreshQueuedChecks(svc)).toBe(1);
    const after = await h.until('the check shows the new reason', () => {
      const c = sent();
      return c && /Spark 2 is draining for this request/.test(c.output.summary ?? '') ? c : null;
    });
    expect(after.output.title).toBe(before.output.title);
    await h.until('the re-send settled', settled);
    // sent once: the next refresh finds it current
    expect(await refreshQueuedChecks(svc)).toBe(0);
  });

  it('development work that names a repository gets no check run (only GitHub requests do)', async (ctx) => {
    const { h } = await scenario(ctx);
    await h.c.ledger.createReservation(
      { kind: 'development', topology: 'single', repo: REPO, headSha: SHA, requester: 'sparkctl:alice' },
      'sparkctl:alice',
    );
    await h.deliver('pull_request', labeled());
    await h.until('check for the GitHub request', () => h.gh.checkRuns.find((c) => c.external_id === 'r-2'));
    const rows = await h.c.ledger.db.select().from(t.outbox).where(eq(t.outbox.reservationId, 'r-1'));
    expect(rows).toEqual([]);
    expect(h.gh.checkRuns.some((c) => c.external_id === 'r-1')).toBe(false);
  });

  it('the JIT config never appears in any API response, log line, outbox row or event row', async (ctx) => {
    const { h, prepared, pickUp } = await scenario(ctx);
    const handoff = (await prepared())!;
    const secret = h.gh.runners[0]!.encodedJitConfig;
    expect(handoff.jitConfig).toBe(secret);
    await h.until('dispatch sent', () => h.gh.dispatches.length === 1);
    await h.deliver('workflow_job', workflowJobEvent(await pickUp(handoff.runnerName), 'in_progress'));
    const token = await h.operatorToken();
    const bodies: string[] = [];
    for (const path of ['/api/v1/fleet', '/api/v1/queue', '/api/v1/repositories', '/healthz', '/']) {
      const res = await fetch(`${h.c.url}${path}`, { headers: { authorization: `Bearer ${token}` } });
      bodies.push(await res.text());
    }
    for (const b of bodies) expect(b).not.toContain(secret);
    const dump = JSON.stringify([
      await h.c.ledger.db.select().from(t.events),
      await h.c.ledger.db.select().from(t.outbox),
      await h.c.ledger.db.select().from(t.reservations),
      await h.c.ledger.db.select().from(t.webhookDeliveries),
    ]);
    expect(dump).not.toContain(secret);
    expect(h.logs.join('\n')).not.toContain(secret);
    expect(JSON.stringify(h.gh.checkRuns)).not.toContain(secret);
    // once released, a config that was never handed over is erased
    await h.c.ledger.beginRelease('r-1', 'released', 'test release', 'test');
    const row = (
      await h.c.ledger.db.select().from(t.jitHandoffs).where(eq(t.jitHandoffs.runnerName, handoff.runnerName))
    )[0];
    expect(row?.jitConfig).toBeNull();
  });
});
