import type { ChildProcess } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { z } from 'zod';
import type { QueueResponse } from '../../core/protocol/api.ts';
import {
  isLive,
  type JobPlan,
  queuedId,
  type ReservationRow,
  type SparkSystem,
  SYSTEM_ADMISSION_INTERVAL_MS,
  type SystemOptions,
  waitFor,
} from '../sim/harness/index.ts';
import { bold, dim, fleetView, green, line, printTable, red, sparkctl, step } from './ui.ts';

/**
 * `npm run demo -- --story failures`: every failure and cancellation behaviour
 * the seed names, played against the same simulated fleet as the demo (real controller and agent
 * processes, simulated GitHub). Each row's "observed" is read back from the running system — the
 * ledger (reservations, leases, hosts, event history), the check runs on the simulated GitHub, the
 * public fleet and queue views, the agents' output and the runner processes — and a row matches
 * only when those facts are what the seed says. Nothing here writes the ledger: the story acts
 * as GitHub, a maintainer, a developer or an operator would, or on the processes themselves.
 */

/** Short timings so the whole story takes a few minutes (seconds where production has minutes). */
export const FAILURE_STORY_TIMINGS = {
  offlineAfterS: 4,
  // a CI lease lives 10 s past its host's last heartbeat, so its expiry plays in seconds
  ciLeaseTtlS: 10,
  restoreRetries: 1,
  restoreHealthTimeoutS: 2,
} as const satisfies NonNullable<SystemOptions['timings']>;
/** The demo controller's admission pass interval (SPARK_ADMISSION_INTERVAL_MS, set by the harness). */
const PASS_MS = SYSTEM_ADMISSION_INTERVAL_MS;

type QueueView = z.infer<typeof QueueResponse>;

interface Row {
  behaviour: string;
  seed: string;
  observed: string | null;
  ok: boolean;
}

const ROWS = {
  controllerDown: {
    behaviour: 'controller unavailable',
    seed: 'fail closed: no new work starts; the active job finishes; nothing is lost once it is back',
  },
  stale: {
    behaviour: 'heartbeat stale',
    seed: 'the host is offline, never inferred idle, and is never granted',
  },
  leaseExpiry: {
    behaviour: 'lease expiry with processes present',
    seed: 'release-required: nothing killed, nothing admitted; freed only after the agent confirms termination',
  },
  pairLost: {
    behaviour: 'pair node lost',
    seed: 'within the offline threshold plus one pass the pair fails as a unit ("spark-1 lost contact during a pair run — pair failed as a unit"); the healthy runner is stopped, evidence kept; the dark node is release-required until its agent returns and confirms cleanup',
  },
  restoreFails: {
    behaviour: 'Deckard restore failing',
    seed: 'bounded retries, then spark-1 quarantined with an alert and kept out of CI until an operator clears it',
  },
  unlabelQueued: {
    behaviour: 'label removed while queued',
    seed: 'the queued request is cancelled; it never starts',
  },
  closeQueued: {
    behaviour: 'PR closed while queued',
    seed: 'the queued request is cancelled; it never starts',
  },
  unlabelActive: {
    behaviour: 'label removed while active',
    seed: 'cancels only queued work: the active run finishes and reports its result',
  },
  closeActive: {
    behaviour: 'PR closed while active',
    seed: 'cancels only queued work: the active run finishes and reports its result',
  },
  pushQueued: {
    behaviour: 'new SHA while queued',
    seed: 'the queued request for the old SHA is superseded; the new SHA is queued',
  },
  pushActive: {
    behaviour: 'new SHA while active',
    seed: 'the active run is untouched and keeps reporting the SHA it actually tested',
  },
} as const;
type RowKey = keyof typeof ROWS;

const sha = (pair: string) => pair.repeat(20);
const short = (s: string | null | undefined) => (s ?? '—').slice(0, 7);
const quote = (s: string | null | undefined) => (s == null ? 'none' : `"${s}"`);

/** Plans of the story's jobs by commit: a gate holds a job so the next part happens while it runs. */
export const failureStoryPlans = new Map<string, Partial<JobPlan>>();

/** The rows the failure story observed. */
export interface FailureStory {
  rows: Row[];
  /** Every row matched. */
  ok: boolean;
}

