/**
 * Anonymous-bodies bench (docs/adr/0150-anonymous-body-budget.md): a fresh controller process
 * (`node --import tsx functions/node.ts`, what `npm start` runs, embedded libSQL file, a webhook
 * secret set) takes 600 concurrent unauthenticated partial webhook bodies of 2,000 KiB each —
 * well-formed headers, a Content-Length just under the 2 MiB webhook limit, the body never
 * finished — while `/healthz` is asked in a loop (scripts/sim/harness/body-burst.ts); then the same burst
 * once more on the same process. Reported: the controller's RSS before, at each burst's peak and
 * after its connections closed; the answers (503 with Retry-After past the budget); `/healthz`
 * during the bursts; and, after a full GC in the process (scripts/sim/harness/gc-on-signal.mjs), what V8
 * and Node still hold (heap + external) and the RSS, whose rest is memory glibc kept for reuse.
 * Targets: at most 64 MiB of growth, at most 16 MiB held after the GC, `/healthz` always 200.
 * Before the budget the first burst took RSS from 145 to 1,364 MiB and kept it there.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GC_ON_SIGNAL_NODE_ARGS, type GcReport, gcProcess, runBodyBurst } from '../sim/harness/body-burst.ts';
import { makeTestLedger, startControllerProcesses } from '../sim/harness/load.ts';
import type { BenchRunner } from './types.ts';

const KiB = 1024;
const COUNT = 600;
const GROWTH_TARGET_MIB = 64;
/** What V8 and Node may still hold once the garbage is collected: compiled routes and caches, not the bodies. */
const HELD_TARGET_MIB = 16;

export const run: BenchRunner = async (progress) => {
  const dir = mkdtempSync(join(tmpdir(), 'spark-bench-bodies-'));
  const ledgerUrl = `file:${join(dir, 'spark.db')}`;
  const config = { hosts: [{ id: 'spark-1', homeService: 'deckard' }, { id: 'spark-2' }] };
  (await makeTestLedger({ url: ledgerUrl, config })).close();
  const group = await startControllerProcesses({
    count: 1,
    dir,
    ledgerUrl,
    config,
    env: { SPARK_WEBHOOK_SECRET: 'bench-secret' },
    // only lets the bench ask for one full GC at the end (scripts/sim/harness/gc-on-signal.mjs)
    nodeArgs: GC_ON_SIGNAL_NODE_ARGS,
  });
  try {
    const p = group.procs[0]!;
    progress(`2 bursts of ${COUNT} partial bodies of 2,000 KiB to ${p.url}/github/webhooks`);
    const r = await runBodyBurst({
      url: p.url,
      pid: p.pid,
      count: COUNT,
      bodyBytes: 2000 * KiB,
      declaredBytes: 2048 * KiB - 1,
      holdMs: 3000,
      settleMs: 5000,
      rounds: 2,
      gc: () => gcProcess(p.pid, p.stderr),
    });
    const died = group.deaths();
    if (died.length) throw new Error(died.join('\n'));
    const [first, second] = r.rounds as [(typeof r.rounds)[0], (typeof r.rounds)[0]];
    const growth1 = Math.round((first.peakMiB - r.rssBeforeMiB) * 10) / 10;
    const healthz = r.rounds.map((x) => x.healthz);
    const asked = healthz.reduce((n, h) => n + h.asked, 0);
    const ok = healthz.reduce((n, h) => n + h.ok, 0);
    const maxMs = Math.max(...healthz.map((h) => h.maxMs));
    const gcLine = (g: GcReport) =>
      `heap used ${g.heapUsed} MiB, external ${g.external} MiB, RSS ${g.rss} MiB`;
    progress(`after a full GC, before the bursts: ${r.gcReports.map(gcLine).join('; after them: ')}`);
    progress(
      `RSS ${r.rssBeforeMiB} → peak ${first.peakMiB} → ${first.afterMiB} after close; again: peak ${second.peakMiB} → ${second.afterMiB}; answers ${JSON.stringify(first.statuses)}, ${JSON.stringify(second.statuses)}`,
    );
    return {
      key: 'anonymous_bodies',
      json: { connections: COUNT, body_kib: 2000, ...r, first_burst_growth_mib: growth1 },
      rows: [
        { metric: 'RSS before (MiB)', value: String(r.rssBeforeMiB) },
        {
          metric: `RSS growth, ${COUNT} partial 2,000 KiB bodies (MiB)`,
          value: String(growth1),
          target: `≤ ${GROWTH_TARGET_MIB}`,
          met: growth1 <= GROWTH_TARGET_MIB,
        },
        { metric: 'RSS after the sockets closed (MiB)', value: String(first.afterMiB) },
        {
          metric: 'RSS growth over both bursts (MiB)',
          value: String(r.rssGrowthMiB),
          target: `≤ ${GROWTH_TARGET_MIB}`,
          met: r.rssGrowthMiB <= GROWTH_TARGET_MIB,
        },
        { metric: 'RSS after the second burst (MiB)', value: String(r.rssAfterMiB) },
        {
          metric: 'held by V8 and Node after a GC: heap + external (MiB over before)',
          value: String(r.heldByProcessMiB),
          target: `≤ ${HELD_TARGET_MIB}`,
          met: (r.heldByProcessMiB ?? Number.POSITIVE_INFINITY) <= HELD_TARGET_MIB,
        },
        {
          metric: 'RSS after a GC, allocator cache included (MiB over before)',
          value: String(r.rssHeldAfterGcMiB),
        },
        {
          metric: '503 (Retry-After) past the budget',
          value: `${first.statuses['503'] ?? 0}/${COUNT}, ${second.statuses['503'] ?? 0}/${COUNT}`,
        },
        {
          metric: '/healthz during the bursts (200/asked, max ms)',
          value: `${ok}/${asked}, ${maxMs}`,
          target: 'all 200',
          met: asked > 0 && ok === asked,
        },
      ],
    };
  } finally {
    await group.stop();
    rmSync(dir, { recursive: true, force: true });
  }
};
