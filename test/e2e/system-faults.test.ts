import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { z } from 'zod';
import type { FleetResponse, QueueResponse } from '../../core/protocol/api.ts';
import { isLive, waitFor } from '../../scripts/sim/doubles/index.ts';
import {
  FAST_TICK_MS,
  type JobPlan,
  queuedId,
  type SparkSystem,
  startSystem,
} from '../../scripts/sim/harness/index.ts';

type FleetView = z.infer<typeof FleetResponse>;
type QueueView = z.infer<typeof QueueResponse>;

/**
 * docs/architecture.md "Failure and cancellation behavior", end to end: the controller and one
 * relay agent per host as separate processes, GitHub (API + Actions) simulated in this process.
 * The agent part's e2e tests prove the agent's side of several of these; here each scenario is
 * followed through to what GitHub users and operators see (check runs, the queue, the fleet).
 * One system serves the file; the scenarios run in order and each says what state it leaves.
 */

const sha = (c: string) => c.repeat(40);
/** Plans by commit and host. */
const plans = new Map<string, (hostId: string) => Partial<JobPlan>>();
let sys: SparkSystem;
let pr = 10;

beforeAll(async () => {
  sys = await startSystem({
    // a CI lease lives 10 s past its last heartbeat: a lease expiry plays in seconds
    timings: { offlineAfterS: 5, ciLeaseTtlS: 10, restoreRetries: 1, restoreHealthTimeoutS: 2 },
    // the scenarios read check titles and wait for the estimate line, never the wait reason (see FAST_TICK_MS)
    tickMs: FAST_TICK_MS,
    plan: (j) => plans.get(j.headSha)?.(j.hostId) ?? {},
  });
}, 90_000);

afterEach(async (ctx) => {
  if (ctx.task.result?.state === 'fail' && sys) console.error(await sys.diagnostics());
});

afterAll(async () => {
  if (!sys) return;
  expect(sys.gh.violations).toEqual([]);
  await sys.close();
});

const fleet = async () => (await sys.api<FleetView>('GET', '/api/v1/fleet', undefined, null)).body;
const hostView = async (id: string) => (await fleet()).hosts.find((h) => h.id === id)!;
const queueItem = async (id: string) =>
  (await sys.api<QueueView>('GET', '/api/v1/queue', undefined, null)).body.queued.find((q) => q.id === id);

/** Labels a fresh PR at `headSha` and returns the queued reservation. */
async function labelNewPr(headSha: string, label = 'spark-test') {
  const n = ++pr;
  sys.openPr(n, { sha: headSha });
  return { n, rid: queuedId(await sys.label(n, label)) };
}

async function baseline() {
  await sys.waitHostPhase('spark-1', ['service']);
  await sys.waitHostPhase('spark-2', ['idle']);
}

/**
 * The queued check as the spec words it ("Spark test queued — position 1"), once its summary
 * carries the estimate on a line of its own (docs/github-app.md "What people see on a PR").
 */
function queuedCheckWithEstimate(rid: string) {
  return waitFor(
    `the queued check of ${rid} with its estimate`,
    () => {
      const c = sys.checkRun(rid);
      return c?.output.title === 'Spark test queued — position 1' &&
        /^Estimate: (starts in ~|should start now|cannot start yet)/m.test(c.output.summary ?? '')
        ? c
        : null;
    },
    60_000,
    100,
  );
}

