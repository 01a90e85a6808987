import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { isLive, waitFor } from '../../scripts/sim/doubles/index.ts';
import {
  FAST_TICK_MS,
  type JobPlan,
  queuedId,
  type SparkSystem,
  SYSTEM_ADMISSION_INTERVAL_MS,
  startSystem,
} from '../../scripts/sim/harness/index.ts';
import {
  createVethNamespace,
  netnsUnavailable,
  type VethNamespace,
} from '../../scripts/sim/harness/netns.ts';

/**
 * end to end: one node of a running pair goes dark. The controller and one relay
 * agent per host run as separate processes; GitHub is simulated in this process.
 *
 * How the node goes dark, by preference:
 * - **netns** (root with iproute2, as in CI): the dark node's agent runs inside a network
 *   namespace (`ip netns exec`) joined by a veth pair on a private /30; it reaches the controller
 *   over HTTPS and the Actions broker through the veth's host-side address (scripts/sim/harness/netns.ts),
 *   and the link is taken down mid-run. The agent and its runner keep running, cut off, as on a
 *   host that dropped off the network. The dark node is spark-2 here: spark-1's fake Deckard
 *   answers its health check on the host namespace's loopback, which a namespaced agent cannot see.
 * - **SIGSTOP** (fallback, e.g. not root): spark-1's agent is frozen; its runner keeps running.
 * The test prints which ran and why; `SPARK_PAIR_LOST_MODE=sigstop` forces the fallback.
 */

const sha = (c: string) => c.repeat(40);
const plans = new Map<string, (hostId: string) => Partial<JobPlan>>();
const OFFLINE_AFTER_S = 3;
/** The admission pass period the harness gives the controller process (SPARK_ADMISSION_INTERVAL_MS). */
const PASS_MS = SYSTEM_ADMISSION_INTERVAL_MS;

/** `SPARK_PAIR_LOST_MODE=sigstop` forces the fallback (to check it still works where netns runs). */
const unavailable =
  process.env.SPARK_PAIR_LOST_MODE === 'sigstop' ? 'SPARK_PAIR_LOST_MODE=sigstop' : netnsUnavailable();
const MODE = unavailable ? 'SIGSTOP' : 'netns';
const DARK = MODE === 'netns' ? 'spark-2' : 'spark-1';
const HEALTHY = DARK === 'spark-1' ? 'spark-2' : 'spark-1';
/** Phase each host returns to once everything is cleaned up. */
const RESTING: Record<string, string> = { 'spark-1': 'service', 'spark-2': 'idle' };

let sys: SparkSystem | undefined;
let net: VethNamespace | null = null;
let netDir: string | null = null;

beforeAll(async () => {
  if (MODE === 'netns') {
    netDir = mkdtempSync(join(tmpdir(), 'spark-netns-'));
    net = createVethNamespace(netDir);
  }
  const ns = net;
  sys = await startSystem({
    timings: { offlineAfterS: OFFLINE_AFTER_S, ciLeaseTtlS: 120 },
    // the scenario reads check titles and a completed check's summary only (see FAST_TICK_MS)
    tickMs: FAST_TICK_MS,
    plan: (j) => plans.get(j.headSha)?.(j.hostId) ?? {},
    ...(ns ? { agentRoute: async (id, ep) => (id === DARK ? ns.route(ep) : null) } : {}),
  });
}, 90_000);

afterEach(async (ctx) => {
  if (ctx.task.result?.state === 'fail' && sys) console.error(await sys.diagnostics());
});

afterAll(async () => {
  // never leave a frozen agent or a cut link behind
  const a = sys?.agents[DARK];
  if (MODE === 'SIGSTOP' && a?.proc.pid) {
    try {
      process.kill(a.proc.pid, 'SIGCONT');
    } catch {}
  }
  try {
    if (sys) expect(sys.gh.violations).toEqual([]);
  } finally {
    await sys?.close();
    await net?.close();
    if (netDir) rmSync(netDir, { recursive: true, force: true });
  }
});

