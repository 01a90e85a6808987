import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it, type TestContext } from 'vitest';
import { recoverReservation, terminateReservation } from '../../functions/ledger/reservations.ts';
import { collectLedgerMetrics } from '../../functions/metrics/collect.ts';
import { formatPrometheus } from '../../functions/metrics/prom-text.ts';
import { type Fleet, type FleetOptions, startFleet } from '../../scripts/sim/doubles/fleet.ts';
import { isLive, readRunnerMarkers, waitFor } from '../../scripts/sim/doubles/index.ts';

/**
 * A job's trap cannot hold a host (ADR 0156). Real agents, real runner users, the real sandbox
 * helper: a `chmod 000` tree is made writable and removed; a tree that cannot be removed (an
 * immutable file, which only root can set — the test plays the part of whatever made it
 * unremovable) ends in quarantine with the reason after bounded retries, logged once per change,
 * not per retry; an operator's recover and emergency terminate act on a host stuck cleaning or
 * say why not.
 */

async function fleetFor(ctx: TestContext, opts: FleetOptions): Promise<Fleet> {
  const f = await startFleet(opts);
  ctx.onTestFinished(() => f.close());
  return f;
}

/** The agent's timeouts, with a short cleanup budget so the test sees the quarantine. */
const timeouts = (cleanupS: number) => ({
  timeouts: { requestS: 5, gpuQueryS: 5, backoffMaxS: 1, longPollS: 5, cleanupS },
});

/** A job that leaves `stuck/f` in its work dir and waits until the test made it immutable. */
const stuckJob = (markers: string) => `
  mkdir -p "$SPARK_WORK_DIR/stuck" && touch "$SPARK_WORK_DIR/stuck/f"
  echo "$SPARK_WORK_DIR" > ${markers}/stuck-workdir
  while [ ! -e ${markers}/go ]; do sleep 0.05; done`;

/** Makes the job's `stuck/f` immutable (root only), lets the job go on, and undoes it at the end. */
async function makeStuck(ctx: TestContext, f: Fleet): Promise<string> {
  const file = join(f.markerDir, 'stuck-workdir');
  const workDir = await waitFor('the job to make its tree', () =>
    existsSync(file) ? readFileSync(file, 'utf8').trim() : null,
  );
  const target = join(workDir, 'stuck', 'f');
  execFileSync('chattr', ['+i', target]);
  ctx.onTestFinished(() => {
    try {
      execFileSync('chattr', ['-i', target], { stdio: 'ignore' });
    } catch {
      // removed meanwhile
    }
  });
  execFileSync('touch', [join(f.markerDir, 'go')]);
  return target;
}

const lines = (out: string, msg: string) => out.split('\n').filter((l) => l.includes(`"msg":"${msg}`)).length;

