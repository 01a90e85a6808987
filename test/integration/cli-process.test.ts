import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiToken } from '../../functions/auth/tokens.ts';
import { repoRoot } from '../../functions/node-server.ts';
import { idleFacts, makeTestLedger, servingFacts, tempDir } from '../../scripts/sim/ledger.ts';
import {
  agentReportsCleaned,
  agentReportsPrepared,
  cleanupBundle,
  heartbeat,
  reservationOf,
  runSparkctl,
  sparkctlBundle,
  spawnSparkctl,
  until,
} from './cli-harness.ts';

/**
 * The whole developer path against `npm start` as its own process: the first token in the ledger
 * file, adopt hosts, reserve and wait until attached, release and wait for cleanup.
 * The agents are stood in for by HTTP calls to the controller's agent API (heartbeat, poll,
 * report with the lease's fencing token), as the relay agent makes them.
 */

let work: { dir: string; cleanup: () => void };
let controller: ChildProcessWithoutNullStreams | null = null;
let bin = '';

beforeAll(async () => {
  work = tempDir('sparkctl-process-');
  bin = await sparkctlBundle();
});
afterAll(async () => {
  if (controller && controller.exitCode === null) {
    const exited = new Promise((r) => controller!.once('exit', r));
    controller.kill('SIGTERM');
    await exited;
  }
  cleanupBundle();
  work.cleanup();
});

describe('sparkctl against npm start', () => {
  it('bootstraps a token, adopts hosts, reserves until attached and releases after cleanup', async () => {
    const ledgerUrl = `file:${join(work.dir, 'spark.db')}`;
    // the first operate token: what the controller's admin script writes (scripts/admin.ts; the
    // spawn from `sparkctl admin` is covered in cli-sparkctl.test.ts)
    const boot = await makeTestLedger({ url: ledgerUrl });
    const { token } = await createApiToken(boot.ledger, { name: 'ops', scopes: ['operate'] }, 'admin:local');
    boot.close();

    // tsx resolved from this checkout: the controller runs in a temp cwd without node_modules
    const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
    controller = spawn(process.execPath, ['--import', tsx, join(repoRoot, 'functions', 'node.ts')], {
      cwd: work.dir,
      env: {
        PATH: process.env.PATH ?? '',
        SPARK_LEDGER_URL: ledgerUrl,
        SPARK_HOST: '127.0.0.1',
        SPARK_PORT: '0',
        SPARK_LOG_LEVEL: 'warn',
      },
      stdio: 'pipe',
    });
    let out = '';
    controller.stdout.on('data', (d) => {
      out += d;
    });
    controller.stderr.on('data', (d) => {
      out += d;
    });
    const url = await until(
      'controller listening',
      () => /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(out)?.[1],
      30_000,
    );
    const env = { SPARK_URL: url, SPARK_TOKEN: token };
    const ctl = (args: string[]) => runSparkctl(bin, args, env, work.dir);

    for (const h of ['spark-1', 'spark-2']) expect((await ctl(['host', 'adopt', h])).code).toBe(0);
    // the agents, over the agent API of the controller process
    const target = { url, ops: token };
    await heartbeat(target, 'spark-1', servingFacts());
    await heartbeat(target, 'spark-2', idleFacts());
    const fleet = JSON.parse((await ctl(['fleet', '--json'])).stdout);
    expect(fleet.managed).toBe(true);

    const p = spawnSparkctl(bin, ['reserve', '--wait'], env, work.dir);
    await p.waitFor(/r-1 (queued|allocated)/);
    const granted = await until(
      'grant by the controller process',
      async () => ((await reservationOf(target, 'r-1'))?.status === 'allocated' ? true : undefined),
      10_000,
    );
    expect(granted).toBe(true);
    await p.waitFor(/r-1 allocated spark-2 · preparing spark-2/);
    await agentReportsPrepared(target, 'r-1');
    const attached = await p.done;
    expect(attached.code).toBe(0);
    expect(attached.stdout).toMatch(/r-1 is yours: spark-2 \(single\)/);

    const rel = spawnSparkctl(bin, ['release', 'r-1'], env, work.dir);
    await rel.waitFor(/waiting for the agent to confirm cleanup on spark-2/);
    await agentReportsCleaned(target, 'r-1');
    const released = await rel.done;
    expect(released.code).toBe(0);
    expect(released.stdout).toMatch(/r-1 done: termination and cleanup confirmed on spark-2/);
    const history = JSON.parse((await ctl(['history', 'r-1', '--json'])).stdout);
    expect(history.events.map((e: { actor: string }) => e.actor)).toEqual(
      expect.arrayContaining(['api:ops', 'admission', 'agent:spark-2']),
    );
  }, 180_000);
});