/** Plays every row; never throws for a behaviour that did not happen (that row just does not match). */
export async function playFailureStory(s: SparkSystem): Promise<FailureStory> {
  const rows = new Map<RowKey, Row>(
    (Object.keys(ROWS) as RowKey[]).map((k) => [k, { ...ROWS[k], observed: null, ok: false }]),
  );
  const note = (k: RowKey, observed: string, ok: boolean) => {
    const r = rows.get(k)!;
    r.observed = observed;
    r.ok = ok;
    line('observed', `${ok ? green('✓') : red('✗')} ${r.behaviour}: ${dim(observed)}`);
  };
  const sleepers: ChildProcess[] = [];
  const ctx = await storyContext(s, sleepers);
  const groups: [string, RowKey[], () => Promise<void>][] = [
    [
      'cancellation and new commits',
      ['unlabelQueued', 'closeQueued', 'pushQueued', 'unlabelActive', 'closeActive', 'pushActive'],
      () => cancellationsAndPushes(ctx, note),
    ],
    ['pair node lost', ['pairLost'], () => pairNodeLost(ctx, note)],
    // these three hand over state: spark-1 stays quarantined until the lease-expiry step clears it
    [
      'Deckard restore failing, heartbeat stale, lease expiry',
      ['restoreFails', 'stale', 'leaseExpiry'],
      () => hostFailures(ctx, note),
    ],
    ['controller unavailable', ['controllerDown'], () => controllerUnavailable(ctx, note)],
  ];
  let stopped: string | null = null;
  try {
    for (const [name, keys, play] of groups) {
      if (stopped) {
        for (const k of keys) note(k, `not played: ${stopped}`, false);
        continue;
      }
      try {
        await play();
      } catch (e) {
        const msg = (e as Error).message.split('\n')[0]!;
        for (const k of keys) if (rows.get(k)!.observed == null) note(k, `did not happen: ${msg}`, false);
        stopped = `the fleet did not recover after "${name}"`;
        console.error(`\n${red('story step failed')}: ${(e as Error).message}\n${await s.diagnostics()}`);
      }
    }
  } finally {
    for (const p of sleepers) p.kill('SIGKILL');
  }
  const list = [...rows.values()];
  return { rows: list, ok: list.every((r) => r.ok) };
}

/** Prints `behaviour | the seed says | observed | match` and the count. */
export function printFailureTable(story: FailureStory): void {
  console.log(`\n${bold('Failure and cancellation behaviour: the seed vs the running system')}`);
  printTable(
    ['behaviour', 'the seed says', 'observed', 'match'],
    story.rows.map((r) => [r.behaviour, r.seed, r.observed ?? 'not observed', r.ok ? 'yes' : 'NO']),
    [35, 48, 72, 5],
  );
  const n = story.rows.filter((r) => r.ok).length;
  console.log(`\n  ${n}/${story.rows.length} behaviours match the seed`);
}

// ------------------------------------------------------------------ shared

type Note = (k: RowKey, observed: string, ok: boolean) => void;

interface Ctx {
  s: SparkSystem;
  developToken: string;
  sleepers: ChildProcess[];
  nextPr(): number;
  /** Opens a PR at `headSha`, labels it and returns the queued reservation. */
  labelNew(headSha: string, label?: string, plan?: Partial<JobPlan>): Promise<{ n: number; rid: string }>;
  /** Waits until `done(row)` or `ms` passed, then returns the reservation as it is (never throws). */
  settle(rid: string, done: (r: ReservationRow) => boolean, ms: number): Promise<ReservationRow>;
  queueReason(rid: string, ms?: number): Promise<string | null>;
  /** Both hosts back at rest: spark-1 serving Deckard, spark-2 idle. */
  baseline(): Promise<void>;
  dispatched(rid: string): boolean;
  /** The host's STATE and NOTE columns in the operator's `sparkctl fleet` (the real CLI, as a child). */
  operatorView(host: string): Promise<{ state: string; note: string }>;
}

