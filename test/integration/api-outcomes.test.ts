import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ReservationInfo } from '../../core/protocol/api.ts';
import { loadDashboardData } from '../../functions/dashboard/index.ts';
import { example, type Harness, labelObject, startHarness } from '../../scripts/sim/fake-github/harness.ts';
import { adoptAll } from '../../scripts/sim/ledger.ts';

/**
 * a reservation that ended before it ran reports how it ended — everywhere a
 * person looks (the API behind `sparkctl status` and MCP, the check run on the PR, the
 * dashboard and public queue) — and never the last wait code it had while queued (before:
 * `cancelled (held-for-pair)`).
 */

const REPO = 'Codertocat/Hello-World';
const SHA = 'ec26c3e57ca3a959ca5aad62de7213c562f8c821';
const WAIT_CODES = /hosts-busy|held-for-pair|budget-|target-unavailable|pool-too-small/;

function labeled(label: string, pr: number, sha: string) {
  const p = example('pull_request', 'labeled');
  p.label.name = label;
  p.repository.full_name = REPO;
  p.number = pr;
  p.pull_request.number = pr;
  p.pull_request.head.sha = sha;
  p.pull_request.head.repo.full_name = REPO;
  p.pull_request.base.repo.full_name = REPO;
  p.pull_request.labels = [{ ...p.label }];
  p.sender.login = 'Codertocat';
  return p;
}

