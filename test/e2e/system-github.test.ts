import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { isLive, waitFor } from '../../scripts/sim/doubles/index.ts';
import { DEFAULT_BRANCH_TIP } from '../../scripts/sim/harness/github-sim.ts';
import {
  type JobPlan,
  queuedId,
  REPO,
  type SparkSystem,
  startSystem,
} from '../../scripts/sim/harness/index.ts';

/**
 * The whole system from GitHub's side: controller and relay agents as separate
 * processes, the fake GitHub API and the simulated GitHub Actions service in this process. Jobs
 * run on the JIT runners the agents start; GitHub's webhooks (pull_request, workflow_job) are
 * signed and sent to the controller the way GitHub sends them. One system serves the file.
 */

const sha = (c: string) => c.repeat(40);
/** Plans by commit: which jobs a test holds at a gate. */
const plans = new Map<string, Partial<JobPlan>>();
let sys: SparkSystem;

beforeAll(async () => {
  sys = await startSystem({ plan: (j) => plans.get(j.headSha) ?? {} });
}, 90_000);

afterEach(async (ctx) => {
  if (ctx.task.result?.state === 'fail' && sys) console.error(await sys.diagnostics());
});

afterAll(async () => {
  if (!sys) return;
  expect(sys.gh.violations).toEqual([]);
  await sys.close();
});