async function storyContext(s: SparkSystem, sleepers: ChildProcess[]): Promise<Ctx> {
  const dev = await s.api<{ token: string }>('POST', '/api/v1/tokens', {
    name: 'dev-laptop',
    scopes: ['develop'],
  });
  if (dev.status !== 201) throw new Error(`could not create a develop token: ${JSON.stringify(dev.body)}`);
  let pr = 100;
  const ctx: Ctx = {
    s,
    developToken: dev.body.token,
    sleepers,
    nextPr: () => ++pr,
    async labelNew(headSha, label = 'spark-test', plan) {
      const n = ++pr;
      if (plan) failureStoryPlans.set(headSha, plan);
      s.openPr(n, { sha: headSha });
      return { n, rid: queuedId(await s.label(n, label)) };
    },
    async settle(rid, done, ms) {
      await waitFor(
        `${rid} to settle`,
        async () => {
          const r = await s.reader.reservation(rid);
          return r && done(r);
        },
        ms,
        100,
      ).catch(() => undefined);
      return s.reservation(rid);
    },
    async queueReason(rid, ms = 20_000) {
      const item = await waitFor(
        `${rid} to show why it waits`,
        async () =>
          (await s.api<QueueView>('GET', '/api/v1/queue', undefined, null)).body.queued.find(
            (q) => q.id === rid && q.reason,
          ),
        ms,
        200,
      ).catch(() => null);
      return item?.reason ?? null;
    },
    async baseline() {
      await s.waitHostPhase('spark-1', ['service'], 90_000);
      await s.waitHostPhase('spark-2', ['idle'], 90_000);
    },
    dispatched: (rid) => s.gh.dispatches.some((d) => d.inputs.reservation_id === rid),
    async operatorView(host) {
      const out = await sparkctl(s, dev.body.token, ['fleet']).catch((e: Error) => e.message);
      const lines = out.split('\n');
      const head = lines.find((l) => l.startsWith('HOST '));
      const row = lines.find((l) => l.startsWith(`${host} `));
      if (!head || !row) return { state: 'not listed', note: lines[0] ?? '' };
      // columns are padded to the header's offsets (cli/format.ts table)
      const at = (name: string) => head.indexOf(name);
      return { state: row.slice(at('STATE'), at('ADOPTED')).trim(), note: row.slice(at('NOTE')).trim() };
    },
  };
  await ctx.baseline();
  return ctx;
}

/** What GitHub shows of a check run at this moment (the fake updates its objects in place). */
interface CheckSnapshot {
  title: string | null;
  status: string;
  conclusion: string | null;
  headSha: string;
  summary: string | null;
}
const snapshot = (c: ReturnType<SparkSystem['checkRun']>): CheckSnapshot | undefined =>
  c && {
    title: c.output.title,
    status: c.status,
    conclusion: c.conclusion ?? null,
    headSha: c.head_sha,
    summary: c.output.summary,
  };

/** The check run once GitHub shows it completed (or as it is after `ms`). */
async function finalCheck(s: SparkSystem, rid: string, ms = 30_000) {
  await waitFor(
    `the check of ${rid} to complete`,
    () => s.checkRun(rid)?.status === 'completed',
    ms,
    100,
  ).catch(() => undefined);
  return snapshot(s.checkRun(rid));
}

/** The check run once its title matches (or as it is after `ms`). */
async function checkWhen(s: SparkSystem, rid: string, title: RegExp, ms = 20_000) {
  await s.waitCheck(rid, title, ms).catch(() => undefined);
  return snapshot(s.checkRun(rid));
}

const checkText = (c: CheckSnapshot | undefined) =>
  c ? `check "${c.title}" (${c.conclusion ?? c.status})` : 'no check run';

/** The line of a queued check's summary that carries the start estimate (its title never does). */
const estimateOf = (c: CheckSnapshot | undefined) =>
  /^Estimate: ([^\n]*?)(?:, from the finished work[^\n]*)?$/m.exec(c?.summary ?? '')?.[1] ?? null;

/**
 * A queued check (title "Spark test queued — position N", as docs/github-app.md words it) once its estimate line
 * matches `estimate` (or as it is after `ms`).
 */
async function queuedCheckWhen(s: SparkSystem, rid: string, estimate: RegExp, ms = 20_000) {
  await waitFor(
    `the queued check of ${rid} to estimate ${String(estimate)}`,
    () => {
      const c = snapshot(s.checkRun(rid));
      return (
        /^Spark test queued( — position \d+)?$/.test(c?.title ?? '') && estimate.test(estimateOf(c) ?? '')
      );
    },
    ms,
    100,
  ).catch(() => undefined);
  return snapshot(s.checkRun(rid));
}

const queuedCheckText = (c: CheckSnapshot | undefined) =>
  c ? `${checkText(c)}, estimate ${quote(estimateOf(c))}` : 'no check run';

/** Whether a queued check keeps the seed's title and names `why` on its estimate line. */
const queuedCheckSays = (c: CheckSnapshot | undefined, why: string) =>
  /^Spark test queued( — position \d+)?$/.test(c?.title ?? '') && (estimateOf(c) ?? '').includes(why);

// ------------------------------------------------------------------ cancellation and new commits