describe('a reservation that ended while queued reports its outcome, never its wait code', () => {
  let h: Harness;
  let token: string;
  beforeEach(async () => {
    h = await startHarness();
    h.gh.addRepo(REPO, {
      installationId: 1,
      collaborators: { Codertocat: 'admin', outsider: 'triage' },
      pulls: {
        2: { state: 'open', headSha: SHA, headRepo: REPO, labels: ['spark-test'] },
        3: { state: 'open', headSha: 'c'.repeat(40), headRepo: REPO, labels: ['spark-pair-test'] },
        4: { state: 'open', headSha: 'd'.repeat(40), headRepo: REPO, labels: ['spark-test'] },
      },
    });
    // hosts are adopted by the tests that need grants: the harness overrides the fleet checks here
    expect((await h.enable(REPO, { pairEnabled: true })).status).toBe(200);
    token = await h.operatorToken();
  });
  afterEach(async () => {
    expect(h.gh.violations).toEqual([]);
    await h.close();
  });

  const api = async (path: string, method = 'GET', body?: unknown) => {
    const res = await fetch(`${h.c.url}/api/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    return { status: res.status, body: (await res.json()) as { reservation: ReservationInfo } };
  };
  const waitCode = async (id: string) =>
    (
      await h.c.ledger.store.client.execute({
        sql: 'SELECT wait_code FROM reservations WHERE id = ?',
        args: [id],
      })
    ).rows[0]?.wait_code as string | null;
  const lastCheck = (id: string) => h.gh.checkRuns.filter((c) => c.external_id === id).at(-1);
  /** What the control room and the public queue show for `id`. */
  async function publicViews(id: string) {
    const dash = await loadDashboardData(h.c.ledger, h.c.ctx.services.views, 200);
    const queue = (await (await fetch(`${h.c.url}/api/v1/queue`)).json()) as {
      queued: { id: string }[];
      active: { id: string }[];
    };
    return {
      listed: [...dash.queue.queued, ...dash.queue.active, ...queue.queued, ...queue.active].some(
        (q) => q.id === id,
      ),
      events: dash.events.filter((e) => JSON.stringify(e).includes(id)),
    };
  }

  it('cancelled while waiting behind a pair: outcome `cancelled` in the API, the check run and the dashboard', async () => {
    await adoptAll(h.c.ledger);
    // r-1 takes spark-2; the pair r-2 heads the queue and keeps spark-1; r-3 waits behind it
    expect((await (await h.deliver('pull_request', labeled('spark-test', 2, SHA))).json()).result).toBe(
      'queued r-1',
    );
    await h.until(
      'r-1 granted',
      async () => (await h.c.ledger.getReservation(undefined, 'r-1'))?.status === 'allocated',
    );
    const pair = await h.deliver('pull_request', labeled('spark-pair-test', 3, 'c'.repeat(40)));
    expect((await pair.json()).result).toBe('queued r-2');
    const single = await h.deliver('pull_request', labeled('spark-test', 4, 'd'.repeat(40)));
    expect((await single.json()).result).toBe('queued r-3');
    await h.c.loop.runNow();
    // this code once became the outcome: `cancelled (hosts-busy)`
    expect(await waitCode('r-3')).toMatch(WAIT_CODES);

    const cancelled = await api('/reservations/r-3/cancel', 'POST');
    expect(cancelled.status).toBe(200);
    expect(cancelled.body.reservation).toMatchObject({
      status: 'cancelled',
      outcome: 'cancelled',
      position: null,
    });
    const got = (await api('/reservations/r-3')).body.reservation;
    expect(got).toMatchObject({ status: 'cancelled', outcome: 'cancelled' });
    expect(JSON.stringify(got)).not.toMatch(WAIT_CODES);
    expect(await waitCode('r-3')).toBeNull();

    const check = await h.until('cancelled check run for r-3', () => {
      const c = lastCheck('r-3');
      return c?.conclusion === 'cancelled' ? c : null;
    });
    expect(check.output.title).toBe('Spark test cancelled — never started');
    expect(check.output.summary).toMatch(/^Cancelled while queued: cancelled by api:test-operator/);
    expect(`${check.output.title} ${check.output.summary}`).not.toMatch(WAIT_CODES);

    const views = await publicViews('r-3');
    expect(views.listed).toBe(false);
    expect(views.events.at(0)).toMatchObject({ type: 'reservation.cancelled', toState: 'cancelled' });
  });

  it('superseded by a push: outcome `superseded` in the API, the check run and the dashboard', async () => {
    expect((await (await h.deliver('pull_request', labeled('spark-test', 2, SHA))).json()).result).toBe(
      'queued r-1',
    );
    await h.c.loop.runNow();
    expect(await waitCode('r-1')).toMatch(WAIT_CODES);
    const push = example('pull_request', 'synchronize');
    push.repository.full_name = REPO;
    push.number = 2;
    push.pull_request.number = 2;
    push.pull_request.head.sha = '1'.repeat(40);
    push.pull_request.head.repo.full_name = REPO;
    push.pull_request.base.repo.full_name = REPO;
    push.pull_request.labels = [labelObject(REPO, 'spark-test', 1)];
    push.sender.login = 'outsider'; // not authorized: nothing is queued for the new SHA
    expect((await (await h.deliver('pull_request', push)).json()).result).toBe(
      'superseded r-1, not requeued (sender not authorized)',
    );

    const got = (await api('/reservations/r-1')).body.reservation;
    expect(got).toMatchObject({ status: 'superseded', outcome: 'superseded', position: null });
    expect(JSON.stringify(got)).not.toMatch(WAIT_CODES);
    const check = await h.until('superseded check run', () => {
      const c = lastCheck('r-1');
      return c?.conclusion === 'neutral' ? c : null;
    });
    expect(check.output.title).toBe(`Spark test superseded — ${SHA.slice(0, 7)} is no longer the PR head`);
    expect(check.output.summary).toMatch(/^Superseded while queued: new commit 1111111 pushed by @outsider/);
    expect(`${check.output.title} ${check.output.summary}`).not.toMatch(WAIT_CODES);
    const views = await publicViews('r-1');
    expect(views.listed).toBe(false);
    expect(views.events.at(0)).toMatchObject({ type: 'reservation.superseded', toState: 'superseded' });
  });

  it('timed out in the queue: outcome `queue_timeout` in the API, the check run and the dashboard', async () => {
    expect((await (await h.deliver('pull_request', labeled('spark-test', 2, SHA))).json()).result).toBe(
      'queued r-1',
    );
    await h.c.loop.runNow();
    expect(await waitCode('r-1')).toMatch(WAIT_CODES);
    h.clock.advance(6 * 3600 * 1000 + 1000);
    await h.c.loop.runNow();

    const got = (await api('/reservations/r-1')).body.reservation;
    expect(got).toMatchObject({ status: 'failed', outcome: 'queue_timeout', position: null });
    expect(got.reason).toMatch(/^queue timeout: waited 360 min \(limit 360 min\); last reason: /);
    expect(await waitCode('r-1')).toBeNull();
    const check = await h.until('timed-out check run', () => {
      const c = lastCheck('r-1');
      return c?.conclusion === 'timed_out' ? c : null;
    });
    expect(check.output.title).toBe('Spark test timed out in the queue');
    const views = await publicViews('r-1');
    expect(views.listed).toBe(false);
    expect(views.events.at(0)).toMatchObject({ type: 'reservation.failed', toState: 'failed' });
  });

  it('refused: no reservation at all, a refusal check run that is not the result check, nothing queued', async () => {
    const p = labeled('spark-test', 2, SHA);
    p.sender.login = 'outsider';
    const res = (await (await h.deliver('pull_request', p)).json()) as { result: string };
    expect(res.result).toMatch(/^refused: @outsider holds triage/);
    const check = await h.until('refusal check', () =>
      h.gh.checkRuns.find((c) => c.conclusion === 'neutral'),
    );
    expect(check.output.title).toMatch(/^Spark test refused — @outsider holds triage/);
    // docs/architecture.md: a refusal never reuses the result check's identity (external_id is the delivery)
    expect(check.external_id).toMatch(/^refusal:/);
    const list = (await fetch(`${h.c.url}/api/v1/reservations?status=all`, {
      headers: { authorization: `Bearer ${token}` },
    }).then((r) => r.json())) as { reservations: unknown[] };
    expect(list.reservations).toEqual([]);
    const dash = await loadDashboardData(h.c.ledger, h.c.ctx.services.views, 200);
    expect([...dash.queue.queued, ...dash.queue.active]).toEqual([]);
  });
});
