import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { isLive } from '../doubles/index.ts';
import { type JobPlan, queuedId, type SparkSystem, startSystem } from '../harness/index.ts';

/**
 * Issue 14 item 1 end to end: one node of a running pair goes dark. The controller and one relay
 * agent per host run as separate processes; GitHub is simulated in this process.
 *
 * How the node goes dark: the agent process is frozen with SIGSTOP (it stops heartbeating and
 * answering, its runner keeps running, as when a host drops off the network). Cutting the agent
 * off with a network namespace + veth pair is not implemented here yet: the simulated runner and
 * GitHub listen on loopback in the host namespace, so moving the agent alone into a namespace
 * needs the harness to serve both on the veth address. The test prints which mode ran.
 */

const sha = (c: string) => c.repeat(40);
const plans = new Map<string, (hostId: string) => Partial<JobPlan>>();
let sys: SparkSystem;
const OFFLINE_AFTER_S = 3;

beforeAll(async () => {
  sys = await startSystem({
    timings: { offlineAfterS: OFFLINE_AFTER_S, ciLeaseTtlS: 120 },
    plan: (j) => plans.get(j.headSha)?.(j.hostId) ?? {},
  });
}, 90_000);

afterEach(async (ctx) => {
  if (ctx.task.result?.state === 'fail' && sys) console.error(await sys.diagnostics());
});

afterAll(async () => {
  // never leave a frozen agent behind
  const a = sys?.agents['spark-1'];
  if (a?.proc.pid) {
    try {
      process.kill(a.proc.pid, 'SIGCONT');
    } catch {}
  }
  if (!sys) return;
  expect(sys.gh.violations).toEqual([]);
  await sys.close();
});

describe('failures: a pair node goes dark', { timeout: 180_000 }, () => {
  it('the pair fails as a unit, the healthy runner stops, the dark node is release-required until its agent confirms', async () => {
    console.log('[failures-pair-lost] mode: SIGSTOP (network namespace variant not implemented)');
    await sys.waitHostPhase('spark-1', ['service']);
    await sys.waitHostPhase('spark-2', ['idle']);
    plans.set(sha('7'), () => ({ gates: ['work'] }));
    sys.openPr(70, { sha: sha('7') });
    const rid = queuedId(await sys.label(70, 'spark-pair-test'));
    const j1 = await sys.waitJob(rid, 'spark-1');
    const j2 = await sys.waitJob(rid, 'spark-2');
    await sys.waitReservation(rid, ['running']);

    const agent = sys.agents['spark-1']!;
    const darkAt = Date.now();
    process.kill(agent.proc.pid!, 'SIGSTOP');

    const failed = await sys.waitReservation(rid, ['releasing', 'failed'], 60_000);
    const tookMs = Date.now() - darkAt;
    console.log(`[failures-pair-lost] pair failed ${tookMs} ms after the node went dark`);
    expect(failed.outcome).toBe('pair_node_lost');
    expect(failed.reason).toBe('spark-1 lost contact during a pair run — pair failed as a unit');
    const check = await sys.waitCheck(rid, 'Spark 1 lost contact during a pair run — pair failed as a unit');
    expect(check.conclusion).toBe('failure');
    expect((await sys.host('spark-1')).phase).toBe('release-required');

    // the healthy node's agent stops the runner it started; its evidence stays on the lease
    await sys.waitHostPhase('spark-2', ['idle']);
    const healthy = (await sys.leases(rid)).find((l) => l.hostId === 'spark-2')!;
    expect(healthy.status).toBe('released');
    expect(healthy.evidenceJson).not.toBeNull();
    expect(isLive(j2.pid)).toBe(false);
    // the dark node's runner is still there: nothing is assumed gone, nothing granted there
    expect(isLive(j1.pid)).toBe(true);
    expect((await sys.reservation(rid)).status).toBe('releasing');

    // the agent comes back: asked to clean, it stops what it started and confirms
    process.kill(agent.proc.pid!, 'SIGCONT');
    const ended = await sys.waitReservation(rid, ['failed', 'done'], 60_000);
    expect(ended).toMatchObject({ status: 'failed', outcome: 'pair_node_lost' });
    expect(isLive(j1.pid)).toBe(false);
    await sys.waitHostPhase('spark-1', ['service'], 60_000);
    const history = await sys.history(rid);
    expect(history.map((e) => e.type)).toContain('alert.pair_node_lost');
  });
});
