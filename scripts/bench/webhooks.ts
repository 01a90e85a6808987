/**
 * Webhook bench (issue 7): latency of signed deliveries at 200 concurrent requests against one
 * Node controller process (`node --import tsx functions/node.ts`, embedded libSQL file) on
 * loopback, and deliveries per second. Deliveries are the load test's mix (labels, pushes,
 * comments, workflow_job, unknown events; built from @octokit/webhooks-examples); the fake
 * GitHub runs in its own process. Permission answers and the installation token are warm (a
 * running controller has them cached); `/spark` comments still make one GitHub call each.
 */
import { sign } from '@octokit/webhooks-methods';
import { createApiToken } from '../../functions/auth/tokens.ts';
import {
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
} from '../../test/harness/load.ts';
import { percentile } from './admission.ts';
import type { BenchRunner } from './types.ts';

const CONCURRENCY = 200;
const ROUNDS = 5;
const TARGET_P99_MS = 100;
const round = (n: number, d = 1) => Math.round(n * 10 ** d) / 10 ** d;

export const run: BenchRunner = async (progress) => {
  const seed = 7;
  const plan = await planDeliveries({
    sends: CONCURRENCY * ROUNDS,
    seed,
    targets: 1,
    prs: 20,
    duplicateRate: 0,
    shuffleWindow: 1,
    prefix: `bench-${Date.now()}`,
  });
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
    github: { apiUrl: gh.url, permissionCacheS: 3600 },
  };
  const tl = await makeTestLedger({ config });
  const operator = (await createApiToken(tl.ledger, { name: 'bench', scopes: ['operate'] }, 'bench')).token;
  let group: Awaited<ReturnType<typeof startControllerProcesses>> | null = null;
  try {
    progress('starting the fake GitHub and one controller process');
    group = await startControllerProcesses({
      count: 1,
      config,
      dir: tl.dir,
      ledgerUrl: tl.url,
      // SPARK_BENCH_CPU_PROF=<dir>: write a V8 CPU profile of the controller (where the time goes)
      ...(process.env.SPARK_BENCH_CPU_PROF
        ? { nodeArgs: ['--cpu-prof', `--cpu-prof-dir=${process.env.SPARK_BENCH_CPU_PROF}`] }
        : {}),
      env: {
        SPARK_WEBHOOK_SECRET: SECRET,
        SPARK_GITHUB_APP_ID: String(gh.appId),
        SPARK_GITHUB_PRIVATE_KEY: gh.privateKey,
      },
    });
    const url = group.urls[0]!;
    const enabled = await fetch(`${url}/api/v1/repositories/${LOAD_REPO}/enable`, {
      method: 'POST',
      headers: { authorization: `Bearer ${operator}`, 'content-type': 'application/json' },
      body: '{"pairEnabled":true}',
    });
    if (enabled.status !== 200) throw new Error(`enable failed: ${enabled.status} ${await enabled.text()}`);
    // warm-up: installation token, both senders' roles, code paths
    for (let i = 0; i < 20; i++) {
      const body = JSON.stringify(
        pullRequestEvent('labeled', 1, plan.prHeads[1]!, {
          label: 'spark-test',
          labels: ['spark-test'],
          sender: i % 2 ? OUTSIDER : MAINTAINER,
        }),
      );
      await sendDelivery(url, {
        id: `warm-${Date.now()}-${i}`,
        event: 'pull_request',
        body,
        signature: await sign(SECRET, body),
      });
    }

    const latencies: number[] = [];
    const direct: number[] = [];
    let wallMs = 0;
    let non2xx = 0;
    for (let r = 0; r < ROUNDS; r++) {
      const batch = plan.sends.slice(r * CONCURRENCY, (r + 1) * CONCURRENCY);
      const t0 = performance.now();
      const results = await sendAll(batch, [url], CONCURRENCY);
      wallMs += performance.now() - t0;
      for (const x of results) {
        if (x.status !== 200) non2xx++;
        latencies.push(x.ms);
        if (!x.delivery.kind.startsWith('comment-')) direct.push(x.ms);
      }
      progress(
        `round ${r + 1}/${ROUNDS}: ${CONCURRENCY} concurrent deliveries in ${round(performance.now() - t0, 0)} ms`,
      );
    }
    latencies.sort((a, b) => a - b);
    direct.sort((a, b) => a - b);
    const p50 = percentile(latencies, 50);
    const p99 = percentile(latencies, 99);
    const perS = latencies.length / (wallMs / 1000);
    const json = {
      concurrency: CONCURRENCY,
      rounds: ROUNDS,
      deliveries: latencies.length,
      p50Ms: round(p50),
      p90Ms: round(percentile(latencies, 90)),
      p99Ms: round(p99),
      maxMs: round(latencies.at(-1)!),
      p99WithoutGitHubCallMs: round(percentile(direct, 99)),
      deliveriesPerS: round(perS),
      non2xx,
      targetP99Ms: TARGET_P99_MS,
      setup:
        'one controller process (node --import tsx functions/node.ts), embedded libSQL file, loopback; fake GitHub in its own process',
    };
    return {
      key: 'webhooks',
      json,
      rows: [
        { metric: `webhook latency p50 @${CONCURRENCY} concurrent`, value: `${json.p50Ms} ms` },
        {
          metric: `webhook latency p99 @${CONCURRENCY} concurrent`,
          value: `${json.p99Ms} ms`,
          target: `≤ ${TARGET_P99_MS} ms`,
          met: p99 <= TARGET_P99_MS,
        },
        { metric: 'webhook p99 without a GitHub call at intake', value: `${json.p99WithoutGitHubCallMs} ms` },
        { metric: 'webhook deliveries per second', value: `${json.deliveriesPerS}/s` },
        { metric: 'webhook non-2xx answers', value: String(non2xx), target: '0', met: non2xx === 0 },
      ],
    };
  } finally {
    await group?.stop();
    await gh.close();
    tl.close();
  }
};
