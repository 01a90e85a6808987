/**
 * Webhook bench (13): signed deliveries at 200 concurrent requests on fresh
 * connections, sent by one load generator to two servers **alternately in the same run**:
 * - the baseline (`webhook-baseline-server.ts`): Hono on Node, a libSQL file with the same
 *   settings, signature verify + one insert + 202 — this machine's floor for the job;
 * - the controller (`node --import tsx functions/node.ts`, embedded libSQL file, fake GitHub in
 *   its own process), which acknowledges from its inbox and processes afterwards.
 * Deliveries are the load test's mix (labels, pushes, comments, workflow_job, unknown events,
 * from @octokit/webhooks-examples). Reported for both: p50/p99 of the acknowledgement,
 * deliveries/s, CPU ms per delivery (the server process's user+system time from /proc over the
 * rounds). For the controller also what its acknowledgement leaves to do
 * (docs/adr/0188-webhooks-measured-processed.md):
 * - `processedPerS`: deliveries whose effect is applied (the inbox row marked done, in the same
 *   transaction as the effect: functions/ledger/inbox.ts `completeDelivery`), per second of the
 *   round, a round lasting from its first send to its last delivery applied;
 * - acknowledgement → processed p50/p99 (the inbox's received_at, written before the 202, to
 *   processed_at);
 * - how many deliveries needed a redelivery (a non-2xx answer GitHub would show as failed).
 * Targets: ack p99 ≤ 1.5× the baseline's, processed/s ≥ 0.5× the baseline's deliveries/s,
 * ack → processed p99 ≤ 1 s, 0 non-2xx.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sign } from '@octokit/webhooks-methods';
import { createApiToken } from '../../functions/auth/tokens.ts';
import {
  deliveryStates,
  deliveryTimes,
  pendingDeliveryCount,
} from '../../functions/ledger/inbox-progress.ts';
import { benchCpuProfileDir, benchNumber, childEnv } from '../settings.ts';
import {
  githubBody,
  LOAD_INSTALLATION,
  LOAD_REPO,
  MAINTAINER,
  makeTestLedger,
  OUTSIDER,
  planDeliveries,
  pullRequestEvent,
  SECRET,
  sendAll,
  sendDelivery,
  startControllerProcesses,
  startFakeGitHubProcess,
} from '../sim/harness/load.ts';
import { percentile } from './admission.ts';
import type { BenchRunner } from './types.ts';

const CONCURRENCY = 200;
const ROUNDS = benchNumber('SPARK_BENCH_WEBHOOK_ROUNDS', 5);
const P99_RATIO = 1.5;
const THROUGHPUT_RATIO = 0.5;
const ACK_TO_PROCESSED_P99_MS = 1000;
const here = dirname(fileURLToPath(import.meta.url));
const round = (n: number, d = 1) => Math.round(n * 10 ** d) / 10 ** d;

/** user + system CPU of a process so far, in ms (Linux /proc; clock ticks are 100/s here). */
function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

async function startBaseline(file: string): Promise<{ url: string; proc: ChildProcess }> {
  const proc = spawn(
    process.execPath,
    ['--import', 'tsx', join(here, 'webhook-baseline-server.ts'), file, SECRET],
    {
      cwd: join(here, '../..'),
      env: childEnv({ NODE_ENV: 'production' }),
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  const port = await new Promise<number>((resolve, reject) => {
    let out = '';
    proc.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /listening (\d+)/.exec(out);
      if (m) resolve(Number(m[1]));
    });
    proc.once('exit', (code) => reject(new Error(`baseline server exited with ${code}`)));
  });
  return { url: `http://127.0.0.1:${port}`, proc };
}

interface Side {
  latencies: number[];
  wallMs: number;
  cpuMs: number;
  non2xx: number;
}

/** The controller's rounds as processed: from the first send to the last delivery applied. */
interface Processing {
  done: number;
  parked: number;
  pending: number;
  /** Sum over rounds of (last processed_at − the round's first send), ms. */
  windowMs: number;
}

