import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { queuedId, REPO, type SparkSystem, startSystem } from '../../scripts/demo/system.ts';
import { isLive } from '../doubles/index.ts';

/**
 * The whole system from GitHub's side (issue 7): controller and relay agents as separate
 * processes, the fake GitHub API and the simulated GitHub Actions service in this process. Jobs
 * run on the JIT runners the agents start; GitHub's webhooks (pull_request, workflow_job) are
 * signed and sent to the controller the way GitHub sends them.
 */

const sha = (c: string) => c.repeat(40);
let sys: SparkSystem;

beforeAll(async () => {
  sys = await startSystem();
}, 60_000);

afterAll(async () => {
  await sys?.close();
});

describe('system: label to passed check with receipt', () => {
  it('label → dispatch → JIT runner → workflow_job events → passed check with evidence receipt', async () => {
    sys.openPr(1, { sha: sha('a') });
    const rid = queuedId(await sys.label(1, 'spark-test'));
    // the job is held at its test step so the running state can be seen
    const job = await sys.waitJob(rid);
    expect(job).toMatchObject({ hostId: 'spark-2', headSha: sha('a'), repo: REPO, topology: 'single' });
    expect(sys.gh.dispatches.find((d) => d.inputs.reservation_id === rid)).toEqual({
      repo: REPO,
      workflow: 'spark-pr-test.yml',
      ref: 'main',
      inputs: { reservation_id: rid, head_sha: sha('a'), topology: 'single', suite: 'smoke' },
    });
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
    expect(types.indexOf('reservation.job_completed')).toBeLessThan(types.indexOf('reservation.releasing'));
    expect(isLive(job.pid)).toBe(false);
    await sys.waitHostPhase('spark-2', ['idle']);
    expect(sys.gh.violations).toEqual([]);
  });
});