describe('system: happy path', { timeout: 180_000 }, () => {
  it('label → dispatch → JIT runner → workflow_job events → passed check with evidence receipt', async () => {
    plans.set(sha('a'), { gates: ['work'] });
    sys.openPr(1, { sha: sha('a') });
    const rid = queuedId(await sys.label(1, 'spark-test'));
    const job = await sys.waitJob(rid);
    expect(job).toMatchObject({ hostId: 'spark-2', headSha: sha('a'), repo: REPO, topology: 'single' });
    const dispatch = sys.gh.dispatches.find((d) => d.inputs.reservation_id === rid)!;
    const nonce = dispatch.inputs.nonce!;
    expect(nonce).toMatch(/^[0-9a-f]{32}$/);
    expect(dispatch).toEqual({
      repo: REPO,
      workflow: 'spark-pr-test.yml',
      ref: 'main',
      inputs: { reservation_id: rid, nonce, head_sha: sha('a'), topology: 'single', suite: 'smoke' },
    });
    // the job asked for the seed's labels plus the nonce label, and its run (a workflow_dispatch
    // run) carries the default branch tip, not the PR commit: matched by run and runner instead
    expect(job.labels).toEqual([
      'self-hosted',
      'Linux',
      'ARM64',
      'waffuru-spark',
      'spark-single',
      `spark-${rid}-${nonce}`,
    ]);
    expect(job.runHeadSha).toBe(DEFAULT_BRANCH_TIP);
    expect(sys.gh.runs.find((r) => r.id === job.runId)?.headSha).toBe(DEFAULT_BRANCH_TIP);
    // while the job runs, the PR shows it with the exact commit
    const running = await sys.waitCheck(rid, `Spark test running — exact SHA ${sha('a').slice(0, 7)}`);
    expect(running.status).toBe('in_progress');
    expect((await sys.reservation(rid)).status).toBe('running');
    // GitHub reported the job queued when the dispatch created it, before any runner took it,
    // then in_progress at pickup (docs: webhook events, workflow_job). The check run can say
    // "running" (from the agent's start report, sent at once since ADR 0180) before the pickup's
    // webhook is processed: wait for that delivery, then compare the order
    const pickedUp = (r: string) => r === `running ${rid}` || /^job started;/.test(r);
    const results = await waitFor('the pickup webhook (workflow_job in_progress) processed', () => {
      const rs = sys.deliveries.filter((d) => d.event === 'workflow_job').map((d) => d.result ?? '');
      return rs.some(pickedUp) ? rs : null;
    });
    const queued = results.findIndex((r) => new RegExp(`^job ${job.id} queued`).test(r));
    expect(queued).toBeGreaterThanOrEqual(0);
    expect(queued).toBeLessThan(results.findIndex(pickedUp));

    sys.openGate(rid, 'work');
    const done = await sys.waitReservation(rid, ['done', 'failed']);
    expect(done).toMatchObject({ status: 'done', outcome: 'passed', headSha: sha('a') });
    const check = await sys.waitCheck(rid, 'Spark test passed — evidence receipt recorded');
    expect(check).toMatchObject({ status: 'completed', conclusion: 'success', head_sha: sha('a') });
    expect(sys.gh.checkRuns.filter((c) => c.external_id === rid)).toHaveLength(1);
    expect(JSON.parse(done.receiptJson!).byHost['spark-2']).toMatchObject({
      result: 'passed',
      headSha: sha('a'),
    });
    const types = (await sys.history(rid)).map((e) => e.type);
    for (const ty of [
      'reservation.queued',
      'reservation.allocated',
      'reservation.preparing',
      'reservation.runner_registered',
      'reservation.running',
      'reservation.receipt',
      'reservation.job_completed',
      'reservation.releasing',
      'reservation.done',
    ])
      expect(types, ty).toContain(ty);
    // GitHub's result arrived before the runner exited, so the release carries it
    expect(types.indexOf('reservation.job_completed')).toBeLessThan(types.indexOf('reservation.releasing'));
    expect(isLive(job.pid)).toBe(false);
    await sys.waitHostPhase('spark-2', ['idle']);
    // the release deregistered the one-job runner on GitHub
    await waitFor(
      'the runner to be deleted on GitHub',
      () => !sys.gh.runners.some((r) => r.name === job.runnerName),
    );
    // spark-1 kept serving Deckard throughout
    expect(sys.deckard!.ctlLog()).toEqual(['start']);
    // the admitted job completed: its run is never cancelled (ADR 0095)
    expect(sys.gh.calls('POST', /\/actions\/runs\/\d+\/cancel$/)).toEqual([]);

    // the JIT config reached only the runner: not the logs, not a public view
    expect(sys.jitConfigsSeen).toHaveLength(1);
    const views = {
      fleet: JSON.stringify((await sys.api('GET', '/api/v1/fleet', undefined, null)).body),
      queue: JSON.stringify((await sys.api('GET', '/api/v1/queue', undefined, null)).body),
      dashboard: String((await sys.api('GET', '/', undefined, null)).body),
      controllerLog: sys.controller.output(),
      agentLog: sys.agents['spark-2']!.output(),
      history: JSON.stringify(await sys.history(rid)),
    };
    for (const [where, text] of Object.entries(views)) {
      expect(text.includes(sys.jitConfigsSeen[0]!), `${where} contains the JIT config`).toBe(false);
      // the nonce is on no public surface either (the controller log is not one, but says nothing of it)
      expect(text.includes(nonce), `${where} contains the runner nonce`).toBe(false);
    }
    for (const c of sys.gh.checkRuns)
      expect(JSON.stringify(c.output).includes(nonce), 'a check run shows the nonce').toBe(false);
  });
});

