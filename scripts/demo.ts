/**
 * `npm run demo [-- --keep]`: the product in one command (issue 7, docs/demo.md). Starts the
 * controller with an embedded ledger in a temp dir, two relay agents with simulated Spark hosts
 * (fake nvidia-smi, fake Deckard on spark-1, JIT runners) and a local fake GitHub, then plays a
 * scripted story with a timeline: a maintainer labels PR #1, a pair test holds the first free
 * host, a push supersedes a queued commit, a fork PR is refused, a developer reserves spark-1
 * with sparkctl (Deckard drained and restored). Ends with a summary table and exits 0, or 1
 * naming the step that did not happen. `--keep` leaves everything running for the dashboard
 * until Ctrl-C. Everything listens on 127.0.0.1 and is removed on exit.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import type { z } from 'zod';
import type { FleetResponse } from '../core/protocol/api.ts';
import {
  type JobPlan,
  queuedId,
  REPO,
  REPO_ROOT,
  type SparkSystem,
  startSystem,
  sweepProcessesUnder,
  waitFor,
} from '../test/harness/index.ts';

type FleetView = z.infer<typeof FleetResponse>;

const args = process.argv.slice(2);
const KEEP = args.includes('--keep');
for (const a of args) {
  if (a !== '--keep') {
    console.error(`demo: unknown argument "${a}"; usage: npm run demo [-- --keep]`);
    process.exit(2);
  }
}

const color = process.stdout.isTTY && !process.env.NO_COLOR;
const paint = (code: string, s: string) => (color ? `\x1b[${code}m${s}\x1b[0m` : s);
const bold = (s: string) => paint('1', s);
const dim = (s: string) => paint('2', s);
const t0 = Date.now();
const stamp = () => dim(`[+${((Date.now() - t0) / 1000).toFixed(1).padStart(5)}s]`);
const line = (who: string, text: string) => console.log(`${stamp()} ${who.padEnd(10)} ${text}`);
const step = (text: string) => console.log(`\n${stamp()} ${bold(`▶ ${text}`)}`);

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

/** Prints reservation transitions, host state changes and check run titles as they happen. */
function startTimeline(s: SparkSystem): () => Promise<void> {
  let lastEvent = 0;
  const hostStates = new Map<string, string>();
  const checkTitles = new Map<number, string>();
  const shown =
    /^reservation\.(queued|allocated|preparing|running|releasing|done|failed|cancelled|superseded|receipt)$|^alert\./;
  let stopped = false;
  const tick = async () => {
    const rows = await s.reader.eventsAfter(lastEvent);
    for (const e of rows) {
      lastEvent = e.id;
      if (!shown.test(e.type)) continue;
      line(
        e.subjectId,
        `${e.type.replace(/^reservation\./, '')}${e.cause ? dim(` — ${e.cause.split('\n')[0]}`) : ''}`,
      );
    }
    const fleet = await s.api<FleetView>('GET', '/api/v1/fleet', undefined, null).catch(() => null);
    for (const h of fleet?.body.hosts ?? []) {
      const st = `${h.state}${h.keptFor ? ` for ${h.keptFor}` : ''}`;
      if (hostStates.get(h.id) !== st) {
        if (hostStates.has(h.id)) line(h.id, `${hostStates.get(h.id)} → ${bold(st)}`);
        hostStates.set(h.id, st);
      }
    }
    for (const c of s.gh.checkRuns) {
      const title = c.output.title ?? '';
      if (checkTitles.get(c.id) !== title) {
        checkTitles.set(c.id, title);
        line('GitHub', `check on ${c.head_sha.slice(0, 7)}: "${title}"`);
      }
    }
  };
  const loop = (async () => {
    while (!stopped) {
      await tick().catch(() => undefined);
      await new Promise((r) => setTimeout(r, 200));
    }
    await tick().catch(() => undefined);
  })();
  return async () => {
    stopped = true;
    await loop;
  };
}

async function sparkctl(s: SparkSystem, token: string, argv: string[]): Promise<string> {
  const child = spawn(process.execPath, [join(REPO_ROOT, 'cli', 'bin.mjs'), ...argv], {
    env: { ...process.env, SPARK_URL: s.controllerUrl, SPARK_TOKEN: token, SPARKCTL_POLL_MS: '250' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (b: Buffer) => {
    out += b.toString();
    for (const l of b.toString().split('\n').filter(Boolean)) line('sparkctl', dim(l));
  });
  child.stderr.on('data', (b: Buffer) => {
    out += b.toString();
  });
  const code = await new Promise<number | null>((r) => child.once('exit', r));
  if (code !== 0) throw new Error(`sparkctl ${argv.join(' ')} exited ${code}: ${out.trim()}`);
  return out;
}

const fleetView = async (s: SparkSystem) =>
  (await s.api<FleetView>('GET', '/api/v1/fleet', undefined, null)).body;

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

  step('A developer reserves spark-1 with sparkctl: Deckard drained, lease granted');
  const dev = await s.api<{ token: string }>('POST', '/api/v1/tokens', {
    name: 'dev-laptop',
    scopes: ['develop'],
  });
  if (dev.status !== 201) throw new Error(`could not create a develop token: ${JSON.stringify(dev.body)}`);
  const out = await sparkctl(s, dev.body.token, ['reserve', '--host', 'spark-1', '--ttl', '1h', '--wait']);
  const r5 = /(r-\d+) is yours/.exec(out)?.[1];
  if (!r5) throw new Error(`sparkctl reserve did not hand over spark-1: ${out}`);
  if (s.deckard?.isRunning()) throw new Error('Deckard still runs on spark-1 during the development lease');
  line('story', `${r5}: spark-1 is the developer's; Deckard is stopped and the GPU verified free`);

  step('The developer releases it: cleanup confirmed, Deckard restored');
  await sparkctl(s, dev.body.token, ['release', r5]);
  await s.waitHostPhase('spark-1', ['service']);
  line('story', 'spark-1 serves Deckard again (model-ready health check passed)');
  return [r1, r2, r3, r4, r5];
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
  console.log(bold('Spark Controller demo'));
  console.log(
    dim('controller + 2 relay agents (simulated Spark hosts) + local fake GitHub, all on 127.0.0.1'),
  );
  starting = startSystem({
    plan: (j) => plans.get(j.headSha) ?? {},
    onNote: (n) => line('GitHub', dim(n)),
    signal: startup.signal,
  });
  sys = await starting;
  console.log(
    `\n  dashboard: ${bold(`${sys.controllerUrl}/`)}   (fleet JSON: ${sys.controllerUrl}/api/v1/fleet)`,
  );
  console.log(`  repository ${REPO} enabled; hosts adopted; agents heartbeating`);
  console.log(`  state (ledger, configs, logs): ${sys.dir}  (removed on exit)`);
  const stopTimeline = startTimeline(sys);
  let ids: string[];
  try {
    ids = await story(sys);
  } finally {
    await stopTimeline();
  }
  await summary(sys, ids);
  if (KEEP) {
    console.log(`\n${bold('Still running')} (--keep): open ${sys.controllerUrl}/ — Ctrl-C stops everything.`);
    return;
  }
  console.log(
    `\n${bold('Demo finished')} in ${((Date.now() - t0) / 1000).toFixed(1)} s; everything stopped and removed.`,
  );
  shutdown(0);
}

main().catch((e) => {
  if (startup.signal.aborted) return;
  console.error(`\ndemo failed: ${(e as Error).message}`);
  shutdown(1);
});
