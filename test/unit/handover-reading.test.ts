import { describe, expect, it } from 'vitest';
import {
  type HandoverTimes,
  type LoggedRequest,
  readHandover,
  unionMs,
} from '../../scripts/bench/handover-path.ts';
import { githubLatency } from '../../scripts/sim/fake-github/latency.ts';

/**
 * The agent bench's reading of a handover (scripts/bench/handover-path.ts, ADR 0182) and the fake
 * GitHub's latency model (scripts/sim/fake-github/latency.ts, ADR 0181): what the controller's share of a
 * handover is depends on both, so both are checked on hand-made cases.
 */

const RID = 'r-7';
const RUNNER = `spark-spark-2-${RID}-a0`;

function call(
  method: string,
  path: string,
  at: number,
  latencyMs: number,
  body: unknown = null,
  fakeMs = 1,
): LoggedRequest {
  return { method, path, body, status: 200, at, latencyMs, answeredAt: at + latencyMs + fakeMs };
}

/** The dispatch sender's three calls and the registration, GitHub answering each in 200 ms. */
function chain(start: number, pr = 107): LoggedRequest[] {
  return [
    call('GET', `/repos/acme/butter/pulls/${pr}`, start, 200),
    call('GET', '/repos/acme/butter/contents/.github/workflows/spark-pr-test.yml?ref=main', start + 210, 200),
    call('POST', '/repos/acme/butter/actions/workflows/spark-pr-test.yml/dispatches', start + 420, 200, {
      ref: 'main',
      inputs: { reservation_id: RID },
    }),
    call('POST', '/orgs/acme/actions/runners/generate-jitconfig', start + 640, 200, { name: RUNNER }),
  ];
}

const times = (over: Partial<HandoverTimes> = {}): HandoverTimes => ({
  reservationId: RID,
  pr: 107,
  runnerName: RUNNER,
  freed: 1000,
  granted: 1010,
  prepared: 1100,
  registered: 1860,
  handoff: 1870,
  started: 1900,
  ...over,
});

describe('the bench reading of a handover', () => {
  it('counts overlapping intervals once', () => {
    expect(unionMs([])).toBe(0);
    expect(
      unionMs([
        [0, 100],
        [50, 150],
        [200, 250],
      ]),
    ).toBe(200);
    expect(
      unionMs([
        [10, 20],
        [0, 100],
      ]),
    ).toBe(100);
  });

  it('subtracts GitHub calls on the critical path, and only those of this handover', () => {
    const log = [
      // another reservation's work and the check-run lane, at the same time
      call('PATCH', '/repos/acme/butter/check-runs/55', 1015, 200),
      call('GET', '/repos/acme/butter/pulls/999', 1020, 200),
      call('POST', '/orgs/acme/actions/runners/generate-jitconfig', 1030, 200, {
        name: 'spark-spark-2-r-8-a0',
      }),
      ...chain(1020),
    ];
    const r = readHandover(times(), log);
    expect(r.githubOnPath).toBe(true);
    expect(r.calls.map((c) => `${c.method} ${c.path.split('?')[0]!.split('/').at(-1)}`)).toEqual([
      'GET 107',
      'GET spark-pr-test.yml',
      'POST dispatches',
      'POST generate-jitconfig',
    ]);
    expect(r.totalMs).toBe(900);
    expect(r.githubMs).toBe(800);
    expect(r.controllerMs).toBe(100);
    // the agent's part is its start of the runner; the controller process has the rest
    expect(r.agentMs).toBe(r.agentStartMs);
    expect(r.controllerProcessMs).toBe(r.controllerMs - r.agentStartMs);
    expect(r.stages).toMatchObject({ grant: 10, outboxWake: 10, githubCalls: 800, fakeGitHubChecks: 4 });
    // the stages of the longer branch add up to the total
    const sum = Object.entries(r.stages)
      .filter(([k]) => k !== 'dispatchToRegistration')
      .reduce((s, [, v]) => s + v, 0);
    expect(sum).toBe(r.totalMs);
  });

  it('counts no GitHub time when the host preparation was the longer branch', () => {
    const r = readHandover(
      times({ prepared: 1880, registered: 1860, handoff: 1885, started: 1950 }),
      chain(1020),
    );
    expect(r.githubOnPath).toBe(false);
    expect(r.githubMs).toBe(0);
    expect(r.controllerMs).toBe(r.totalMs);
    expect(r.stages).toMatchObject({ prepare: 870, pollToHandoff: 5 });
    // the preparation is the agent's: the controller process keeps the grant and the hand-over
    expect(r.agentMs).toBe(870 + 65);
    expect(r.controllerProcessMs).toBe(r.stages.grant! + r.stages.pollToHandoff!);
  });

  it('refuses a handover whose dispatch or registration GitHub never saw', () => {
    expect(() => readHandover(times(), chain(1020).slice(0, 3))).toThrow(/no dispatch or JIT registration/);
  });
});

describe("the fake GitHub's latency model", () => {
  it('draws around the median, reproducibly, and answers at once when off', () => {
    const draw = () => {
      const m = githubLatency({ restMedianMs: 200, restSigma: 0.6, seed: 7 });
      return Array.from({ length: 2001 }, () => m.restMs('get', '/repos/{owner}/{repo}'));
    };
    const xs = draw();
    expect(draw()).toEqual(xs);
    const sorted = [...xs].sort((a, b) => a - b);
    expect(sorted[1000]).toBeGreaterThan(180);
    expect(sorted[1000]).toBeLessThan(220);
    // log-normal spread: the 90th percentile is above twice the median for σ 0.6 (e^(1.28·0.6) ≈ 2.2)
    expect(sorted[1800]! / sorted[1000]!).toBeGreaterThan(1.9);
    expect(githubLatency({ restMedianMs: 150, restSigma: 0 }).restMs('post', '/x')).toBe(150);
    expect(githubLatency({ restMedianMs: 0 }).restMs('post', '/x')).toBe(0);
    expect(githubLatency({ webhookDelayMs: 5000 }).webhookDelayMs('workflow_job')).toBe(5000);
  });

  it('refuses a negative or non-numeric value', () => {
    expect(() => githubLatency({ restMedianMs: -1 })).toThrow(TypeError);
    expect(() => githubLatency({ webhookDelayMs: Number.NaN })).toThrow(TypeError);
  });
});
