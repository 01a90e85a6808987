import { type ChildProcess, spawn } from 'node:child_process';
import { hostname } from 'node:os';
import { and, eq } from 'drizzle-orm';
import { describe, expect, it, type TestContext } from 'vitest';
import { githubService } from '../../functions/github/service.ts';
import * as t from '../../functions/ledger/schema.ts';
import { example, type Harness } from '../../scripts/sim/fake-github/harness.ts';
import { startHarnessFor } from '../fake-github/harness-for-test.ts';

/**
 * A controller process killed in the middle of a send leaves its claim on the outbox row for two
 * minutes (functions/github/outbox.ts), and while it lasts no later check-run update of that
 * reservation is sent. The next controller on the machine releases the claims of processes that
 * no longer exist (functions/process-identity.ts) and sends at once; a claim of a process that
 * still runs is left to its holder.
 */

const REPO = 'Codertocat/Hello-World';
const SHA = 'ec26c3e57ca3a959ca5aad62de7213c562f8c821';

/** A real process on this machine: `exited` has ended (its pid names nobody), `sleeping` runs. */
async function realProcess(ctx: TestContext, kind: 'exited' | 'sleeping'): Promise<number> {
  const child: ChildProcess = spawn('sleep', [kind === 'exited' ? '0' : '60'], { stdio: 'ignore' });
  ctx.onTestFinished(() => {
    child.kill('SIGKILL');
  });
  if (kind === 'exited') await new Promise((r) => child.once('exit', r));
  else await new Promise((r) => child.once('spawn', r));
  return child.pid!;
}

/** A queued reservation with its check on GitHub; hosts stay offline, so nothing is granted. */
async function queuedWithCheck(ctx: TestContext): Promise<Harness> {
  const h = await startHarnessFor(ctx);
  h.gh.addRepo(REPO, {
    installationId: 1,
    collaborators: { Codertocat: 'admin' },
    pulls: { 2: { state: 'open', headSha: SHA, headRepo: REPO, labels: ['spark-test'] } },
    headSha: 'b'.repeat(40),
  });
  for (const host of h.c.ledger.config.hosts) await h.c.ledger.setManaged(host.id, true, 'test');
  expect((await h.enable(REPO)).status).toBe(200);
  const p = example('pull_request', 'labeled');
  p.label.name = 'spark-test';
  p.pull_request.labels = [{ ...p.label }];
  expect((await (await h.deliver('pull_request', p)).json()).result).toBe('queued r-1');
  await h.until('the queued check', () =>
    h.gh.checkRuns.find((c) => c.external_id === 'r-1' && c.status === 'queued'),
  );
  await githubService(h.c.ctx).outbox.settle();
  return h;
}

/**
 * What a controller killed mid-send leaves: a pending check-run row of r-1 under its claim, then a
 * cancel that queues the next check-run update behind it.
 */
async function killedMidSend(h: Harness, workerId: string): Promise<void> {
  const now = h.clock();
  await h.c.ledger.db.insert(t.outbox).values({
    kind: 'check-run',
    idempotencyKey: 'check:r-1:killed',
    reservationId: 'r-1',
    payloadJson: JSON.stringify({ reservationId: 'r-1' }),
    nextAttemptAt: now,
    createdAt: now,
    claimedBy: workerId,
    claimedUntil: now + 120_000,
  });
  await h.c.ledger.cancelReservation('r-1', 'test', 'cancelled by requester');
}

const cancelledCheck = (h: Harness) =>
  h.gh.checkRuns.find((c) => c.external_id === 'r-1' && c.status === 'completed');

const killedRow = async (h: Harness) =>
  (
    await h.c.ledger.db
      .select()
      .from(t.outbox)
      .where(and(eq(t.outbox.idempotencyKey, 'check:r-1:killed')))
  )[0]!;

describe.concurrent('the outbox after a controller process is killed mid-send', () => {
  it('releases the claims of a process that no longer exists and sends at once', async (ctx) => {
    const h = await queuedWithCheck(ctx);
    const gone = `ctl-0dead-0001@${hostname()}:${await realProcess(ctx, 'exited')}`;
    await killedMidSend(h, gone);
    // the sender looks for gone processes at its first drain and every 5 s of the ledger's clock
    h.clock.advance(5_001);
    await githubService(h.c.ctx).outbox.drain();
    const check = await h.until('the cancelled check', () => cancelledCheck(h));
    expect(check.conclusion).toBe('cancelled');
    const row = await killedRow(h);
    expect(row.status).toBe('sent');
    expect(row.claimedBy).toBeNull();
    const events = await h.c.ledger.db
      .select()
      .from(t.events)
      .where(eq(t.events.type, 'outbox.claims_released'));
    expect(events.map((e) => [e.subjectId, JSON.parse(e.dataJson ?? '{}')])).toEqual([
      [gone, { workerId: gone, rows: 1 }],
    ]);
    expect(h.logs.join('\n')).toContain('released the claims of a controller process that is gone');
  });

  it('leaves the claim of a process that still runs until it expires', async (ctx) => {
    const h = await queuedWithCheck(ctx);
    const alive = `ctl-0a11-0001@${hostname()}:${await realProcess(ctx, 'sleeping')}`;
    await killedMidSend(h, alive);
    h.clock.advance(5_001);
    const svc = githubService(h.c.ctx);
    await svc.outbox.drain();
    // nothing of r-1 was sent: its claimed row holds the reservation's check-run updates back
    expect(cancelledCheck(h)).toBeUndefined();
    expect((await killedRow(h)).claimedBy).toBe(alive);
    // once the claim expires, the next drain sends both rows
    h.clock.advance(120_000);
    await svc.outbox.drain();
    const check = await h.until('the cancelled check', () => cancelledCheck(h));
    expect(check.conclusion).toBe('cancelled');
    expect((await killedRow(h)).status).toBe('sent');
    expect(
      await h.c.ledger.db.select().from(t.events).where(eq(t.events.type, 'outbox.claims_released')),
    ).toEqual([]);
  });
});
