import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Agent } from '../../agent/agent.ts';
import { parseAgentConfig } from '../../agent/config.ts';
import { createJitRunnerExecutor } from '../../agent/executor/jit-runner.ts';
import { childPath, PathOutsideRoot } from '../../agent/executor/work-dir.ts';
import type { AgentLogger } from '../../agent/log.ts';
import { clampDelayMs, clampHeartbeatS, MAX_TIMER_MS } from '../../agent/loops/backoff.ts';
import type { LeaseState } from '../../agent/state-file.ts';
import { DesiredStateSchema, PollResponseSchema } from '../../core/protocol/agent.ts';
import { waitFor } from '../../scripts/sim/doubles/index.ts';
import { tempDir } from '../../scripts/sim/ledger.ts';

/**
 * The agent trusts nothing the controller says: a hostile or tampered answer
 * (from a controller, or anyone on the path of an http:// URL) is refused by the protocol schema,
 * and even a path that got past it is refused before anything is removed.
 */

const lease = {
  leaseId: 'l-spark-2-7',
  reservationId: 'r-12',
  fencingToken: 7,
  kind: 'manual',
  topology: 'single',
  lend: false,
  expiresInMs: 60_000,
};
const run = (over: Record<string, unknown> = {}) => ({
  state: 'run',
  lease,
  runnerName: 'spark-spark-2-r-12-a0',
  ...over,
});

describe('protocol schema: ids, names and numbers from the controller', () => {
  it("accepts the controller's real shapes", () => {
    expect(
      DesiredStateSchema.safeParse(
        run({
          jitConfig: Buffer.from('{"runner":1}').toString('base64'),
          jobToken: `spk_job_${'A'.repeat(43)}`,
        }),
      ).success,
    ).toBe(true);
    // the fake GitHub's JIT config shape (scripts/sim/fake-github/server.ts)
    expect(DesiredStateSchema.safeParse(run({ jitConfig: 'JITCONFIG-SECRET-0123abcd' })).success).toBe(true);
    expect(
      PollResponseSchema.safeParse({
        hostId: 'spark-2',
        version: '0a1b2c3d4e5f6789',
        heartbeatIntervalS: 10,
        desired: run(),
      }).success,
    ).toBe(true);
  });

  it.each([
    ['a runner name that climbs out', run({ runnerName: '../../../victim' }), 'runnerName'],
    ['a runner name with a slash', run({ runnerName: 'a/b' }), 'runnerName'],
    ['a runner name of ..', run({ runnerName: '..' }), 'runnerName'],
    [
      'a reservation id with a path',
      run({ lease: { ...lease, reservationId: '../../etc' } }),
      'lease.reservationId',
    ],
    ['a lease id with a path', run({ lease: { ...lease, leaseId: 'l-../x' } }), 'lease.leaseId'],
    ['an unknown kind', run({ lease: { ...lease, kind: 'rm -rf' } }), 'lease.kind'],
    ['a JIT config with a newline', run({ jitConfig: 'abc\nexport X=1' }), 'jitConfig'],
    ['a job token of another shape', run({ jobToken: 'Bearer x' }), 'jobToken'],
    [
      'a restore wait of years',
      { state: 'restore', fencingToken: 1, attempt: 0, waitMs: 1e15, healthTimeoutS: 10 },
      'waitMs',
    ],
  ])('refuses %s', (_what, desired, path) => {
    const r = DesiredStateSchema.safeParse(desired);
    expect(r.success).toBe(false);
    expect(r.error!.issues.map((i) => i.path.join('.'))).toContain(path);
  });

  it('refuses a heartbeat period of 1e10 s, and the agent clamps what it uses anyway', () => {
    expect(
      PollResponseSchema.safeParse({
        hostId: 'spark-2',
        version: 'v1',
        heartbeatIntervalS: 1e10,
        desired: { state: 'idle' },
      }).success,
    ).toBe(false);
    // a Node timer longer than 2^31-1 ms fires at once: that made 199 heartbeats in 5 s
    expect(clampHeartbeatS(1e10)).toBe(600);
    expect(clampHeartbeatS(0)).toBe(1);
    expect(clampDelayMs(1e13)).toBe(MAX_TIMER_MS);
    expect(clampDelayMs(-5)).toBe(0);
  });
});

