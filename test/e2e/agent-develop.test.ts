import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  type DstackStandIn,
  MULTI_ARCH_IMAGE,
  startDstackStandIn,
} from '../../scripts/sim/doubles/dstack/server.ts';
import { type Fleet, startFleet } from '../../scripts/sim/doubles/fleet.ts';
import { isLive, REPO_ROOT, readRunnerMarkers, waitFor } from '../../scripts/sim/doubles/index.ts';

/**
 * Development leases with a real agent process (ADR 0176). A development lease is used through the
 * dstack dev environment made for it: on a host whose agent runs JIT runners none is ever granted;
 * on a dstack host it is reported active once its environment runs, and at expiry with GPU
 * processes nothing is killed until they end — then the agent stops the environment it started.
 */

let fleet: Fleet | null = null;
let dstack: DstackStandIn | null = null;
let tokenDir: string | null = null;
afterEach(async () => {
  await fleet?.close();
  fleet = null;
  if (dstack) {
    const active = dstack.active().map((r) => r.name);
    const invalid = dstack.invalid;
    await dstack.close();
    expect(invalid).toEqual([]);
    expect(active).toEqual([]);
  }
  dstack = null;
  if (tokenDir) rmSync(tokenDir, { recursive: true, force: true });
  tokenDir = null;
});

const devLease = (f: Fleet, over: Record<string, unknown> = {}) =>
  f.reserve({
    kind: 'development',
    targetHost: 'spark-2',
    ttlS: 6,
    requester: 'dev',
    repo: null,
    pr: null,
    headSha: null,
    suite: null,
    ...over,
  });

describe('relay agent: development leases', () => {
  it('a host whose agent runs JIT runners is never granted one: the request waits, saying why', async () => {
    fleet = await startFleet({ hosts: [{ id: 'spark-2' }] });
    fleet.startAgent('spark-2');
    await waitFor('spark-2 heartbeat', async () => (await fleet!.host('spark-2')).lastHeartbeatAt != null);
    expect(JSON.parse((await fleet.host('spark-2')).factsJson!).executor).toBe('jit-runner');
    const named = await devLease(fleet);
    const any = await devLease(fleet, { targetHost: null });
    await fleet.controller.loop.runNow();
    expect(await fleet.reservation(named)).toMatchObject({
      status: 'queued',
      waitCode: 'target-unavailable',
      reason: 'spark-2 runs jit-runner: a development lease needs the dstack executor',
    });
    expect(await fleet.reservation(any)).toMatchObject({
      status: 'queued',
      waitCode: 'pool-too-small',
      reason: 'needs 1 host in pool spark running the dstack executor (development); 0 schedulable now',
    });
    // CI still runs there
    const ci = await fleet.reserve({ pr: 3 });
    expect((await fleet.waitReservation(ci, ['done', 'failed'])).status).toBe('done');
    expect((await fleet.reservation(named)).status).toBe('queued');
    expect(await fleet.leases(named)).toEqual([]);
  });

  it('on a dstack host: active with its environment; at expiry with GPU processes nothing is killed until they end, then the environment is stopped', async () => {
    dstack = await startDstackStandIn();
    tokenDir = mkdtempSync(join(tmpdir(), 'spark-dev-token-'));
    const tokenFile = join(tokenDir, 'token');
    writeFileSync(tokenFile, `${dstack.token}\n`, { mode: 0o600 });
    const d = dstack;
    fleet = await startFleet({
      hosts: [{ id: 'spark-2' }],
      // dstack runs the job as its own runner on the fleet instance, not as the agent's runner user
      runnerUsers: false,
      agentConfig: (h) => ({
        executor: 'dstack',
        dstack: {
          url: d.url,
          project: d.project,
          tokenFile,
          fleet: h,
          image: MULTI_ARCH_IMAGE,
          requestTimeoutS: 1,
        },
      }),
    });
    // the agent's own dirs and the runner's install are the host's, not the job container's
    d.hostOnly.push(...['work', 'state', 'models'].map((x) => join(fleet!.dir, 'spark-2', x)), REPO_ROOT);
    fleet.startAgent('spark-2');
    await waitFor('spark-2 heartbeat', async () => (await fleet!.host('spark-2')).lastHeartbeatAt != null);
    const id = await devLease(fleet);
    await fleet.waitReservation(id, ['running'], 60_000);
    const run = [...d.runs.values()].find((r) => r.name.startsWith(`spark-${id}-`))!;
    expect(run.spec.configuration).toMatchObject({ type: 'dev-environment', fleets: ['spark-2'] });
    expect(JSON.parse((await fleet.leases(id))[0]!.evidenceJson!).develop.attach).toBe(
      `dstack attach ${run.name}`,
    );
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
      const at = Date.now();
      await waitFor(
        'two more heartbeats',
        async () => (await fleet!.host('spark-2')).lastHeartbeatAt! > at + 1500,
      );
      expect(isLive(job.pid!)).toBe(true);
      expect(run.status).toBe('running');
      expect((await fleet.reservation(id)).status).toBe('running');
    } finally {
      job.kill('SIGKILL');
    }
    // the process ended on its own (the developer stopped it): the agent stops the environment it
    // started, waits for dstack to say terminated, and confirms cleanup
    const r = await fleet.waitReservation(id, ['done', 'failed'], 60_000);
    expect(r).toMatchObject({ status: 'done', outcome: 'released' });
    expect(run.history.slice(-2)).toEqual(['terminating', 'terminated']);
    expect(readRunnerMarkers(fleet.markerDir)).toEqual([]);
    // the queued CI work now gets the host
    await fleet.waitReservation(next, ['allocated', 'preparing', 'running', 'releasing', 'done'], 60_000);
  });
});