describe('system: cancellation and new commits', { timeout: 180_000 }, () => {
  it('label removed / PR closed cancel only queued work; a push supersedes the queued SHA while the active run keeps its SHA', async () => {
    // a pair holds both hosts with its job running, so the next requests queue
    plans.set(sha('b'), { gates: ['work'] });
    sys.openPr(2, { sha: sha('b') });
    const pair = queuedId(await sys.label(2, 'spark-pair-test'));
    await sys.waitJob(pair, 'spark-1');
    await sys.waitJob(pair, 'spark-2');
    await sys.waitCheck(pair, `Spark test running — exact SHA ${sha('b').slice(0, 7)}`);
    // spark-1 was lent: Deckard drained and stopped before the pair got it
    expect(sys.deckard!.ctlLog()).toEqual(['start', 'drain', 'stop']);

    sys.openPr(3, { sha: sha('c') });
    const r3 = queuedId(await sys.label(3, 'spark-test'));
    sys.openPr(4, { sha: sha('d') });
    const r4 = queuedId(await sys.label(4, 'spark-test'));
    // each request next in line claims a busy host and waits for it to drain (ADR 0050 item 3):
    // the first spark-2 (service hosts last), the second spark-1
    const q3 = await sys.waitCheck(r3, 'Spark 2 draining — active job finishing');
    expect(q3.status).toBe('queued');
    expect(q3.output.summary).toContain(`spark-2 draining for ${r3}`);
    const q4 = await sys.waitCheck(r4, 'Spark 1 draining — active job finishing');
    expect(q4.status).toBe('queued');
    expect(q4.output.summary).toContain(`spark-1 draining for ${r4}`);

    // label removed from a queued request: cancelled, with the reason on its check run
    expect((await sys.unlabel(3, 'spark-test')).result).toBe(`cancelled ${r3}`);
    const c3 = await sys.waitCheck(r3, 'Spark test cancelled — never started');
    expect(c3.conclusion).toBe('cancelled');
    expect(c3.output.summary).toContain('label "spark-test" removed by @alice');
    // PR closed while queued: cancelled
    expect((await sys.closePr(4)).result).toBe(`cancelled ${r4}`);
    expect((await sys.waitCheck(r4, 'Spark test cancelled — never started')).output.summary).toContain(
      'PR #4 closed',
    );

    // label removed from the active pair: it keeps running
    expect((await sys.unlabel(2, 'spark-pair-test')).result).toBe(`kept active ${pair}`);
    expect((await sys.reservation(pair)).status).toBe('running');

    // a push supersedes the queued request for the old SHA and queues the new one
    sys.openPr(5, { sha: sha('e') });
    const r5 = queuedId(await sys.label(5, 'spark-test'));
    await sys.waitCheck(r5, 'Spark 2 draining — active job finishing');
    const pushed = await sys.push(5, sha('f'));
    expect(pushed.result).toMatch(new RegExp(`^superseded ${r5}, queued r-\\d+$`));
    const r6 = queuedId({ ...pushed, result: pushed.result!.split(', ')[1]! });
    const c5 = await sys.waitCheck(
      r5,
      `Spark test superseded — ${sha('e').slice(0, 7)} is no longer the PR head`,
    );
    expect(c5).toMatchObject({ conclusion: 'neutral', head_sha: sha('e') });
    expect(await sys.reservation(r6)).toMatchObject({ status: 'queued', headSha: sha('f') });

    // a push to the active pair's PR: the run keeps the SHA it was admitted for
    await sys.push(2, sha('9'));
    expect(await sys.reservation(pair)).toMatchObject({ status: 'running', headSha: sha('b') });

    sys.openGate(pair, 'work');
    const donePair = await sys.waitReservation(pair, ['done', 'failed']);
    expect(donePair).toMatchObject({ status: 'done', outcome: 'passed', headSha: sha('b') });
    const cPair = await sys.waitCheck(pair, 'Spark test passed — evidence receipt recorded');
    expect(cPair.head_sha).toBe(sha('b'));
    expect(Object.keys(JSON.parse(donePair.receiptJson!).byHost).sort()).toEqual(['spark-1', 'spark-2']);
    for (const j of sys.jobs.filter((x) => x.reservationId === pair)) expect(j.headSha).toBe(sha('b'));

    // the new commit runs next, on spark-2, and reports its own SHA
    const c6 = await sys.waitCheck(r6, 'Spark test passed — evidence receipt recorded');
    expect(c6.head_sha).toBe(sha('f'));
    expect((await sys.waitJob(r6)).hostId).toBe('spark-2');
    // cancelled and superseded requests never reached a host
    for (const id of [r3, r4, r5]) {
      expect(await sys.leases(id)).toEqual([]);
      expect(sys.gh.dispatches.some((d) => d.inputs.reservation_id === id)).toBe(false);
    }
    // Deckard came back on spark-1 after the pair
    await sys.waitHostPhase('spark-1', ['service']);
    expect(sys.deckard!.ctlLog()).toEqual(['start', 'drain', 'stop', 'start']);
  });

  it('refuses a fork PR with a visible check run and queues nothing', async () => {
    sys.openPr(7, { sha: sha('7'), fork: true });
    const d = await sys.label(7, 'spark-test');
    expect(d.result).toMatch(/^refused: PR #7 comes from a fork \(mallory\/butter\)/);
    const check = await waitForRefusal(sha('7'));
    expect(check.conclusion).toBe('neutral');
    expect(check.output.title).toMatch(/^Spark test refused — PR #7 comes from a fork/);
  });
});

describe('system: a foreign job takes the runner', { timeout: 180_000 }, () => {
  it('a job of another run on the reservation runner is stopped: check fails, the host is cleaned, an alert fires', async () => {
    // another workflow in the repository asks for the fleet labels only (no nonce), and is
    // queued before the admitted job: GitHub gives the next fitting runner to it
    const now = new Date().toISOString();
    const runId = 777_001;
    sys.gh.runs.push({
      id: runId,
      repo: REPO,
      workflow: 'grab.yml',
      name: 'grab',
      displayTitle: 'grab',
      runNumber: 1,
      runAttempt: 1,
      event: 'workflow_dispatch',
      headSha: DEFAULT_BRANCH_TIP,
      headBranch: 'main',
      inputs: {},
      status: 'queued',
      conclusion: null,
      createdAt: now,
    });
    sys.gh.jobs.unshift({
      id: 777_002,
      runId,
      repo: REPO,
      name: 'grab',
      labels: ['self-hosted', 'Linux', 'ARM64', 'waffuru-spark', 'spark-single'],
      headSha: DEFAULT_BRANCH_TIP,
      headBranch: 'main',
      status: 'queued',
      conclusion: null,
      runnerId: null,
      runnerName: null,
      createdAt: now,
      startedAt: null,
      completedAt: null,
    });
    sys.openPr(8, { sha: sha('8') });
    const rid = queuedId(await sys.label(8, 'spark-test'));
    const job = await sys.waitJob(rid);
    expect(job.id).toBe(777_002);
    const check = await sys.waitCheck(rid, 'Spark test failed — runner taken by a foreign job — stopped');
    expect(check).toMatchObject({ status: 'completed', conclusion: 'failure', head_sha: sha('8') });
    const ended = await sys.waitReservation(rid, ['done', 'failed']);
    expect(ended).toMatchObject({ status: 'failed', outcome: 'foreign_job' });
    // the agent stopped the runner it started (the foreign job never finished its work) and
    // cleaned the host, which is schedulable again
    expect(isLive(job.pid)).toBe(false);
    await sys.waitHostPhase(job.hostId, ['idle']);
    const history = await sys.history(rid);
    expect(history.find((e) => e.type === 'alert.foreign_job')?.cause).toMatch(
      /^runner taken by a foreign job — stopped: workflow job 777002 \(run 777001, .*\) on runner "spark-spark-2-r-\d+-a0"/,
    );
    // the admitted run is cancelled on GitHub rather than left queued for 24 h (ADR 0090); the
    // cancelled job GitHub then reports keeps the incident's outcome
    const admitted = sys.gh.runs.find((r) => r.inputs.reservation_id === rid)!;
    await waitFor('the admitted run cancelled', () => admitted.conclusion === 'cancelled');
    expect(sys.gh.calls('POST', new RegExp(`/actions/runs/${admitted.id}/cancel$`))).toMatchObject([
      { status: 202 },
    ]);
    const admittedJob = sys.gh.jobs.find((j) => j.runId === admitted.id)!;
    expect(admittedJob).toMatchObject({ status: 'completed', conclusion: 'cancelled', runnerName: null });
    const reported = await waitFor(
      `the cancelled job reported (deliveries: ${JSON.stringify(sys.deliveries.slice(-4))})`,
      () =>
        sys.deliveries.find(
          (d) =>
            d.event === 'workflow_job' &&
            (d.result === `${rid} outcome foreign_job` ||
              d.result?.startsWith(`job ${admittedJob.id} completed;`)),
        ),
    );
    expect(reported.status).toBe(202);
    expect((await sys.waitReservation(rid, ['failed'])).outcome).toBe('foreign_job');
    // the foreign job's result is never taken as the reservation's
    expect(
      history.filter((e) => e.type === 'reservation.job_completed' && /777002/.test(e.cause ?? '')),
    ).toEqual([]);
  });
});

function waitForRefusal(headSha: string) {
  return waitFor('the refusal check run', () => sys.gh.checkRuns.find((c) => c.head_sha === headSha));
}