describe('paths stay under the work root whatever the input', () => {
  it('childPath takes one plain segment only', () => {
    expect(childPath('/srv/work', 'r-1-spark-2-t3')).toBe('/srv/work/r-1-spark-2-t3');
    for (const bad of ['../../../victim', '..', '.', '', 'a/b', 'a\\b', 'x\0y']) {
      expect(() => childPath('/srv/work', bad)).toThrow(PathOutsideRoot);
    }
  });

  it('the executor refuses to start a runner named ../../../victim or remove a work dir outside the root', async () => {
    const { dir, cleanup } = tempDir();
    try {
      const victim = join(dir, 'victim');
      mkdirSync(victim);
      writeFileSync(join(victim, 'keep.txt'), 'precious');
      const cfg = parseAgentConfig(
        {
          controllerUrl: 'http://127.0.0.1:9',
          hostId: 'spark-2',
          tokenFile: 'agent.token',
          stateFile: 'state/a/b/agent-state.json',
          workRoot: 'work',
          modelCacheDir: 'models',
          runner: { dir: '.', command: ['/bin/true'], user: null },
        },
        'test',
        dir,
      );
      const ex = createJitRunnerExecutor({
        cfg,
        log: quiet(),
        account: null,
        save: () => {},
        onExit: () => {},
      });
      const l: LeaseState = {
        ...lease,
        topology: 'single',
        workDir: join(cfg.workRoot, 'r-12-spark-2-t7'),
        lendStep: 'none',
        phase: 'prepared',
        failure: null,
        runner: null,
        activeReported: false,
        remainReported: false,
      };
      await expect(ex.start(l, { name: '../../../victim', jitConfig: 'x', jobToken: null })).rejects.toThrow(
        PathOutsideRoot,
      );
      // a tampered state file pointing the work dir elsewhere removes nothing either
      await expect(ex.discard({ ...l, workDir: victim })).rejects.toThrow(PathOutsideRoot);
      await expect(ex.discard({ ...l, workDir: join(cfg.workRoot, '..', 'victim') })).rejects.toThrow(
        PathOutsideRoot,
      );
      expect(readdirSync(victim)).toEqual(['keep.txt']);
    } finally {
      cleanup();
    }
  });
});

function quiet(lines: string[] = []): AgentLogger {
  const push = (msg: string, fields?: Record<string, unknown>) => {
    lines.push(`${msg} ${JSON.stringify(fields ?? {})}`);
  };
  return { debug: push, info: push, warn: push, error: push };
}

let server: Server | null = null;
afterEach(async () => {
  await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  server = null;
});

describe('an agent polling a hostile controller', () => {
  it('acts on none of it: no path outside the work root is touched, no runner starts, no heartbeat storm', async () => {
    const { dir, cleanup } = tempDir();
    const seen = { poll: 0, heartbeat: 0, report: 0 };
    server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        const path = req.url ?? '';
        res.setHeader('content-type', 'application/json');
        if (path.endsWith('/heartbeat')) {
          seen.heartbeat++;
          res.end(JSON.stringify({ ok: true, heartbeatIntervalS: 1e10 }));
        } else if (path.endsWith('/poll')) {
          seen.poll++;
          res.end(
            JSON.stringify({
              hostId: 'spark-2',
              version: `v${seen.poll}`,
              heartbeatIntervalS: 1,
              desired: run({ runnerName: '../../../victim', jitConfig: 'eyJ4IjoxfQ==' }),
            }),
          );
        } else {
          seen.report++;
          res.end(JSON.stringify({ ok: true, result: 'noted' }));
        }
      });
    });
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', () => r()));
    const port = (server.address() as { port: number }).port;
    try {
      const victim = join(dir, 'victim');
      mkdirSync(victim);
      writeFileSync(join(victim, 'keep.txt'), 'precious');
      const cfg = parseAgentConfig(
        {
          controllerUrl: `http://127.0.0.1:${port}`,
          hostId: 'spark-2',
          tokenFile: 'agent.token',
          stateFile: 'host/state/agent-state.json',
          workRoot: 'host/work',
          modelCacheDir: 'models',
          runner: { dir: '.', command: ['/bin/sh', '-c', 'touch "$SPARK_WORK_DIR/ran"'], user: null },
          timeouts: { requestS: 2, gpuQueryS: 2, backoffMaxS: 1, longPollS: 1 },
        },
        'test',
        dir,
      );
      const lines: string[] = [];
      const agent = new Agent(cfg, 'spk_agent_test', quiet(lines));
      const running = agent.run();
      await waitFor('three refused polls', () => seen.poll >= 3, 20_000);
      agent.stop();
      await running;
      expect(lines.join('\n')).toContain('malformed poll response: desired.runnerName');
      expect(lines.join('\n')).toContain('malformed heartbeat response');
      expect(readdirSync(victim)).toEqual(['keep.txt']);
      expect(existsSync(join(dir, 'host', 'state', 'runs'))).toBe(false);
      expect(readdirSync(join(dir, 'host', 'work'))).toEqual([]);
      expect(seen.report).toBe(0);
      // a refused period never becomes a timer that fires at once (was: 199 heartbeats in 5 s)
      expect(seen.heartbeat).toBeLessThanOrEqual(2);
    } finally {
      cleanup();
    }
  });
});
