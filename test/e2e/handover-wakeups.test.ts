import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, type TestContext } from 'vitest';
import type { PollResponse } from '../../core/protocol/agent.ts';
import {
  type Fleet,
  type FleetOptions,
  NO_LIVENESS_TIMINGS,
  startFleet,
} from '../../scripts/sim/doubles/fleet.ts';
import { readRunnerMarkers, waitFor } from '../../scripts/sim/doubles/index.ts';

/**
 * The handover through the real GitHub path wakes itself (docs/adr/0180-woken-not-polled-handover.md):
 * the controller's module tick and its safety-net admission pass are set to an hour, longer than
 * any of these tests may take, so each step a grant needs must be woken by the change before it —
 * the admission pass by the labelled PR's reservation, the outbox by the grant's commit, the
 * registration's send right after the dispatch (and, when GitHub fails it, by the retry's own
 * timer), the agent's held long poll by the grant and by the registration. Were any of them left to
 * a tick, the reservation would never run and the test would time out.
 */

const HOUR_MS = 3_600_000;

async function fleetFor(ctx: TestContext, opts: Partial<FleetOptions> = {}): Promise<Fleet> {
  const f = await startFleet({
    github: 'fake-github',
    hosts: [{ id: 'spark-2' }],
    timings: NO_LIVENESS_TIMINGS,
    tickMs: HOUR_MS,
    admissionIntervalMs: HOUR_MS,
    // long polls held longer than the steps take, so the answers below come from notices
    controllerEnv: { SPARK_AGENT_LONG_POLL_S: '30' },
    runner: () => ({ exitCode: 0, sleepMs: 200 }),
    ...opts,
  });
  ctx.onTestFinished(() => f.close());
  return f;
}

/** Polls as the host's agent does (its own token), holding on `since`; returns the first answer whose state differs. */
async function pollUntilChanged(f: Fleet, hostId: string, since: PollResponse): Promise<PollResponse> {
  const token = readFileSync(join(f.dir, hostId, 'agent.token'), 'utf8').trim();
  for (;;) {
    const res = await fetch(`${f.controller.url}/agent/v1/poll`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ since: since.version, maxWaitMs: 30_000 }),
    });
    expect(res.status).toBe(200);
    const answer = (await res.json()) as PollResponse;
    if (answer.version !== since.version) return answer;
  }
}

async function currentPoll(f: Fleet, hostId: string): Promise<PollResponse> {
  const token = readFileSync(join(f.dir, hostId, 'agent.token'), 'utf8').trim();
  const res = await fetch(`${f.controller.url}/agent/v1/poll`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ since: null }),
  });
  return (await res.json()) as PollResponse;
}

describe.concurrent('handover through the GitHub module, with the ticks an hour apart', () => {
  it('a labelled PR is granted, dispatched, registered and handed over; the held long poll answers the grant by notice', async (ctx) => {
    const fleet = await fleetFor(ctx);
    const agent = fleet.startAgent('spark-2');
    await waitFor('spark-2 heartbeat', async () => (await fleet.host('spark-2')).lastHeartbeatAt != null);
    const idle = await currentPoll(fleet, 'spark-2');
    expect(idle.desired.state).toBe('idle');
    // a long poll held on the idle state before the work exists
    const held = pollUntilChanged(fleet, 'spark-2', idle);

    const id = await fleet.reserve({ pr: 41 });
    const granted = await held;
    // woken by the grant's change notice, not found by a timed re-read
    expect(granted.answered).toBe('notice');
    expect(granted.desired.state).toBe('prepare');
    expect(granted.desired.state === 'prepare' && granted.desired.lease.reservationId).toBe(id);

    const done = await fleet.waitReservation(id, ['done', 'failed'], 60_000);
    expect(done.status, agent.output()).toBe('done');
    const gh = fleet.github!.sim.gh;
    // through GitHub: one dispatch of the workflow for this reservation, one JIT registration
    expect(gh.dispatches.filter((d) => d.inputs.reservation_id === id)).toHaveLength(1);
    const registrations = gh.calls('POST', /\/actions\/runners\/generate-jitconfig$/);
    expect(registrations.map((r) => (r.body as { name: string }).name)).toEqual([`spark-spark-2-${id}-a0`]);
    // the runner started with the config GitHub issued, and GitHub Actions gave it its job
    const [marker] = readRunnerMarkers(fleet.markerDir);
    expect(marker).toMatchObject({ reservationId: id, runnerName: `spark-spark-2-${id}-a0` });
    expect(fleet.github!.sim.jitConfigsSeen).toHaveLength(1);
    expect(fleet.github!.sim.jobs.map((j) => j.reservationId)).toEqual([id]);
    const [lease] = await fleet.leases(id);
    expect(lease!.runnerStartedAt).not.toBeNull();
    expect(await fleet.eventTypes(lease!.id)).toContain('lease.runner_handoff');
  });

  it('a JIT registration GitHub fails is retried when its backoff ends, not at the next tick', async (ctx) => {
    const fleet = await fleetFor(ctx);
    const gh = fleet.github!.sim.gh;
    gh.fail({ method: 'POST', path: /\/actions\/runners\/generate-jitconfig$/, status: 500 });
    const agent = fleet.startAgent('spark-2');
    await waitFor('spark-2 heartbeat', async () => (await fleet.host('spark-2')).lastHeartbeatAt != null);

    const id = await fleet.reserve({ pr: 42 });
    const done = await fleet.waitReservation(id, ['done', 'failed'], 60_000);
    expect(done.status, agent.output()).toBe('done');
    const tries = gh.calls('POST', /\/actions\/runners\/generate-jitconfig$/);
    expect(tries.map((r) => r.status)).toEqual([500, 201]);
    expect(readRunnerMarkers(fleet.markerDir).map((m) => m.reservationId)).toEqual([id]);
  });
});