async function cancellationsAndPushes(ctx: Ctx, note: Note) {
  const { s } = ctx;
  const hold: Partial<JobPlan> = { gates: ['work'] };
  step('Two PR tests hold both hosts (spark-2, then spark-1 lent by Deckard), so new requests queue');
  const a1 = sha('a1');
  const a2 = sha('a2');
  const b1 = sha('b1');
  const a = await ctx.labelNew(a1, 'spark-test', hold);
  const jobA = await s.waitJob(a.rid);
  const b = await ctx.labelNew(b1, 'spark-test', hold);
  const jobB = await s.waitJob(b.rid);
  await s.waitReservation(a.rid, ['running']);
  await s.waitReservation(b.rid, ['running']);
  line('story', `${a.rid} runs on ${jobA.hostId}, ${b.rid} on ${jobB.hostId}`);
  const isQueuedOnGitHub = /^Spark (test queued|\d+ draining)/;

  step('A maintainer removes the label from a queued request');
  const c = await ctx.labelNew(sha('c1'));
  await s.waitCheck(c.rid, isQueuedOnGitHub);
  const dc = await s.unlabel(c.n, 'spark-test');
  const rc = await ctx.settle(c.rid, (r) => r.status !== 'queued', 20_000);
  const cc = await finalCheck(s, c.rid);
  const neverRan = async (rid: string) =>
    (await s.leases(rid)).length === 0 &&
    !ctx.dispatched(rid) &&
    !s.jobs.some((j) => j.reservationId === rid);
  const cNever = await neverRan(c.rid);
  note(
    'unlabelQueued',
    `webhook → ${quote(dc.result)}; ${c.rid} ${rc.status}; ${checkText(cc)}; ${cNever ? 'never dispatched, no lease' : 'it reached a host'}`,
    rc.status === 'cancelled' && cc?.conclusion === 'cancelled' && cNever,
  );

  step('A queued PR is closed');
  const d = await ctx.labelNew(sha('d1'));
  await s.waitCheck(d.rid, isQueuedOnGitHub);
  const dd = await s.closePr(d.n);
  const rd = await ctx.settle(d.rid, (r) => r.status !== 'queued', 20_000);
  const cd = await finalCheck(s, d.rid);
  const dNever = await neverRan(d.rid);
  note(
    'closeQueued',
    `webhook → ${quote(dd.result)}; ${d.rid} ${rd.status}; ${checkText(cd)}; ${dNever ? 'never dispatched, no lease' : 'it reached a host'}`,
    rd.status === 'cancelled' && cd?.conclusion === 'cancelled' && dNever,
  );

  step('A new commit is pushed to a PR whose request is queued');
  const e1 = sha('e1');
  const e2 = sha('e2');
  const e = await ctx.labelNew(e1);
  await s.waitCheck(e.rid, isQueuedOnGitHub);
  const de = await s.push(e.n, e2);
  const re = await ctx.settle(e.rid, (r) => r.status !== 'queued', 20_000);
  const ce = await finalCheck(s, e.rid);
  const newE = /queued (r-\d+)/.exec(de.result ?? '')?.[1] ?? null;
  const re2 = newE ? await s.reservation(newE) : null;
  const eNever = await neverRan(e.rid);
  note(
    'pushQueued',
    `webhook → ${quote(de.result)}; ${e.rid} (${short(re.headSha)}) ${re.status}; ${checkText(ce)} on ${short(ce?.headSha)}; ${newE ? `${newE} ${re2?.status} for ${short(re2?.headSha)}` : 'nothing queued for the new SHA'}`,
    re.status === 'superseded' &&
      re.headSha === e1 &&
      ce?.headSha === e1 &&
      eNever &&
      re2?.headSha === e2 &&
      re2.status === 'queued',
  );

  step(`A new commit is pushed to ${a.rid}'s PR while it runs`);
  const pa = await s.push(a.n, a2);
  const raWhile = await s.reservation(a.rid);
  line('story', `${a.rid} is ${raWhile.status} at ${short(raWhile.headSha)} after the push`);

  step(`The label is removed from ${a.rid}'s PR and ${b.rid}'s PR is closed, both while they run`);
  const ua = await s.unlabel(a.n, 'spark-test');
  const cb = await s.closePr(b.n);
  const aWhile = (await s.reservation(a.rid)).status;
  const bWhile = (await s.reservation(b.rid)).status;

  step('Both runs finish; the new commit of the queued PR runs next');
  s.openGate(a.rid, 'work');
  s.openGate(b.rid, 'work');
  const ra = await ctx.settle(a.rid, (r) => r.status === 'done' || r.status === 'failed', 60_000);
  const rb = await ctx.settle(b.rid, (r) => r.status === 'done' || r.status === 'failed', 60_000);
  const ca = await finalCheck(s, a.rid);
  const cbk = await finalCheck(s, b.rid);
  const noted = async (rid: string) =>
    (await s.history(rid)).some((h) => h.type === 'reservation.unwanted_while_active');
  const aNoted = await noted(a.rid);
  const bNoted = await noted(b.rid);
  const finished = (r: ReservationRow) => `${r.status} (${r.outcome ?? '—'})`;
  note(
    'unlabelActive',
    `webhook → ${quote(ua.result)}; ${a.rid} still ${aWhile}, then ${finished(ra)}; ${checkText(ca)}; ${aNoted ? 'event reservation.unwanted_while_active' : 'no event recorded'}`,
    aWhile === 'running' &&
      ra.status === 'done' &&
      ra.outcome === 'passed' &&
      ca?.conclusion === 'success' &&
      (ua.result ?? '').includes(`kept active ${a.rid}`) &&
      aNoted,
  );
  note(
    'closeActive',
    `webhook → ${quote(cb.result)}; ${b.rid} still ${bWhile}, then ${finished(rb)}; ${checkText(cbk)}; ${bNoted ? 'event reservation.unwanted_while_active' : 'no event recorded'}`,
    bWhile === 'running' &&
      rb.status === 'done' &&
      rb.outcome === 'passed' &&
      cbk?.conclusion === 'success' &&
      (cb.result ?? '').includes(`kept active ${b.rid}`) &&
      bNoted,
  );
  const testedA = s.jobs.filter((j) => j.reservationId === a.rid).map((j) => short(j.headSha));
  const receiptSha = ra.receiptJson
    ? (Object.values(JSON.parse(ra.receiptJson).byHost ?? {}) as { headSha?: string }[])[0]?.headSha
    : undefined;
  note(
    'pushActive',
    `webhook → ${quote(pa.result)}; ${a.rid} stayed ${raWhile.status} at ${short(raWhile.headSha)}; its job tested ${testedA.join(', ') || 'nothing'}, receipt for ${short(receiptSha)}; ${checkText(ca)} on ${short(ca?.headSha)}`,
    raWhile.status === 'running' &&
      raWhile.headSha === a1 &&
      ra.headSha === a1 &&
      testedA.length > 0 &&
      testedA.every((t) => t === short(a1)) &&
      receiptSha === a1 &&
      ca?.headSha === a1 &&
      ca.conclusion === 'success',
  );
  // the pushed commit of the queued PR runs once the hosts are free
  if (newE) await ctx.settle(newE, (r) => r.status === 'done' || r.status === 'failed', 60_000);
  await ctx.baseline();
}

