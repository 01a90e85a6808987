import { verify } from '@octokit/webhooks-methods';
import { eq, sql } from 'drizzle-orm';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { githubService } from '../../functions/github/service.ts';
import { pruneDeliveries } from '../../functions/github/sweeps.ts';
import { DELIVERY_RETENTION_MS } from '../../functions/ledger/outbox.ts';
import * as t from '../../functions/ledger/schema.ts';
import { example, type Harness, startHarness } from '../../scripts/sim/fake-github/harness.ts';

const REPO = 'Codertocat/Hello-World';

function labeled(
  label: string,
  over: { sender?: string; sha?: string; number?: number; headRepo?: string | null } = {},
) {
  const p = example('pull_request', 'labeled');
  p.label.name = label;
  if (over.sender) p.sender.login = over.sender;
  if (over.sha) p.pull_request.head.sha = over.sha;
  if (over.number) {
    p.number = over.number;
    p.pull_request.number = over.number;
  }
  if (over.headRepo !== undefined)
    p.pull_request.head.repo =
      over.headRepo === null ? null : { ...p.pull_request.head.repo, full_name: over.headRepo };
  p.pull_request.labels = [{ ...p.label }];
  return p;
}

async function count(h: Harness, table: 'reservations' | 'webhook_deliveries' | 'outbox' | 'events') {
  const rows = await h.c.ledger.db.all<{ n: number }>(sql.raw(`SELECT count(*) AS n FROM ${table}`));
  return rows[0]!.n;
}

