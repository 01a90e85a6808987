import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { type Fleet, startFleet } from '../doubles/fleet.ts';
import { isLive, readRunnerMarkers, waitFor } from '../doubles/index.ts';

/** Development leases with a real agent process: no runner, reported active, never killed. */

let fleet: Fleet | null = null;
afterEach(async () => {
  await fleet?.close();
  fleet = null;
});

describe('relay agent: development leases', () => {
  it('reports the lease active, and at expiry with GPU processes leaves them alone until they end', async () => {
    fleet = await startFleet({ hosts: [{ id: 'spark-2' }] });
    fleet.startAgent('spark-2');
    await waitFor('spark-2 heartbeat', async () => (await fleet!.host('spark-2')).lastHeartbeatAt != null);
    const id = await fleet.reserve({
      kind: 'development',
      targetHost: 'spark-2',
      ttlS: 6,
      requester: 'dev',
      repo: null,
      pr: null,
      headSha: null,
      suite: null,
    });
    await fleet.waitReservation(id, ['running']);
    expect(await fleet.eventTypes(id)).toEqual([
      'reservation.queued',
      'reservation.allocated',
      'reservation.preparing',
      'reservation.running',
    ]);
    // the developer starts a GPU job that outlives the lease (well before expiry, so the
    // heartbeats have reported it when the lease runs out)
    const job = spawn('sleep', ['120'], { stdio: 'ignore' });
    writeFileSync(join(fleet.gpu['spark-2']!.dir, `live-${job.pid}`), `${job.pid}, /usr/bin/python3, 2048\n`);
    let next = '';
    try {
      await fleet.waitHostPhase('spark-2', ['release-required'], 20_000);
      await waitFor('the lease to expire', async () => (await fleet!.leases(id))[0]!.status === 'expired');
      // nothing is admitted on the host meanwhile, and nothing is killed
      next = await fleet.reserve({ pr: 3 });
      await fleet.controller.loop.runNow();
      expect((await fleet.reservation(next)).status).toBe('queued');
      // give the agent time to act on the hold (two more heartbeats), then check it killed nothing
      const at = Date.now();
      await waitFor(
        'two more heartbeats',
        async () => (await fleet!.host('spark-2')).lastHeartbeatAt! > at + 1500,
      );
      expect(isLive(job.pid!)).toBe(true);
      expect((await fleet.reservation(id)).status).toBe('running');
    } finally {
      job.kill('SIGKILL');
    }
    // the process ended on its own (here: the developer stopped it): the agent confirms cleanup
    const r = await fleet.waitReservation(id, ['done', 'failed']);
    expect(r).toMatchObject({ status: 'done', outcome: 'released' });
    expect(readRunnerMarkers(fleet.markerDir)).toEqual([]);
    // the queued CI work now gets the host
    await fleet.waitReservation(next, ['allocated', 'preparing', 'running', 'releasing', 'done']);
  });
});