// ------------------------------------------------------------------ pair node lost

async function pairNodeLost(ctx: Ctx, note: Note) {
  const { s } = ctx;
  step('A pair test runs on both hosts; spark-1 goes dark (its agent frozen with SIGSTOP)');
  const p = await ctx.labelNew(sha('f1'), 'spark-pair-test', { gates: ['work'] });
  const dark = await s.waitJob(p.rid, 'spark-1');
  const healthy = await s.waitJob(p.rid, 'spark-2');
  await s.waitReservation(p.rid, ['running']);
  const agent = s.agents['spark-1']!;
  process.kill(agent.proc.pid!, 'SIGSTOP');
  let resumed = false;
  const resume = () => {
    if (resumed) return;
    resumed = true;
    process.kill(agent.proc.pid!, 'SIGCONT');
  };
  try {
    const lost = await ctx.settle(p.rid, (r) => r.status !== 'running', 30_000);
    const atLoss = await checkWhen(s, p.rid, /lost contact/, 10_000);
    const darkPhase = (await s.host('spark-1')).phase;
    const darkOperator = await ctx.operatorView('spark-1');
    const lastHeartbeat = (await s.host('spark-1')).lastHeartbeatAt ?? 0;
    const alert = (await s.reader.history(p.rid)).find((e) => e.type === 'alert.pair_node_lost');
    const tookMs = alert ? alert.at - lastHeartbeat : null;
    await s.waitHostPhase('spark-2', ['idle'], 30_000).catch(() => undefined);
    const hLease = (await s.leases(p.rid)).find((l) => l.hostId === 'spark-2');
    const evidence = hLease?.evidenceJson != null;
    const healthyStopped = !isLive(healthy.pid);
    const darkRunnerAlive = isLive(dark.pid);
    const stillReleasing = (await s.reservation(p.rid)).status;
    line('story', `spark-1's agent comes back (SIGCONT)`);
    resume();
    const ended = await ctx.settle(p.rid, (r) => r.status === 'failed' || r.status === 'done', 60_000);
    await s.waitHostPhase('spark-1', ['service'], 60_000).catch(() => undefined);
    const darkAfter = (await s.host('spark-1')).phase;
    const darkRunnerAfter = isLive(dark.pid);
    await waitFor(
      'the final check',
      () => !s.checkRun(p.rid)?.output.summary?.includes('Hosts are being cleaned and released'),
      30_000,
      100,
    ).catch(() => undefined);
    const final = snapshot(s.checkRun(p.rid));
    const bound = FAILURE_STORY_TIMINGS.offlineAfterS * 1000 + PASS_MS;
    note(
      'pairLost',
      `${p.rid} ${lost.status} (${lost.outcome ?? '—'}) ${tookMs == null ? '(no alert.pair_node_lost)' : `${(tookMs / 1000).toFixed(1)} s after spark-1's last heartbeat (threshold + pass: ${bound / 1000} s)`}; ${checkText(atLoss)}; spark-2 runner ${healthyStopped ? 'stopped' : 'still running'}, lease ${hLease?.status ?? '—'} ${evidence ? 'with evidence' : 'without evidence'}; spark-1 ${darkPhase} (sparkctl fleet: ${darkOperator.state}, ${quote(darkOperator.note)}), its runner ${darkRunnerAlive ? 'untouched' : 'gone'} while dark (reservation ${stillReleasing}); agent back → runner stopped: ${darkRunnerAfter ? 'no' : 'yes'}, ${ended.status}, spark-1 ${darkAfter}; final ${checkText(final)}`,
      lost.outcome === 'pair_node_lost' &&
        tookMs != null &&
        // the ledger's own clock; one extra second for the pass's work on a loaded machine
        tookMs <= bound + 1000 &&
        atLoss?.conclusion === 'failure' &&
        atLoss.title === 'Spark 1 lost contact during a pair run — pair failed as a unit' &&
        darkPhase === 'release-required' &&
        // the fleet view derives offline from the stale heartbeat first; the note says why it waits
        (darkOperator.state === 'release-required' || darkOperator.state === 'offline') &&
        darkOperator.note.startsWith('release-required') &&
        healthyStopped &&
        hLease?.status === 'released' &&
        evidence &&
        darkRunnerAlive &&
        stillReleasing === 'releasing' &&
        ended.status === 'failed' &&
        !darkRunnerAfter &&
        darkAfter === 'service' &&
        final?.title === atLoss.title,
    );
  } finally {
    resume();
  }
  await ctx.baseline();
}