describe.concurrent('a trap cannot hold a host (ADR 0156)', () => {
  it('a chmod 000 tree is made writable and removed: the host is freed and the next PR runs', async (ctx) => {
    const fleet = await fleetFor(ctx, {
      hosts: [{ id: 'spark-2' }],
      githubOutcome: () => 'passed',
      runner: (rid) => ({
        exitCode: 0,
        sleepMs: 100,
        ...(rid === 'r-1'
          ? {
              shell:
                'mkdir -p "$SPARK_WORK_DIR/trap/x" && touch "$SPARK_WORK_DIR/trap/x/f" && chmod 000 "$SPARK_WORK_DIR/trap" && echo trapped',
            }
          : {}),
      }),
    });
    const f = fleet;
    if (!f.runnerUsers['spark-2'])
      throw new Error('run the agent tests as root (CI does): they need a runner user');
    const agent = f.startAgent('spark-2');
    const first = await f.reserve();
    await expect(f.waitReservation(first, ['done', 'failed'], 60_000)).resolves.toMatchObject({
      status: 'done',
    });
    const m1 = readRunnerMarkers(f.markerDir).find((m) => m.reservationId === first)!;
    expect(m1.shell!.output).toContain('trapped');
    expect(existsSync(m1.workDir)).toBe(false);
    await f.waitHostPhase('spark-2', ['idle']);
    const second = await f.reserve({ pr: 8 });
    await expect(f.waitReservation(second, ['done', 'failed'], 60_000)).resolves.toMatchObject({
      status: 'done',
    });
    expect(lines(agent.output(), 'step failed')).toBe(0);
    expect(lines(agent.output(), 'cleanup failed')).toBe(0);
  });

  it('an unremovable tree quarantines the host with the reason after bounded retries, logged once; an operator clears it', async (ctx) => {
    let markers = '';
    const fleet = await fleetFor(ctx, {
      hosts: [{ id: 'spark-2' }],
      githubOutcome: () => 'passed',
      agentConfig: () => timeouts(4),
      runner: (rid) => ({
        exitCode: 0,
        sleepMs: 100,
        ...(rid === 'r-1' ? { shell: stuckJob(markers) } : {}),
      }),
    });
    const f = fleet;
    markers = f.markerDir;
    if (!f.runnerUsers['spark-2'])
      throw new Error('run the agent tests as root (CI does): they need a runner user');
    const agent = f.startAgent('spark-2');
    const first = await f.reserve();
    const stuck = await makeStuck(ctx, f);
    await f.waitHostPhase('spark-2', ['quarantined'], 60_000);
    // the work itself ended with its result: the trap did not hold the reservation either
    await expect(f.waitReservation(first, ['done', 'failed'])).resolves.toMatchObject({
      status: 'done',
      outcome: 'passed',
    });
    const [lease] = await f.leases(first);
    expect(lease!.status).toBe('released');
    const host = await f.host('spark-2');
    expect(host.note).toMatch(/^cleanup failed: the work area cannot be removed: .*Operation not permitted/);
    expect(host.note).toContain(stuck);
    const alerts = (await f.controller.ledger.history('host', 'spark-2')).filter(
      (e) => e.type === 'alert.cleanup_failed',
    );
    expect(alerts).toHaveLength(1);
    expect(alerts[0]!.cause).toContain(`its agent could not clean up after ${lease!.id}`);
    // what /metrics serves (the fleet's controller runs only the agent API)
    const metrics = formatPrometheus(
      await collectLedgerMetrics(f.controller.ledger, f.controller.ctx.services.views),
    );
    expect(metrics).toContain('spark_ledger_events_total{type="alert.cleanup_failed"} 1');
    expect(metrics).toContain('spark_host_state{host="spark-2",state="quarantined"} 1');
    // once when it started failing, once when it gave up: never a line per retry
    // (the agent logs giving up once the controller took the report)
    await waitFor(
      'the agent to log the quarantine',
      () => lines(agent.output(), 'cleanup failed for too long') > 0,
    );
    const out = agent.output();
    expect(lines(out, 'cleanup failed; retrying')).toBe(1);
    expect(lines(out, 'cleanup failed for too long')).toBe(1);
    expect(lines(out, 'step failed')).toBe(0);

    // the next PR waits: nothing is granted on a quarantined host
    const second = await f.reserve({ pr: 8 });
    await f.waitReservation(second, ['queued']);
    // the operator fixes the host and clears the quarantine; the leftover goes before the next lease
    execFileSync('chattr', ['-i', stuck]);
    await f.controller.ledger.clearQuarantine('spark-2', 'test');
    await expect(f.waitReservation(second, ['done', 'failed'], 60_000)).resolves.toMatchObject({
      status: 'done',
    });
    expect(existsSync(join(stuck, '..', '..'))).toBe(false);
  });

  it('recover says why a host stuck cleaning cannot be recovered; emergency terminate ends the work and quarantines the host', async (ctx) => {
    let markers = '';
    const fleet = await fleetFor(ctx, {
      hosts: [{ id: 'spark-2' }],
      githubOutcome: () => 'passed',
      agentConfig: () => timeouts(3600),
      runner: (rid) => ({
        exitCode: 0,
        sleepMs: 100,
        ...(rid === 'r-1' ? { shell: stuckJob(markers) } : {}),
      }),
    });
    const f = fleet;
    markers = f.markerDir;
    if (!f.runnerUsers['spark-2'])
      throw new Error('run the agent tests as root (CI does): they need a runner user');
    const agent = f.startAgent('spark-2');
    const id = await f.reserve();
    const stuck = await makeStuck(ctx, f);
    await waitFor(
      'the cleanup to fail',
      () => lines(agent.output(), 'cleanup failed; retrying') === 1,
      60_000,
    );
    expect((await f.host('spark-2')).phase).toBe('cleaning');
    expect((await f.reservation(id)).status).toBe('releasing');
    const ledger = f.controller.ledger;

    // recover: an error that says why, and nothing changes
    const before = (await ledger.history('reservation', id)).length;
    const refused = await recoverReservation(ledger, id, 'api:ops').catch(
      (e: Error & { code?: string }) => e,
    );
    expect(refused).toBeInstanceOf(Error);
    expect((refused as { code?: string }).code).toBe('awaiting_agent');
    expect((refused as Error).message).toMatch(/spark-2 is cleaning: its agent is cleaning up/);
    expect((refused as Error).message).toMatch(/sparkctl emergency terminate/);
    expect((await ledger.history('reservation', id)).length).toBe(before);
    expect((await f.reservation(id)).status).toBe('releasing');

    // emergency terminate: the work ends now, the host is quarantined, the agent still removes
    // what it can of what it started
    await terminateReservation(ledger, id, 'cleanup stuck on an immutable file', 'api:oncall');
    await expect(f.reservation(id)).resolves.toMatchObject({ status: 'done', outcome: 'passed' });
    expect((await f.leases(id))[0]!.status).toBe('released');
    const host = await f.host('spark-2');
    expect(host.phase).toBe('quarantined');
    expect(host.note).toMatch(/emergency terminate by api:oncall: cleanup stuck on an immutable file/);
    const types = (await ledger.history('reservation', id)).map((e) => e.type);
    expect(types).toContain('alert.emergency_terminate');
    await waitFor(
      'the agent to let go of the ended lease',
      () => agent.output().includes('cannot be removed now; it is retried before the next lease'),
      30_000,
    );
    const m = readRunnerMarkers(f.markerDir).find((x) => x.reservationId === id)!;
    expect(isLive(m.pid)).toBe(false);
    expect(existsSync(stuck)).toBe(true);
    expect(lines(agent.output(), 'step failed')).toBe(0);
  });
});
