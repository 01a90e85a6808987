/**
 * `npm run demo [-- --keep] [-- --story failures]`: the product in one command (docs/demo.md). Starts the controller with an embedded ledger in a temp dir, two relay agents
 * with simulated Spark hosts (fake nvidia-smi, fake Deckard on spark-1, JIT runners) and a local
 * fake GitHub, then plays a scripted story with a timeline.
 *
 * The default story: a maintainer labels PR #1, a pair test holds the first free host, a push
 * supersedes a queued commit, a fork PR is refused, a developer's `sparkctl reserve` is refused at
 * once (development needs the dstack executor; these hosts run JIT runners). Ends with a summary
 * table and exits 0, or 1 naming the step that did not happen.
 *
 * `--story failures` (./demo/failures.ts): every failure and cancellation
 * behaviour of the seed against the same fleet, ending with the table `behaviour | the seed says
 * | observed | match`; exits 0 only when every row matches, 1 otherwise.
 *
 * `--keep` leaves everything running for the dashboard until Ctrl-C. Everything listens on
 * 127.0.0.1 and is removed on exit.
 */

import {
  FAILURE_STORY_TIMINGS,
  failureStoryPlans,
  playFailureStory,
  printFailureTable,
} from './demo/failures.ts';
import { bold, dim, elapsedS, fleetView, line, sparkctl, startTimeline, step } from './demo/ui.ts';
import type { JobPlan } from './sim/harness/index.ts';
import {
  FAST_TICK_MS,
  queuedId,
  REPO,
  type SparkSystem,
  startSystem,
  sweepProcessesUnder,
  waitFor,
} from './sim/harness/index.ts';

const USAGE = 'usage: npm run demo [-- --keep] [-- --story failures]';
const STORIES = ['default', 'failures'] as const;
type StoryName = (typeof STORIES)[number];

/** `--keep`, `--story NAME` / `--story=NAME`; anything else is an error naming the usage. */
function parseArgs(args: string[]): { keep: boolean; story: StoryName } {
  let keep = false;
  let story: StoryName = 'default';
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === '--keep') keep = true;
    else if (a === '--story' || a.startsWith('--story=')) {
      const name = a === '--story' ? args[++i] : a.slice('--story='.length);
      if (!name || !(STORIES as readonly string[]).includes(name)) {
        console.error(`demo: unknown story "${name ?? ''}"; stories: ${STORIES.join(', ')}. ${USAGE}`);
        process.exit(2);
      }
      story = name as StoryName;
    } else {
      console.error(`demo: unknown argument "${a}"; ${USAGE}`);
      process.exit(2);
    }
  }
  return { keep, story };
}

const { keep: KEEP, story: STORY } = parseArgs(process.argv.slice(2));

const sha = (pair: string) => pair.repeat(20);
const SHA = { pr1: sha('1a'), pr2: sha('2b'), pr3old: sha('3c'), pr3new: sha('3d'), fork: sha('4e') };
/** The demo holds some jobs at a gate so the next part of the story happens while they run. */
const plans = new Map<string, Partial<JobPlan>>([
  [SHA.pr1, { gates: ['work'] }],
  [SHA.pr2, { gates: ['work'] }],
]);

let sys: SparkSystem | null = null;
const startup = new AbortController();
let starting: Promise<SparkSystem> | null = null;
let closing: Promise<void> | null = null;
const shutdown = (code: number) => {
  startup.abort();
  closing ??= (async () => {
    // an interrupted start tears itself down; wait for it before exiting
    await starting?.catch(() => undefined);
    const dir = sys?.dir;
    await sys?.close().catch((e) => console.error(`demo: cleanup failed: ${(e as Error).message}`));
    // a Deckard a restore was starting when the signal came runs in its own session: sweep again
    if (dir) await sweepProcessesUnder(dir);
  })();
  void closing.then(() => process.exit(code));
};
process.once('SIGINT', () => {
  console.log('\ninterrupted: stopping the controller, agents and fake GitHub…');
  shutdown(130);
});
process.once('SIGTERM', () => shutdown(143));

