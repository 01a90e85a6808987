import { afterEach, describe, expect, it } from 'vitest';
import { type Fleet, startFleet } from '../doubles/fleet.ts';
import { readRunnerMarkers, waitFor } from '../doubles/index.ts';

let fleet: Fleet | null = null;
afterEach(async () => {
  await fleet?.close();
  fleet = null;
});

describe('relay agent: single-host work', () => {
  it('runs a single reservation on spark-2 end to end', async () => {
    fleet = await startFleet({ hosts: [{ id: 'spark-2' }], runner: () => ({ exitCode: 0, sleepMs: 400 }) });
    const agent = fleet.startAgent('spark-2');
    await waitFor('spark-2 heartbeat', async () => (await fleet!.host('spark-2')).lastHeartbeatAt != null);
    const id = await fleet.reserve();
    const done = await fleet.waitReservation(id, ['done', 'failed']);
    expect(done.status, agent.output()).toBe('failed'); // runner exit 0 without a GitHub result: see contract 6
    expect(done.outcome).toBe('runner exited 0');
    const [lease] = await fleet.leases(id);
    expect(lease!.status).toBe('released');
    expect(lease!.preparedAt).not.toBeNull();
    expect(lease!.runnerStartedAt).not.toBeNull();
    expect(lease!.exitCode).toBe(0);
    expect(lease!.jobTokenHash).toMatch(/^[0-9a-f]{64}$/);
    const ev = JSON.parse(lease!.evidenceJson!);
    expect(ev.runner.lastLines.at(-1)).toContain('completed with result: Succeeded');
    const markers = readRunnerMarkers(fleet.markerDir);
    expect(markers).toHaveLength(1);
    expect(markers[0]!.hostId).toBe('spark-2');
    expect(markers[0]!.fencingToken).toBe(lease!.fencingToken);
    expect(markers[0]!.jobTokenPrefix).toBe('spk_job_');
    expect((await fleet.host('spark-2')).phase).toBe('idle');
    expect(await fleet.bindingLeases()).toEqual([]);
  });
});