// ------------------------------------------------------------------ host failures

async function hostFailures(ctx: Ctx, note: Note) {
  const { s } = ctx;
  const deckard = s.deckard!;
  const retries = FAILURE_STORY_TIMINGS.restoreRetries;

  step("Deckard on spark-1 stops by itself while its start is broken; the agent's restarts fail");
  const starts = () => deckard.ctlLog().filter((c) => c === 'start').length;
  const startsBefore = starts();
  writeFileSync(join(deckard.dir, 'start-fails'), 'deckard: model load failed: CUDA error: out of memory');
  // outside any lease the agent restarts a stopped Deckard through the restore path (ADR 0175)
  deckard.kill();
  await s.waitHostPhase('spark-1', ['quarantined'], 60_000).catch(() => undefined);
  const q1 = (await fleetView(s)).hosts.find((h) => h.id === 'spark-1');
  const attempts = starts() - startsBefore;
  const alert = (await s.history('spark-1')).find((e) => e.type === 'alert.restore_failed');
  const quarantinedOperator = await ctx.operatorView('spark-1');
  step('While spark-1 is quarantined a pair test is labeled: it cannot be admitted');
  const pair = await ctx.labelNew(sha('a3'), 'spark-pair-test');
  const pairWhy = await ctx.queueReason(pair.rid);
  const pairCheck = await queuedCheckWhen(s, pair.rid, /spark-1 quarantined/);
  const pairStatus = (await s.reservation(pair.rid)).status;
  const pairLeases = (await s.leases(pair.rid)).length;
  await s.unlabel(pair.n, 'spark-pair-test');
  const restoreSeen = `spark-1 ${q1?.state ?? '—'} (sparkctl fleet: ${quarantinedOperator.state}; note ${quote(q1?.note)}) after ${attempts} Deckard starts (1 + ${retries} retry); alert ${quote(alert?.cause)}; a pair request stayed ${pairStatus} with ${pairLeases} leases: ${quote(pairWhy)}, ${queuedCheckText(pairCheck)}`;
  const restoreOk =
    q1?.state === 'quarantined' &&
    quarantinedOperator.state === 'quarantined' &&
    attempts === 1 + retries &&
    alert != null &&
    pairStatus === 'queued' &&
    pairLeases === 0 &&
    pairWhy != null &&
    queuedCheckSays(pairCheck, 'spark-1 quarantined');

  step("Heartbeat stale: spark-2's agent dies; a PR test is labeled");
  await s.agents['spark-2']!.stop('SIGKILL');
  const offline = await waitFor(
    'spark-2 to show offline',
    async () => {
      const h = (await fleetView(s)).hosts.find((x) => x.id === 'spark-2');
      // never inferred idle: any state other than its last one means the stale heartbeat was read
      return h && h.state !== 'idle' ? h : null;
    },
    30_000,
    200,
  ).catch(() => null);
  const staleOperator = await ctx.operatorView('spark-2');
  const t = await ctx.labelNew(sha('b3'));
  const staleWhy = await ctx.queueReason(t.rid);
  const staleCheck = await queuedCheckWhen(s, t.rid, /spark-2 offline/);
  const staleLeases = (await s.leases(t.rid)).length;
  const stillOffline = (await fleetView(s)).hosts.find((x) => x.id === 'spark-2')?.state;
  line('story', "spark-2's agent starts again");
  s.startAgent('spark-2');
  const ran = await ctx.settle(t.rid, (r) => r.status === 'done' || r.status === 'failed', 60_000);
  const ranOn = (await s.leases(t.rid)).map((l) => l.hostId).join('+') || 'no host';
  note(
    'stale',
    `spark-2 ${offline?.state ?? 'never left idle'} ${offline?.lastHeartbeatAgeS != null ? `(last heartbeat ${offline.lastHeartbeatAgeS} s ago)` : ''} (sparkctl fleet: ${staleOperator.state}); ${t.rid} stayed queued with ${staleLeases} leases: ${quote(staleWhy)}, ${queuedCheckText(staleCheck)} (spark-2 still ${stillOffline}); agent back → ${ran.status} (${ran.outcome ?? '—'}) on ${ranOn}`,
    offline?.state === 'offline' &&
      staleOperator.state === 'offline' &&
      // the maintainer's check names the host and why, not "install an agent"
      queuedCheckSays(staleCheck, 'spark-2 offline') &&
      stillOffline === 'offline' &&
      staleLeases === 0 &&
      staleWhy != null &&
      ran.status === 'done' &&
      ranOn === 'spark-2',
  );

  // a development lease needs a dstack host (docs/adr/0176-development-needs-dstack.md), which
  // this simulated fleet does not run: a PR test's lease plays the rule instead
  step("A PR test's lease on spark-2 expires while its job still holds the GPU (its agent gone)");
  await s.waitHostPhase('spark-2', ['idle']);
  const held = await ctx.labelNew(sha('c2'), 'spark-test', { gates: ['exit'] });
  const job = await s.waitJob(held.rid);
  s.gpu['spark-2']!.setProcesses([{ pid: job.pid, name: 'python train.py', usedMemoryMiB: 20480 }]);
  await waitFor(
    'a heartbeat with the job on the GPU',
    async () => (await fleetView(s)).hosts.find((h) => h.id === 'spark-2')?.gpuProcessCount === 1,
    20_000,
    200,
  ).catch(() => undefined);
  await s.agents['spark-2']!.stop('SIGKILL');
  await s.waitHostPhase('spark-2', ['release-required'], 60_000).catch(() => undefined);
  const phase = (await s.host('spark-2')).phase;
  const cause = [...(await s.history('spark-2'))]
    .reverse()
    .find((e) => e.cause?.startsWith('lease expired'))?.cause;
  line('story', "spark-2's agent starts again; the job still holds the GPU");
  s.startAgent('spark-2');
  const expiredOperator = await ctx.operatorView('spark-2');
  const ci = await ctx.labelNew(sha('c3'));
  const ciWhy = await ctx.queueReason(ci.rid);
  const ciCheck = await queuedCheckWhen(s, ci.rid, /spark-2 release-required/);
  const ciLeases = (await s.leases(ci.rid)).length;
  const jobAlive = isLive(job.pid);
  const heldWhile = (await s.reservation(held.rid)).status;
  const leaseWhile = (await s.leases(held.rid))[0]?.status;
  line('story', 'the job ends by itself; the agent sees the GPU free');
  s.gpu['spark-2']!.setProcesses([]);
  s.openGate(held.rid, 'exit');
  const heldEnd = await ctx.settle(held.rid, (r) => r.status === 'done' || r.status === 'failed', 60_000);
  const ciEnd = await ctx.settle(ci.rid, (r) => r.status === 'done' || r.status === 'failed', 60_000);
  note(
    'leaseExpiry',
    `spark-2 ${phase} (sparkctl fleet: ${expiredOperator.state}; ${quote(cause)}); its job ${jobAlive ? 'still running' : 'killed'}; ${held.rid} ${heldWhile}, lease ${leaseWhile}; ${ci.rid} queued with ${ciLeases} leases: ${quote(ciWhy)}, ${queuedCheckText(ciCheck)}; job ended → ${held.rid} ${heldEnd.status}, ${ci.rid} ${ciEnd.status} (${ciEnd.outcome ?? '—'})`,
    phase === 'release-required' &&
      expiredOperator.state === 'release-required' &&
      queuedCheckSays(ciCheck, 'spark-2 release-required') &&
      jobAlive &&
      heldWhile === 'running' &&
      leaseWhile !== 'released' &&
      ciLeases === 0 &&
      ciWhy != null &&
      heldEnd.status === 'done' &&
      ciEnd.status === 'done' &&
      ciEnd.outcome === 'passed',
  );

  step('An operator fixes Deckard and clears the quarantine');
  rmSync(join(deckard.dir, 'start-fails'));
  const cleared = await s.api('POST', '/api/v1/hosts/spark-1/clear-quarantine');
  await s.waitHostPhase('spark-1', ['service'], 60_000).catch(() => undefined);
  const back = (await s.host('spark-1')).phase;
  note(
    'restoreFails',
    `${restoreSeen}; operator clear-quarantine (${cleared.status}) → spark-1 ${back}`,
    restoreOk && cleared.status === 200 && back === 'service',
  );
  await ctx.baseline();
}