async function story(s: SparkSystem) {
  step(`A maintainer labels PR #1 "spark-test" (signed webhook → single test)`);
  s.openPr(1, { sha: SHA.pr1 });
  const r1 = queuedId(await s.label(1, 'spark-test'));
  const j1 = await s.waitJob(r1);
  line('story', `${r1} runs on ${bold(j1.hostId)} (spark-2 is preferred so spark-1 keeps serving Deckard)`);
  if (j1.hostId !== 'spark-2') throw new Error(`${r1} ran on ${j1.hostId}, expected spark-2`);

  step('A pair test is requested on PR #2: it queues and holds the first free host');
  s.openPr(2, { sha: SHA.pr2 });
  const r2 = queuedId(await s.label(2, 'spark-pair-test'));
  await waitFor(
    'spark-1 to be held for the pair',
    async () =>
      (await fleetView(s)).hosts.find((h) => h.id === 'spark-1' && h.state === 'held' && h.keptFor === r2),
    60_000,
    200,
  );
  line('story', `spark-1 is ${bold('held')} for ${r2}: no smaller work may take it while the pair waits`);
  s.openGate(r1, 'work');
  await s.waitCheck(r1, 'Spark test passed — evidence receipt recorded');
  await s.waitJob(r2, 'spark-1');
  await s.waitJob(r2, 'spark-2');
  line('story', `${r2} got both hosts at once; Deckard on spark-1 was drained and stopped first`);

  step('While the pair runs, PR #3 is labeled, then a new commit is pushed to it');
  s.openPr(3, { sha: SHA.pr3old });
  const r3 = queuedId(await s.label(3, 'spark-test'));
  // next in line, it claims a busy host and waits for its active job to finish (ADR 0050 item 3)
  await s.waitCheck(r3, 'Spark 2 draining — active job finishing');
  const pushed = await s.push(3, SHA.pr3new);
  const r4 = queuedId({
    ...pushed,
    result: pushed.result?.split(', ').find((p) => p.startsWith('queued')) ?? null,
  });
  await s.waitCheck(r3, `Spark test superseded — ${SHA.pr3old.slice(0, 7)} is no longer the PR head`);
  line('story', `${r3} (old SHA) superseded while queued; ${r4} queued for ${SHA.pr3new.slice(0, 7)}`);

  step('Someone labels fork PR #4: refused, nothing queued');
  s.openPr(4, { sha: SHA.fork, fork: true });
  const refused = await s.label(4, 'spark-test');
  if (!refused.result?.startsWith('refused')) throw new Error(`fork PR was not refused: ${refused.result}`);
  await waitFor('the refusal check run', () => s.gh.checkRuns.find((c) => c.head_sha === SHA.fork), 30_000);

  step('The pair finishes; Deckard is restored (health-gated); PR #3 runs its new commit');
  s.openGate(r2, 'work');
  await s.waitCheck(r2, 'Spark test passed — evidence receipt recorded');
  await s.waitCheck(r4, 'Spark test passed — evidence receipt recorded');
  await s.waitHostPhase('spark-1', ['service']);

  step('A developer asks sparkctl for spark-1: refused at once, nothing queued');
  const dev = await s.api<{ token: string }>('POST', '/api/v1/tokens', {
    name: 'dev-laptop',
    scopes: ['develop'],
  });
  if (dev.status !== 201) throw new Error(`could not create a develop token: ${JSON.stringify(dev.body)}`);
  // a development lease is used through its dstack dev environment (docs/adr/0176-development-needs-dstack.md);
  // these simulated hosts run JIT runners, so a request that would lead nowhere is refused
  const refusal = await sparkctl(s, dev.body.token, ['reserve', '--host', 'spark-1', '--ttl', '1h']).then(
    (out) => {
      throw new Error(`sparkctl reserve was not refused: ${out}`);
    },
    (e: Error) => e.message,
  );
  if (!refusal.includes('sparkctl: development needs the dstack executor'))
    throw new Error(`sparkctl reserve was refused for another reason: ${refusal}`);
  line('story', 'development needs the dstack executor: these hosts run JIT runners (docs/executors.md)');
  return [r1, r2, r3, r4];
}

