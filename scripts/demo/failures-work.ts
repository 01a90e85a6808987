import { isLive, type JobPlan, type ReservationRow, waitFor } from '../sim/harness/index.ts';
import {
  type Ctx,
  checkText,
  checkWhen,
  FAILURE_STORY_TIMINGS,
  finalCheck,
  type Note,
  PASS_MS,
  quote,
  sha,
  short,
  snapshot,
} from './failure-context.ts';
import { line, step } from './ui.ts';

/**
 * The failure story's chapters about the work: cancellation and new commits, and a pair that loses
 * a node (failures.ts plays them in order).
 */

// ------------------------------------------------------------------ cancellation and new commits

export async function cancellationsAndPushes(ctx: Ctx, note: Note) {
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

export async function pairNodeLost(ctx: Ctx, note: Note) {
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