describe('system: failure and cancellation behavior', { timeout: 180_000 }, () => {
  it('one node of a pair fails: the pair fails as a unit, both nodes keep their evidence, the PR check fails', async () => {
    await baseline();
    plans.set(sha('1'), (host) =>
      host === 'spark-1'
        ? {
            result: 'failed',
            exitCode: 3,
            gates: ['work'],
            lastLines: ['NCCL WARN connection to rank 1 lost', 'FAILED allreduce matches reference'],
          }
        : { gates: ['work'] },
    );
    const { rid } = await labelNewPr(sha('1'), 'spark-pair-test');
    // both halves run before spark-1's fails
    await sys.waitJob(rid, 'spark-1');
    await sys.waitJob(rid, 'spark-2');
    sys.openGate(rid, 'work', 'spark-1');
    const r = await sys.waitReservation(rid, ['done', 'failed']);
    expect(r).toMatchObject({ status: 'failed', outcome: 'failed' });
    await sys.waitCheck(rid, `Spark test failed — exact SHA ${sha('1').slice(0, 7)}`);
    // the stopped half's host evidence comes with its exit, during the release (ADR 0160)
    const check = await waitFor('the check with both hosts evidence', () => {
      const c = sys.checkRun(rid);
      return c?.output.summary?.includes('Evidence receipt recorded') ? c : null;
    });
    expect(check.conclusion).toBe('failure');

    const [l1, l2] = await sys.leases(rid);
    expect(l1).toMatchObject({ hostId: 'spark-1', status: 'released', exitCode: 3 });
    expect(l2).toMatchObject({ hostId: 'spark-2', status: 'released' });
    expect(JSON.parse(l1!.evidenceJson!).runner.lastLines).toContain('NCCL WARN connection to rank 1 lost');
    // spark-2's healthy half was stopped by its own agent, not left running
    expect(JSON.parse(l2!.evidenceJson!).runner.lastLines).toContain('Received SIGTERM; job cancelled');
    for (const j of sys.jobs.filter((x) => x.reservationId === rid)) expect(isLive(j.pid)).toBe(false);
    const receipt = JSON.parse(r.receiptJson!).byHost['spark-1'];
    expect(receipt).toMatchObject({ result: 'failed', headSha: sha('1') });
    expect(receipt.lastLines).toContain('FAILED allreduce matches reference');
    // both hosts come back: Deckard restored on spark-1, spark-2 idle
    await baseline();
  });

  it('Deckard falls outside a lease and cannot come back: bounded retries, spark-1 quarantined with a visible alert and kept out of CI', async () => {
    const deckardDir = sys.deckard!.dir;
    const starts = () => sys.deckard!.ctlLog().filter((c) => c === 'start').length;
    const startsBefore = starts();
    writeFileSync(join(deckardDir, 'start-fails'), 'deckard: model load failed: CUDA error: out of memory');
    // Deckard stops by itself: the agent reports it and restarts it through the restore path (ADR 0175)
    sys.deckard!.kill();
    await sys.waitHostPhase('spark-1', ['quarantined']);
    expect((await sys.history('spark-1')).map((e) => e.type)).toContain('alert.service_down');

    // bounded: the first restore plus restoreRetries (1) retries, then no more attempts
    const hostEvents = await sys.history('spark-1');
    const alert = hostEvents.find((e) => e.type === 'alert.restore_failed');
    expect(alert?.cause).toBe('deckard restore failed after 2 attempts; host quarantined');
    expect(starts()).toBe(startsBefore + 2);
    const view = await hostView('spark-1');
    expect(view.state).toBe('quarantined');
    expect(view.note).toBe('quarantined: restore failed; operator must clear');
    const dashboard = String((await sys.api('GET', '/', undefined, null)).body);
    expect(dashboard).toContain('quarantined');
    expect(dashboard).toContain('restore failed');

    // out of CI: a pair cannot be admitted while spark-1 is quarantined, though spark-2 is idle
    const { n, rid } = await labelNewPr(sha('2'), 'spark-pair-test');
    await queuedCheckWithEstimate(rid);
    const q = await waitFor('the queue to explain the wait', () => queueItem(rid));
    expect(q.reason).toBe('needs 2 hosts in pool spark; 1 schedulable now');
    expect((await sys.reservation(rid)).status).toBe('queued');
    expect((await sys.unlabel(n, 'spark-pair-test')).result).toBe(`cancelled ${rid}`);
    expect(starts()).toBe(startsBefore + 2);
  });

  it('heartbeat stale: the host shows offline (never idle) and gets no CI until its agent is back', async () => {
    // spark-1 is still quarantined, so spark-2 is the only host CI could use
    await sys.agents['spark-2']!.stop('SIGKILL');
    await waitFor(
      'spark-2 to show offline',
      async () => (await hostView('spark-2')).state === 'offline',
      20_000,
    );
    const { rid } = await labelNewPr(sha('3'));
    await queuedCheckWithEstimate(rid);
    const q = await waitFor('the queue to explain the wait', () => queueItem(rid));
    expect(q.reason).toBe('needs 1 host in pool spark; 0 schedulable now');
    expect((await hostView('spark-2')).state).toBe('offline');
    expect(await sys.leases(rid)).toEqual([]);

    sys.startAgent('spark-2');
    const check = await sys.waitCheck(rid, 'Spark test passed — evidence receipt recorded');
    expect(check.head_sha).toBe(sha('3'));
    expect((await sys.leases(rid)).map((l) => l.hostId)).toEqual(['spark-2']);
    await sys.waitHostPhase('spark-2', ['idle']);
  });

  it('lease expires with processes present: release-required, nothing killed, no CI admitted until they are gone', async () => {
    // a development lease needs a dstack host (ADR 0176), which this simulated fleet does not run:
    // a CI lease whose agent went away past the lease's TTL while its job holds the GPU plays it
    plans.set(sha('7'), () => ({ gates: ['exit'] }));
    const { rid: held } = await labelNewPr(sha('7'));
    const job = await sys.waitJob(held);
    sys.gpu['spark-2']!.setProcesses([{ pid: job.pid, name: 'python train.py', usedMemoryMiB: 20480 }]);
    await waitFor(
      'a heartbeat with the job on the GPU',
      async () => (await hostView('spark-2')).gpuProcessCount === 1,
    );
    await sys.agents['spark-2']!.stop('SIGKILL');
    await sys.waitHostPhase('spark-2', ['release-required'], 40_000);
    expect(await sys.history('spark-2')).toContainEqual({
      type: 'host.phase',
      cause: 'lease expired while processes remain (or are unknown): nothing killed, nothing admitted',
    });
    // no timeout frees the host while the old work still runs: the lease still binds it
    expect((await sys.reservation(held)).status).toBe('running');
    expect((await sys.leases(held))[0]!.status).not.toBe('released');

    // its agent comes back and finds the job still on the GPU
    sys.startAgent('spark-2');
    const { rid } = await labelNewPr(sha('4'));
    await queuedCheckWithEstimate(rid);
    expect((await sys.reservation(rid)).status).toBe('queued');
    expect(isLive(job.pid)).toBe(true); // nothing was killed
    expect((await sys.host('spark-2')).phase).toBe('release-required');

    // the job ends by itself; the agent confirms the GPU is free and CI runs again
    sys.gpu['spark-2']!.setProcesses([]);
    sys.openGate(held, 'exit');
    const check = await sys.waitCheck(rid, 'Spark test passed — evidence receipt recorded');
    expect(check.head_sha).toBe(sha('4'));
    expect((await sys.reservation(held)).status).toBe('done');
    await sys.waitHostPhase('spark-2', ['idle']);

    // an operator fixes Deckard and clears the quarantine: spark-1 serves again
    rmSync(join(sys.deckard!.dir, 'start-fails'));
    expect((await sys.api('POST', '/api/v1/hosts/spark-1/clear-quarantine')).status).toBe(200);
    await sys.waitHostPhase('spark-1', ['service']);
    expect(sys.deckard!.isRunning()).toBe(true);
  });

  it('controller unavailable: the active job finishes, nothing new starts, and everything lands once it is back', async () => {
    await baseline();
    plans.set(sha('5'), () => ({ gates: ['exit'] }));
    const { rid } = await labelNewPr(sha('5'));
    const job = await sys.waitJob(rid);
    // GitHub reported the job result; the runner is still finishing up, so the host's evidence
    // (the runner's own result, ADR 0160) is not there yet
    await waitFor('the job result on GitHub', () => job.conclusion === 'success');
    await sys.waitCheck(rid, 'Spark test passed on GitHub — waiting for the host evidence');

    await sys.stopController('SIGKILL');
    const jobsAtStop = sys.jobs.length;
    sys.openGate(rid, 'exit');
    await waitFor('the runner to finish without the controller', () => !isLive(job.pid), 20_000);
    // a maintainer labels another PR meanwhile: GitHub cannot deliver it
    sys.openPr(++pr, { sha: sha('6') });
    const missed = await sys.label(pr, 'spark-test');
    expect(missed.status).toBe(0);
    await waitFor('the agent to notice', () =>
      sys.agents['spark-2']!.output().includes('controller unreachable; starting nothing new'),
    );
    // nothing new started while the controller was down (counted before it is back: the
    // restarted controller's first tick may already run the redelivered label)
    expect(sys.jobs.length).toBe(jobsAtStop);

    await sys.startController();
    const r = await sys.waitReservation(rid, ['done', 'failed']);
    expect(r).toMatchObject({ status: 'done', outcome: 'passed', headSha: sha('5') });
    // the agent's exit report, held while the controller was down, carried the host evidence
    await sys.waitCheck(rid, 'Spark test passed — evidence receipt recorded');
    // GitHub never redelivers by itself; the restarted controller reads the App's delivery log and
    // asks for the missed label again (ADR 0091): same GUID, processed once, then it queues and runs
    const again = await waitFor('the missed label redelivered', () =>
      sys.deliveries.find((d) => d.id === missed.id && d.status === 202),
    );
    const next = queuedId(again);
    // and once it is back, the only new job is the redelivered label's
    expect(sys.jobs.slice(jobsAtStop).map((j) => j.reservationId)).toEqual(
      sys.jobs.slice(jobsAtStop).map(() => next),
    );
    expect(
      sys.gh.hookDeliveries.filter((d) => d.guid === missed.id).map((d) => [d.redelivery, d.statusCode]),
    ).toEqual([
      [false, 0],
      [true, 202],
    ]);
    expect(sys.gh.calls('POST', /^\/app\/hook\/deliveries\/\d+\/attempts$/)).toHaveLength(1);
    // nothing is left for an operator to redeliver by hand
    await sys.waitCheck(next, 'Spark test passed — evidence receipt recorded');
    expect(await sys.redeliverFailed()).toEqual([]);
    expect(sys.deliveries.filter((d) => d.id === missed.id).map((d) => d.status)).toEqual([0, 202]);
    await baseline();
  });
});