// ------------------------------------------------------------------ controller unavailable

async function controllerUnavailable(ctx: Ctx, note: Note) {
  const { s } = ctx;
  step('A job has reported its result; then the controller dies while the runner finishes');
  const r = await ctx.labelNew(sha('d3'), 'spark-test', { gates: ['exit'] });
  const job = await s.waitJob(r.rid);
  await waitFor('the job result on GitHub', () => job.conclusion != null, 60_000);
  // the controller has taken the result in (the check says so) before it goes away
  await s.waitCheck(r.rid, /^Spark test (passed|failed)/);
  const agentsOut = Object.fromEntries(Object.entries(s.agents).map(([id, a]) => [id, a.output().length]));
  await s.stopController('SIGKILL');
  s.openGate(r.rid, 'exit');
  const finished = await waitFor(
    'the runner to finish without the controller',
    () => !isLive(job.pid),
    30_000,
  )
    .then(() => true)
    .catch(() => false);
  step('A maintainer labels another PR meanwhile: GitHub cannot deliver it');
  const n = ctx.nextPr();
  s.openPr(n, { sha: sha('e3') });
  const missed = await s.label(n, 'spark-test');
  const jobsBefore = s.jobs.length;
  const said = await waitFor(
    'an agent to notice',
    () =>
      Object.entries(s.agents).find(([id, a]) =>
        a
          .output()
          .slice(agentsOut[id] ?? 0)
          .includes('controller unreachable; starting nothing new'),
      )?.[0],
    30_000,
    200,
  ).catch(() => null);
  const jobsWhileDown = s.jobs.length - jobsBefore;
  step('The controller comes back and asks GitHub to redeliver the webhook it missed');
  await s.startController();
  const ended = await ctx.settle(r.rid, (x) => x.status === 'done' || x.status === 'failed', 60_000);
  // GitHub never redelivers by itself: the controller's sweep of the App's delivery log asks for
  // the missed label (ADR 0091), which GitHub sends again with the same GUID
  const again = await waitFor(
    'the missed label redelivered',
    () => s.deliveries.find((d) => d.id === missed.id && d.status >= 200 && d.status < 300),
    60_000,
  ).catch(() => undefined);
  const next = again ? /queued (r-\d+)/.exec(again.result ?? '')?.[1] : undefined;
  const nextEnd = next
    ? await ctx.settle(next, (x) => x.status === 'done' || x.status === 'failed', 60_000)
    : null;
  note(
    'controllerDown',
    `while down: runner ${finished ? 'finished its job' : 'did not finish'}, label delivery ${missed.status === 0 ? 'refused (GitHub shows it failed)' : `answered ${missed.status}`}, ${said ? `${said}'s agent: "controller unreachable; starting nothing new"` : 'no agent said it starts nothing'}, ${jobsWhileDown} jobs started; back: ${r.rid} ${ended.status} (${ended.outcome ?? '—'}) at ${short(ended.headSha)}, redelivered label → ${next ? `${next} ${nextEnd?.status} (${nextEnd?.outcome ?? '—'})` : quote(again?.result)}`,
    finished &&
      missed.status === 0 &&
      said != null &&
      jobsWhileDown === 0 &&
      ended.status === 'done' &&
      ended.outcome === 'passed' &&
      nextEnd?.status === 'done' &&
      nextEnd.outcome === 'passed',
  );
  await ctx.baseline();
}