describe('failures: a pair node goes dark', { timeout: 180_000 }, () => {
  it('the pair fails as a unit, the healthy runner stops, the dark node is release-required until its agent confirms', async () => {
    const s = sys!;
    console.log(
      `[failures-pair-lost] mode: ${MODE} — ${
        MODE === 'netns'
          ? `${DARK}'s agent in namespace ${net!.name} (veth ${net!.hostAddress} ↔ ${net!.nsAddress}), link taken down`
          : `${DARK}'s agent frozen with SIGSTOP (network namespace unavailable: ${unavailable})`
      }`,
    );
    await s.waitHostPhase('spark-1', ['service']);
    await s.waitHostPhase('spark-2', ['idle']);
    plans.set(sha('7'), () => ({ gates: ['work'] }));
    s.openPr(70, { sha: sha('7') });
    const rid = queuedId(await s.label(70, 'spark-pair-test'));
    const darkJob = await s.waitJob(rid, DARK);
    const healthyJob = await s.waitJob(rid, HEALTHY);
    await s.waitReservation(rid, ['running']);

    const agent = s.agents[DARK]!;
    if (net) {
      net.cut();
      expect(net.linkUp()).toBe(false);
    } else process.kill(agent.proc.pid!, 'SIGSTOP');

    const failed = await s.waitReservation(rid, ['releasing', 'failed'], 60_000);
    expect(failed.outcome).toBe('pair_node_lost');
    const reason = `${DARK} lost contact during a pair run — pair failed as a unit`;
    expect(failed.reason).toBe(reason);
    const title = reason.replace(/^spark-(\d+)/, 'Spark $1');
    const check = await s.waitCheck(rid, title);
    expect(check.conclusion).toBe('failure');
    expect((await s.host(DARK)).phase).toBe('release-required');

    // within the offline threshold plus one admission pass of the node's last heartbeat (ledger
    // clock on both sides; the extra second is the pass's own work on a loaded machine)
    const lastHeartbeat = (await s.host(DARK)).lastHeartbeatAt!;
    const alert = (await s.reader.history(rid)).find((e) => e.type === 'alert.pair_node_lost')!;
    expect(alert).toBeDefined();
    const tookMs = alert.at - lastHeartbeat;
    console.log(
      `[failures-pair-lost] pair failed ${tookMs} ms after ${DARK}'s last heartbeat (offline threshold ${OFFLINE_AFTER_S * 1000} ms + pass ${PASS_MS} ms)`,
    );
    expect(tookMs).toBeGreaterThanOrEqual(OFFLINE_AFTER_S * 1000);
    expect(tookMs).toBeLessThanOrEqual(OFFLINE_AFTER_S * 1000 + PASS_MS + 1000);

    // the healthy node's agent stops the runner it started; its evidence stays on the lease
    await s.waitHostPhase(HEALTHY, [RESTING[HEALTHY]!]);
    const healthy = (await s.leases(rid)).find((l) => l.hostId === HEALTHY)!;
    expect(healthy.status).toBe('released');
    expect(healthy.evidenceJson).not.toBeNull();
    expect(JSON.parse(healthy.evidenceJson!).runner.lastLines).toContain('Received SIGTERM; job cancelled');
    expect(isLive(healthyJob.pid)).toBe(false);
    // the dark node's runner is still there: nothing is assumed gone, nothing granted there
    expect(isLive(darkJob.pid)).toBe(true);
    expect((await s.reservation(rid)).status).toBe('releasing');
    expect((await s.host(DARK)).phase).toBe('release-required');
    const darkLease = (await s.leases(rid)).find((l) => l.hostId === DARK)!;
    expect(darkLease.status).not.toBe('released');

    // the agent comes back: asked to clean, it stops what it started and confirms
    if (net) {
      net.restore();
      expect(net.linkUp()).toBe(true);
    } else process.kill(agent.proc.pid!, 'SIGCONT');
    const ended = await s.waitReservation(rid, ['failed', 'done'], 60_000);
    expect(ended).toMatchObject({ status: 'failed', outcome: 'pair_node_lost' });
    expect(isLive(darkJob.pid)).toBe(false);
    await s.waitHostPhase(DARK, [RESTING[DARK]!], 60_000);
    expect((await s.leases(rid)).every((l) => l.status === 'released')).toBe(true);
    // the final check (no longer "being cleaned") keeps the seed's words; the dark runner's late
    // job result does not replace them
    const final = await waitFor('the final check run', () => {
      const c = s.checkRun(rid);
      return c && !c.output.summary?.includes('Hosts are being cleaned and released') ? c : null;
    });
    expect(final.output.title).toBe(title);
    expect(final.conclusion).toBe('failure');
    const history = await s.history(rid);
    expect(history.map((e) => e.type)).toContain('alert.pair_node_lost');
  });
});