function summary(s: Side) {
  const sorted = [...s.latencies].sort((a, b) => a - b);
  return {
    deliveries: sorted.length,
    p50Ms: round(percentile(sorted, 50)),
    p90Ms: round(percentile(sorted, 90)),
    p99Ms: round(percentile(sorted, 99)),
    maxMs: round(sorted.at(-1) ?? 0),
    deliveriesPerS: round(sorted.length / (s.wallMs / 1000)),
    cpuMsPerDelivery: round(s.cpuMs / sorted.length, 2),
    non2xx: s.non2xx,
  };
}

export const run: BenchRunner = async (progress) => {
  const seed = 7;
  const stamp = Date.now();
  const plan = await planDeliveries({
    sends: CONCURRENCY * ROUNDS,
    seed,
    targets: 1,
    prs: 20,
    duplicateRate: 0,
    shuffleWindow: 1,
    prefix: `bench-${stamp}`,
  });
  const basePlan = plan.sends.map((d) => ({ ...d, id: `base-${d.id}` }));
  const gh = await startFakeGitHubProcess([
    {
      fullName: LOAD_REPO,
      installationId: LOAD_INSTALLATION,
      collaborators: { [MAINTAINER]: 'maintain', [OUTSIDER]: 'write' },
      pulls: Object.fromEntries(
        Object.entries(plan.prHeads).map(([n, sha]) => [
          Number(n),
          { state: 'open' as const, headSha: sha, headRepo: LOAD_REPO, labels: ['spark-test'] },
        ]),
      ),
    },
  ]);
  const config = {
    hosts: [{ id: 'spark-1', homeService: 'deckard' }, { id: 'spark-2' }],
    budgets: { maxPrs: 1000, maxGpusPerPr: 8, maxGpus: 8 },
    github: { apiUrl: gh.url, permissionCacheS: 3600, runnerGroupId: 1 },
  };
  const tl = await makeTestLedger({ config });
  const operator = (await createApiToken(tl.ledger, { name: 'bench', scopes: ['operate'] }, 'bench')).token;
  let group: Awaited<ReturnType<typeof startControllerProcesses>> | null = null;
  let baseline: { url: string; proc: ChildProcess } | null = null;
  try {
    progress('starting the fake GitHub, the baseline server and one controller process');
    baseline = await startBaseline(join(tl.dir, 'baseline.db'));
    const cpuProfileDir = benchCpuProfileDir();
    group = await startControllerProcesses({
      count: 1,
      config,
      dir: tl.dir,
      ledgerUrl: tl.url,
      // SPARK_BENCH_CPU_PROF=<dir>: write a V8 CPU profile of the controller (where the time goes)
      ...(cpuProfileDir ? { nodeArgs: ['--cpu-prof', `--cpu-prof-dir=${cpuProfileDir}`] } : {}),
      env: {
        SPARK_WEBHOOK_SECRET: SECRET,
        SPARK_GITHUB_APP_ID: String(gh.appId),
        SPARK_GITHUB_PRIVATE_KEY: gh.privateKey,
      },
    });
    const url = group.urls[0]!;
    const ctlPid = group.procs[0]!.pid;
    const basePid = baseline.proc.pid!;
    const enabled = await fetch(`${url}/api/v1/repositories/${LOAD_REPO}/enable`, {
      method: 'POST',
      headers: { authorization: `Bearer ${operator}`, 'content-type': 'application/json' },
      // the bench's hosts are never adopted (no agents: webhooks only) and its runners join the
      // organization's "Default" group: the readiness checks it does not play are overridden as
      // an operator may (docs/adr/0165-enable-is-a-gate.md), as the load test does
      body: JSON.stringify({ pairEnabled: true, override: ['hosts', 'deckard', 'dstack', 'runner-group'] }),
    });
    if (enabled.status !== 200) throw new Error(`enable failed: ${enabled.status} ${await enabled.text()}`);
    // warm-up, both servers: installation token, both senders' roles, code paths, JIT
    for (let i = 0; i < 40; i++) {
      const body = githubBody(
        'pull_request',
        pullRequestEvent('labeled', 1, plan.prHeads[1]!, {
          label: 'spark-test',
          labels: ['spark-test'],
          sender: i % 2 ? OUTSIDER : MAINTAINER,
        }),
      );
      const d = { event: 'pull_request', body, signature: await sign(SECRET, body) };
      await sendDelivery(url, { id: `warm-${stamp}-${i}`, ...d });
      await sendDelivery(baseline.url, { id: `warm-${stamp}-${i}`, ...d });
    }

    const sides: Record<'baseline' | 'controller', Side> = {
      baseline: { latencies: [], wallMs: 0, cpuMs: 0, non2xx: 0 },
      controller: { latencies: [], wallMs: 0, cpuMs: 0, non2xx: 0 },
    };
    const inboxDrained = async (deadline: number) => {
      for (;;) {
        if ((await pendingDeliveryCount(tl.ledger.store)) === 0 || Date.now() > deadline) return;
        await new Promise((res) => setTimeout(res, 20));
      }
    };
    const redelivery = new Set<string>();
    const processing: Processing = { done: 0, parked: 0, pending: 0, windowMs: 0 };
    const load = [loadavg()[0]!];
    for (let r = 0; r < ROUNDS; r++) {
      // alternate which goes first, so neither always meets the other's leftovers
      const order: Array<'baseline' | 'controller'> =
        r % 2 ? ['controller', 'baseline'] : ['baseline', 'controller'];
      for (const side of order) {
        const target = side === 'baseline' ? baseline.url : url;
        const pid = side === 'baseline' ? basePid : ctlPid;
        const batch = (side === 'baseline' ? basePlan : plan.sends).slice(
          r * CONCURRENCY,
          (r + 1) * CONCURRENCY,
        );
        const cpu0 = cpuMs(pid);
        // wall clock, as the controller stamps processed_at (same machine)
        const startedAt = Date.now();
        const t0 = performance.now();
        const results = await sendAll(batch, [target], CONCURRENCY);
        const wall = performance.now() - t0;
        // the controller's CPU counts until its inbox processed the round (answer + processing),
        // and the next round (either side) starts only then, so neither meets leftover work
        if (side === 'controller') {
          await inboxDrained(Date.now() + 120_000);
          const states = await deliveryStates(
            tl.ledger.store,
            batch.map((d) => d.id),
          );
          for (const row of states) {
            const n = row.n;
            if (row.state === 'done') {
              processing.done += n;
              processing.windowMs += Number(row.last) - startedAt;
            } else if (row.state === 'parked') processing.parked += n;
            else processing.pending += n;
          }
        }
        const s = sides[side];
        s.wallMs += wall;
        s.cpuMs += cpuMs(pid) - cpu0;
        for (const x of results) {
          if (x.status < 200 || x.status > 299) {
            s.non2xx++;
            if (side === 'controller') redelivery.add(x.delivery.id);
          }
          s.latencies.push(x.ms);
        }
        progress(
          `round ${r + 1}/${ROUNDS} ${side}: ${CONCURRENCY} concurrent deliveries in ${round(wall, 0)} ms`,
        );
      }
      load.push(loadavg()[0]!);
    }
    // acknowledgement → processed, from the inbox rows (received_at is the insert before the 202)
    const processed = await deliveryTimes(tl.ledger.store, `bench-${stamp}`);
    const ackToProcessed = processed
      .filter((p) => p.processedAt != null)
      .map((p) => p.processedAt! - p.receivedAt)
      .sort((a, b) => a - b);
    const b = summary(sides.baseline);
    const c = summary(sides.controller);
    const p99Ratio = c.p99Ms / b.p99Ms;
    const tputRatio = c.deliveriesPerS / b.deliveriesPerS;
    const processedPerS = processing.done / (processing.windowMs / 1000);
    const processedRatio = processedPerS / b.deliveriesPerS;
    const ackToProcessedP99Ms = round(percentile(ackToProcessed, 99));
    const json = {
      concurrency: CONCURRENCY,
      rounds: ROUNDS,
      ...c,
      p99Ratio: round(p99Ratio, 2),
      throughputRatio: round(tputRatio, 2),
      processedPerS: round(processedPerS),
      processedRatio: round(processedRatio, 2),
      ackToProcessedP50Ms: round(percentile(ackToProcessed, 50)),
      ackToProcessedP99Ms,
      processed: ackToProcessed.length,
      // of the rounds' deliveries once the inbox drained (pending: still waiting at the deadline)
      processing: { done: processing.done, parked: processing.parked, pending: processing.pending },
      neededRedelivery: redelivery.size,
      baseline: b,
      loadAverage1m: load.map((l) => round(l, 2)),
      targets: {
        p99Ratio: P99_RATIO,
        processedRatio: THROUGHPUT_RATIO,
        ackToProcessedP99Ms: ACK_TO_PROCESSED_P99_MS,
        non2xx: 0,
      },
      setup:
        'one controller process (node --import tsx functions/node.ts) and the baseline (scripts/bench/webhook-baseline-server.ts), each with its own libSQL file, alternating rounds from one load generator on loopback, fresh connection per delivery; fake GitHub in its own process; p99Ms and deliveriesPerS are the acknowledgement (202); processedPerS counts deliveries marked done in the inbox (their effect committed with the mark) over each round from its first send to its last processed_at; the next round starts once the inbox drained',
    };
    return {
      key: 'webhooks',
      json,
      rows: [
        { metric: `baseline p50 / p99 @${CONCURRENCY} concurrent`, value: `${b.p50Ms} / ${b.p99Ms} ms` },
        { metric: 'baseline deliveries per second', value: `${b.deliveriesPerS}/s` },
        { metric: 'baseline CPU per delivery', value: `${b.cpuMsPerDelivery} ms` },
        { metric: `controller p50 @${CONCURRENCY} concurrent`, value: `${c.p50Ms} ms` },
        {
          metric: `controller p99 @${CONCURRENCY} concurrent`,
          value: `${c.p99Ms} ms (${round(p99Ratio, 2)}×)`,
          target: `≤ ${P99_RATIO}× baseline`,
          met: p99Ratio <= P99_RATIO,
        },
        {
          metric: 'controller deliveries acknowledged per second',
          value: `${c.deliveriesPerS}/s (${round(tputRatio, 2)}×)`,
        },
        {
          metric: 'controller deliveries processed per second',
          value: `${round(processedPerS)}/s (${round(processedRatio, 2)}× baseline deliveries/s)`,
          target: `≥ ${THROUGHPUT_RATIO}× baseline`,
          met: processedRatio >= THROUGHPUT_RATIO,
        },
        {
          metric: 'controller CPU per delivery (answer + processing in the round)',
          value: `${c.cpuMsPerDelivery} ms`,
        },
        {
          metric: 'acknowledged → processed p50 / p99',
          value: `${json.ackToProcessedP50Ms} / ${json.ackToProcessedP99Ms} ms`,
          target: `p99 ≤ ${ACK_TO_PROCESSED_P99_MS} ms`,
          met: ackToProcessedP99Ms <= ACK_TO_PROCESSED_P99_MS,
        },
        { metric: 'controller non-2xx answers', value: String(c.non2xx), target: '0', met: c.non2xx === 0 },
        { metric: 'deliveries that needed a redelivery', value: String(redelivery.size) },
      ],
    };
  } finally {
    baseline?.proc.kill('SIGTERM');
    await group?.stop();
    await gh.close();
    tl.close();
  }
};