describe('GitHub webhook endpoint', () => {
  let h: Harness;
  beforeEach(async () => {
    h = await startHarness();
    const ex = example('pull_request', 'labeled');
    h.gh.addRepo(REPO, {
      installationId: ex.installation.id,
      collaborators: { Codertocat: 'maintain', outsider: 'write' },
    });
    // the rollout gate wants every host adopted; without heartbeats they stay offline (no grants)
    for (const host of h.c.ledger.config.hosts) await h.c.ledger.setManaged(host.id, true, 'test');
    expect((await h.enable(REPO)).status).toBe(200);
  });
  afterEach(async () => {
    expect(h.gh.violations).toEqual([]);
    await h.close();
  });

  it("verifies GitHub's published test vector", async () => {
    // https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries#testing-the-webhook-payload-validation
    expect(
      await verify(
        "It's a Secret to Everybody",
        'Hello, World!',
        'sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17',
      ),
    ).toBe(true);
  });

  it('rejects bad, missing and wrong-length signatures with 401 and writes nothing', async () => {
    const before = {
      d: await count(h, 'webhook_deliveries'),
      r: await count(h, 'reservations'),
      e: await count(h, 'events'),
    };
    const p = labeled('spark-test');
    const forged = await h.deliver('pull_request', p, { secret: 'not-the-secret' });
    expect(forged.status).toBe(401);
    expect((await forged.json()).error.code).toBe('bad_signature');
    expect((await h.deliver('pull_request', p, { signature: '' })).status).toBe(401);
    expect((await h.deliver('pull_request', p, { signature: 'sha256=abc' })).status).toBe(401);
    expect((await h.deliver('pull_request', p, { signature: `sha1=${'0'.repeat(40)}` })).status).toBe(401);
    expect({
      d: await count(h, 'webhook_deliveries'),
      r: await count(h, 'reservations'),
      e: await count(h, 'events'),
    }).toEqual(before);
  });

  it('refuses oversized bodies with 413', async () => {
    const p = labeled('spark-test');
    p.pull_request.body = 'x'.repeat(2 * 1024 * 1024 + 10);
    const res = await h.deliver('pull_request', p);
    expect(res.status).toBe(413);
    expect(await count(h, 'webhook_deliveries')).toBe(0);
  });

  it('answers unknown events and actions with 2xx and changes nothing', async () => {
    const before = await count(h, 'reservations');
    const star = await h.deliver('star', example('star', 'created'));
    expect(star.status).toBe(202);
    const assigned = await h.deliver('pull_request', example('pull_request', 'assigned'));
    expect(assigned.status).toBe(202);
    expect((await assigned.json()).result).toMatch(/ignored/);
    for (const odd of ['valueOf', 'constructor', '__proto__', 'toString']) {
      const res = await h.deliver(odd, labeled('spark-test'));
      expect(res.status, odd).toBe(202);
      expect((await res.json()).result).toBe(`ignored: ${odd}`);
    }
    // GitHub sends no such events: the fake says so, and this test meant it
    expect(h.gh.takeViolations()).toEqual(
      ['valueOf', 'constructor', '__proto__', 'toString'].map((odd) =>
        expect.stringMatching(new RegExp(`^webhook ${odd}: not an event of GitHub's webhook description`)),
      ),
    );
    const ping = await h.deliver('ping', example('ping'));
    expect(ping.status).toBe(200);
    expect(await count(h, 'reservations')).toBe(before);
  });

  it('authorized label → queued reservation and a check run with its position', async () => {
    // no host adopted: both requests wait, so positions are visible
    const r1 = await h.deliver('pull_request', labeled('spark-test'));
    expect(r1.status).toBe(202);
    expect((await r1.json()).result).toMatch(/^queued r-1$/);
    const r2 = await h.deliver(
      'pull_request',
      labeled('spark-test-long', { number: 3, sha: 'b'.repeat(40) }),
    );
    expect((await r2.json()).result).toBe('queued r-2');
    await h.c.loop.runNow();
    // the spec's sentence as the title; the estimate on its own line of the summary
    const second = await h.until('check run for r-2 at position 2 with its estimate', () =>
      h.gh.checkRuns.find(
        (c) =>
          c.external_id === 'r-2' &&
          c.output.title === 'Spark test queued — position 2' &&
          /^Estimate: (starts in ~|should start now|cannot start yet)/m.test(c.output.summary ?? ''),
      ),
    );
    expect(second.head_sha).toBe('b'.repeat(40));
    expect(second.status).toBe('queued');
    expect(second.output.summary).toMatch(/Waiting: /);
    expect(second.output.summary).toMatch(/suite: performance/);
    const first = await h.until('check run for r-1', () =>
      h.gh.checkRuns.find((c) => c.external_id === 'r-1' && /position 1/.test(c.output.title ?? '')),
    );
    expect(first.name).toBe('Spark test');
    const r = await h.c.ledger.getReservation(undefined, 'r-1');
    expect(r).toMatchObject({
      kind: 'manual',
      priority: 80,
      topology: 'single',
      suite: 'smoke',
      repo: REPO,
      pr: 2,
      requester: 'github:Codertocat',
    });
    // exactly one check run per reservation, updated in place
    expect(h.gh.checkRuns.filter((c) => c.external_id === 'r-1')).toHaveLength(1);
    // the permission API was asked (role_name), and the installation token was used
    expect(h.gh.calls('GET', /collaborators\/Codertocat\/permission/).length).toBe(1);
  });

  it('unauthorized sender → refused, visible on the PR and audited', async () => {
    const res = await h.deliver('pull_request', labeled('spark-test', { sender: 'outsider' }));
    expect((await res.json()).result).toMatch(/refused: @outsider holds write/);
    expect(await count(h, 'reservations')).toBe(0);
    const check = await h.until('refusal check run', () =>
      h.gh.checkRuns.find((c) => c.conclusion === 'neutral'),
    );
    expect(check.output.title).toMatch(/^Spark test refused — @outsider holds write/);
    expect(check.output.summary).toMatch(/needs maintain or admin/);
    const audit = await h.c.ledger.db.select().from(t.events).where(eq(t.events.type, 'github.refused'));
    expect(audit).toHaveLength(1);
    expect(audit[0]).toMatchObject({
      subjectType: 'audit',
      subjectId: `${REPO}#2`,
      actor: 'github:outsider',
    });
  });

  it('an unknown user (404 from the permission API) is refused', async () => {
    const res = await h.deliver('pull_request', labeled('spark-test', { sender: 'stranger' }));
    expect((await res.json()).result).toMatch(/refused: @stranger holds no role/);
  });

  it('fork PRs are refused without asking for permissions', async () => {
    const res = await h.deliver('pull_request', labeled('spark-test', { headRepo: 'evil/Hello-World' }));
    expect((await res.json()).result).toMatch(/refused: PR #2 comes from a fork/);
    // the same PR commit again (head repository deleted): refused, and throttled
    const deleted = await h.deliver('pull_request', labeled('spark-test', { headRepo: null }));
    expect((await deleted.json()).result).toMatch(/^refused \(throttled, nothing written\): .*fork/);
    // another commit of a fork PR gets its own refusal
    const other = await h.deliver(
      'pull_request',
      labeled('spark-test', { headRepo: null, sha: 'a'.repeat(40) }),
    );
    expect((await other.json()).result).toMatch(/^refused: .*fork/);
    expect(await count(h, 'reservations')).toBe(0);
    expect(h.gh.calls('GET', /permission/)).toHaveLength(0);
    await h.until(
      'two refusal checks',
      () => h.gh.checkRuns.filter((c) => /fork/.test(c.output.title ?? '')).length === 2,
    );
    expect(h.gh.checkRuns.map((c) => c.name)).toEqual(['Spark request refused', 'Spark request refused']);
  });

  it('a label on a closed PR queues nothing', async () => {
    const p = labeled('spark-test');
    p.pull_request.state = 'closed';
    expect((await (await h.deliver('pull_request', p)).json()).result).toBe(
      'refused: PR #2 is closed; only open PRs are tested',
    );
    expect(await count(h, 'reservations')).toBe(0);
  });

  it('pair requests are refused while the repository has no distributed test enabled', async () => {
    const res = await h.deliver('pull_request', labeled('spark-pair-test'));
    expect((await res.json()).result).toMatch(/refused: pair \(distributed\) tests are not enabled/);
    const comment = example('issue_comment', 'created');
    comment.issue.pull_request = { url: `https://api.github.com/repos/${REPO}/pulls/2` };
    comment.issue.number = 2;
    comment.comment.body = '/spark test --pair';
    comment.sender.login = 'Codertocat';
    comment.sender.type = 'User';
    h.gh.repos.get(REPO.toLowerCase())!.pulls[2] = {
      state: 'open',
      headSha: 'c'.repeat(40),
      headRepo: REPO,
      labels: [],
    };
    const res2 = await h.deliver('issue_comment', comment);
    expect((await res2.json()).result).toMatch(/refused: pair/);
    expect(await count(h, 'reservations')).toBe(0);
    // once enabled, the same request is queued
    expect((await h.enable(REPO, { pairEnabled: true })).status).toBe(200);
    const res3 = await h.deliver('pull_request', labeled('spark-pair-test'));
    expect((await res3.json()).result).toBe('queued r-1');
    expect((await h.c.ledger.getReservation(undefined, 'r-1'))?.topology).toBe('pair');
  });

  it('a redelivery is a 2xx no-op', async () => {
    const p = labeled('spark-test');
    expect((await (await h.deliver('pull_request', p, { id: 'same-delivery' })).json()).result).toBe(
      'queued r-1',
    );
    const events = await count(h, 'events');
    const again = await h.deliver('pull_request', p, { id: 'same-delivery' });
    expect(again.status).toBe(200);
    expect(await again.json()).toMatchObject({ ok: true, duplicate: true });
    expect(await count(h, 'reservations')).toBe(1);
    expect(await count(h, 'events')).toBe(events);
    // a second, distinct delivery of the same request does not queue it twice either
    const other = await h.deliver('pull_request', p);
    expect((await other.json()).result).toMatch(/already queued as r-1/);
  });

  it('dedup rows are kept past the 3-day redelivery window of GitHub, then pruned', async () => {
    await h.deliver('pull_request', labeled('spark-test'), { id: 'old-delivery' });
    expect(await pruneDeliveries(githubService(h.c.ctx))).toBe(0);
    // through the ledger's write queue: background work (ticks, passes) may hold the write lock
    await h.c.ledger.write((tx) => tx.delete(t.meta).where(eq(t.meta.key, 'github:deliveries_pruned_at')));
    h.clock.advance(DELIVERY_RETENTION_MS + 60_000);
    expect(await pruneDeliveries(githubService(h.c.ctx))).toBeGreaterThanOrEqual(1);
    const left = await h.c.ledger.db
      .select()
      .from(t.webhookDeliveries)
      .where(eq(t.webhookDeliveries.deliveryId, 'old-delivery'));
    expect(left).toEqual([]);
  });

  it('repositories that are not enabled get nothing', async () => {
    const p = labeled('spark-test');
    p.repository.full_name = 'someone/else';
    const res = await h.deliver('pull_request', p);
    expect((await res.json()).result).toMatch(/not enabled/);
    expect(await count(h, 'reservations')).toBe(0);
    expect(h.gh.calls('GET', /permission/)).toHaveLength(0);
  });

  it('/spark commands from comments: test, status, cancel; bots and invalid commands', async () => {
    h.gh.repos.get(REPO.toLowerCase())!.pulls[2] = {
      state: 'open',
      headSha: 'd'.repeat(40),
      headRepo: REPO,
      labels: [],
    };
    const comment = (body: string, sender = 'Codertocat', type = 'User') => {
      const c = example('issue_comment', 'created');
      c.issue.pull_request = { url: `https://api.github.com/repos/${REPO}/pulls/2` };
      c.issue.number = 2;
      c.comment.body = body;
      c.sender.login = sender;
      c.sender.type = type;
      return c;
    };
    const ok = await h.deliver('issue_comment', comment('Looks good.\n/spark test --long'));
    expect((await ok.json()).result).toBe('queued r-1');
    expect(await h.c.ledger.getReservation(undefined, 'r-1')).toMatchObject({
      suite: 'performance',
      headSha: 'd'.repeat(40),
    });
    const bot = await h.deliver('issue_comment', comment('/spark cancel', 'spark-bot[bot]', 'Bot'));
    expect((await bot.json()).result).toMatch(/bot/);
    const bad = await h.deliver('issue_comment', comment('/spark deploy'));
    expect((await bad.json()).result).toMatch(/refused: unknown command/);
    const status = await h.deliver('issue_comment', comment('/spark status'));
    expect((await status.json()).result).toMatch(/status refreshed for r-1/);
    const cancel = await h.deliver('issue_comment', comment('/spark cancel'));
    expect((await cancel.json()).result).toBe('cancelled r-1');
    expect((await h.c.ledger.getReservation(undefined, 'r-1'))?.status).toBe('cancelled');
    await h.until('cancelled check run', () =>
      h.gh.checkRuns.find((c) => c.external_id === 'r-1' && c.conclusion === 'cancelled'),
    );
  });

  it("strangers' commands: authorized first, never under the result check's name, throttled, echo bounded", async () => {
    // ADR 0030
    const sha = 'e'.repeat(40);
    h.gh.repos.get(REPO.toLowerCase())!.pulls[2] = {
      state: 'open',
      headSha: sha,
      headRepo: REPO,
      labels: [],
    };
    const comment = (body: string, sender: string) => {
      const c = example('issue_comment', 'created');
      c.issue.pull_request = { url: `https://api.github.com/repos/${REPO}/pulls/2` };
      c.issue.number = 2;
      c.comment.body = body;
      c.sender.login = sender;
      c.sender.type = 'User';
      return c;
    };
    // a reader (no permission on the fake) sends a 64 KB malformed command: refused for lack of
    // permission, before the command is looked at, and nothing of its text is echoed
    const huge = `/spark test ${'--x'.repeat(20_000)}`;
    const first = await h.deliver('issue_comment', comment(huge, 'stranger'));
    const firstResult = (await first.json()).result as string;
    expect(firstResult).toMatch(/^refused: /);
    expect(firstResult).not.toContain('--x');
    expect(await count(h, 'reservations')).toBe(0);
    const outbox = await count(h, 'outbox');
    const events = await count(h, 'events');
    // repeated refusals to the same PR commit are throttled: nothing more is written
    for (const body of ['/spark test', '/spark status', '/spark cancel', huge]) {
      const again = await h.deliver('issue_comment', comment(body, 'stranger'));
      expect((await again.json()).result).toMatch(/^refused \(throttled, nothing written\)/);
    }
    expect(await count(h, 'outbox')).toBe(outbox);
    expect(await count(h, 'events')).toBe(events);
    const refusals = await h.until('refusal check run', () =>
      h.gh.checkRuns.filter((c) => c.head_sha === sha).length
        ? h.gh.checkRuns.filter((c) => c.head_sha === sha)
        : null,
    );
    expect(refusals).toHaveLength(1);
    expect(refusals[0]!.name).toBe('Spark request refused');
    // the result check's name is never used, so no refusal can cover a Spark result
    expect(h.gh.checkRuns.filter((c) => c.head_sha === sha && c.name === 'Spark test')).toEqual([]);
    for (const run of h.gh.checkRuns) expect(JSON.stringify(run)).not.toContain('--x--x');

    // a maintainer's invalid command is refused with at most 80 characters echoed in a code span
    h.gh.repos.get(REPO.toLowerCase())!.pulls[2] = {
      state: 'open',
      headSha: 'f'.repeat(40),
      headRepo: REPO,
      labels: [],
    };
    const bad = await h.deliver('issue_comment', comment(`/spark deploy ${'y'.repeat(5000)}`, 'Codertocat'));
    const badResult = (await bad.json()).result as string;
    const span = /`([^`]*)`/.exec(badResult);
    expect(span, badResult).not.toBeNull();
    expect(span![1]!.length).toBeLessThanOrEqual(80);
    expect(badResult.length).toBeLessThan(300);
  });
});
