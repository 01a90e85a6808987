import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { isLive, waitFor } from '../sim/harness/index.ts';
import {
  type Ctx,
  FAILURE_STORY_TIMINGS,
  type Note,
  queuedCheckSays,
  queuedCheckText,
  queuedCheckWhen,
  quote,
  sha,
  short,
} from './failure-context.ts';
import { fleetView, line, step } from './ui.ts';

/**
 * The failure story's chapters about the hosts and the controller: Deckard's restore failing, a
 * stale heartbeat, a lease expiring with processes present, and the controller going away
 * (failures.ts plays them in order).
 */

// ------------------------------------------------------------------ host failures

export async function hostFailures(ctx: Ctx, note: Note) {
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

export async function controllerUnavailable(ctx: Ctx, note: Note) {
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