async function summary(s: SparkSystem, ids: string[]) {
  const rows = [['reservation', 'trigger', 'commit', 'topology', 'hosts', 'status', 'GitHub check']];
  for (const id of ids) {
    const r = await s.reservation(id);
    const hosts = (await s.leases(id)).map((l) => l.hostId).join('+') || '—';
    const trigger = r.pr != null ? `PR #${r.pr}` : `sparkctl (${r.kind})`;
    const status = `${r.status}${r.outcome && r.status !== 'superseded' ? ` (${r.outcome})` : ''}`;
    rows.push([
      id,
      trigger,
      r.headSha?.slice(0, 7) ?? '—',
      r.topology,
      hosts,
      status,
      s.checkRun(id)?.output.title ?? '—',
    ]);
  }
  const refusal = s.gh.checkRuns.find((c) => c.head_sha === SHA.fork);
  rows.push([
    '—',
    'PR #4 (fork)',
    SHA.fork.slice(0, 7),
    'single',
    '—',
    'refused',
    refusal?.output.title ?? '—',
  ]);
  rows.push([
    '—',
    'sparkctl (development)',
    '—',
    'single',
    '—',
    'refused',
    'development needs the dstack executor',
  ]);
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  console.log(`\n${bold('Summary')}`);
  rows.forEach((r, i) => {
    console.log(`  ${r.map((c, j) => c.padEnd(widths[j]!)).join('  ')}`.trimEnd());
    if (i === 0) console.log(`  ${widths.map((w) => '─'.repeat(w)).join('  ')}`);
  });
  const fleet = await fleetView(s);
  console.log(`\n  hosts: ${fleet.hosts.map((h) => `${h.id} ${h.state}`).join(', ')}`);
  const ok = s.deliveries.filter((d) => d.status >= 200 && d.status < 300).length;
  console.log(
    `  webhooks delivered: ${ok}/${s.deliveries.length}; GitHub API calls: ${s.gh.requests.length}, schema violations: ${s.gh.violations.length}`,
  );
  if (s.gh.violations.length)
    throw new Error(`the fake GitHub saw calls outside GitHub's API: ${s.gh.violations.join('; ')}`);
}

async function main() {
  const failures = STORY === 'failures';
  console.log(bold(failures ? 'Spark Controller demo — the failure story' : 'Spark Controller demo'));
  console.log(
    dim('controller + 2 relay agents (simulated Spark hosts) + local fake GitHub, all on 127.0.0.1'),
  );
  starting = startSystem({
    plan: (j) => (failures ? failureStoryPlans : plans).get(j.headSha) ?? {},
    onNote: (n) => line('GitHub', dim(n)),
    signal: startup.signal,
    // both stories read check titles only, so check runs may leave on a short tick
    tickMs: FAST_TICK_MS,
    ...(failures ? { timings: FAILURE_STORY_TIMINGS } : {}),
  });
  sys = await starting;
  console.log(
    `\n  dashboard: ${bold(`${sys.controllerUrl}/`)}   (fleet JSON: ${sys.controllerUrl}/api/v1/fleet)`,
  );
  console.log(`  repository ${REPO} enabled; hosts adopted; agents heartbeating`);
  console.log(`  state (ledger, configs, logs): ${sys.dir}  (removed on exit)`);
  const stopTimeline = startTimeline(sys);
  let code = 0;
  if (failures) {
    let played: Awaited<ReturnType<typeof playFailureStory>>;
    try {
      played = await playFailureStory(sys);
    } finally {
      await stopTimeline();
    }
    printFailureTable(played);
    const violations = sys.gh.violations.length;
    console.log(`  GitHub API calls: ${sys.gh.requests.length}, schema violations: ${violations}`);
    if (!played.ok || violations) code = 1;
  } else {
    let ids: string[];
    try {
      ids = await story(sys);
    } finally {
      await stopTimeline();
    }
    await summary(sys, ids);
  }
  if (KEEP) {
    console.log(`\n${bold('Still running')} (--keep): open ${sys.controllerUrl}/ — Ctrl-C stops everything.`);
    return;
  }
  console.log(
    `\n${bold(code === 0 ? 'Demo finished' : 'Demo finished: NOT every behaviour matched the seed')} in ${elapsedS().toFixed(1)} s; everything stopped and removed.`,
  );
  shutdown(code);
}

main().catch((e) => {
  if (startup.signal.aborted) return;
  console.error(`\ndemo failed: ${(e as Error).message}`);
  shutdown(1);
});
