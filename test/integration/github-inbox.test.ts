import { request as httpRequest } from 'node:http';
import { sql } from 'drizzle-orm';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { INBOX_MAX_ATTEMPTS, inboxBackoffMs } from '../../functions/github/inbox.ts';
import { githubService } from '../../functions/github/service.ts';
import { example, type Harness, SECRET, startHarness } from '../../scripts/sim/fake-github/harness.ts';
import { tempDir } from '../../scripts/sim/ledger.ts';
import { cleanupBundle, runSparkctl, sparkctlBundle } from './cli-harness.ts';

/**
 * the webhook inbox through the real app on a real port and a real libSQL file, with
 * the fake GitHub behind it: acknowledged first, processed afterwards; a definitive GitHub
 * answer ends a delivery with its reason; a transient one is retried, then parked, visible to
 * operators (API, /metrics, dashboard) and retryable with an audit trail.
 */

const REPO = 'Codertocat/Hello-World';

function spark(body: string, pr = 1) {
  const c = example('issue_comment', 'created');
  c.issue.number = pr;
  c.issue.pull_request = { url: `https://api.github.com/repos/${REPO}/pulls/${pr}` };
  c.comment.body = body;
  c.sender.login = 'Codertocat';
  c.sender.type = 'User';
  return c;
}

async function count(h: Harness, table: string, where = '1 = 1'): Promise<number> {
  const rows = await h.c.ledger.db.all<{ n: number }>(
    sql.raw(`SELECT count(*) AS n FROM ${table} WHERE ${where}`),
  );
  return Number(rows[0]!.n);
}

describe('webhook inbox', () => {
  let h: Harness;
  let token: string;
  const api = async (method: string, path: string) => {
    const res = await fetch(`${h.c.url}${path}`, { method, headers: { authorization: `Bearer ${token}` } });
    return { status: res.status, json: (await res.json()) as Record<string, never> };
  };
  beforeEach(async () => {
    h = await startHarness();
    const ex = example('pull_request', 'labeled');
    h.gh.addRepo(REPO, {
      installationId: ex.installation.id,
      collaborators: { Codertocat: 'maintain' },
      pulls: {
        1: { state: 'open', headSha: 'a'.repeat(40), headRepo: REPO, labels: [] },
        2: { state: 'open', headSha: 'b'.repeat(40), headRepo: REPO, labels: [] },
      },
    });
    // the rollout gate wants every host adopted; without heartbeats they stay
    // offline (no grants)
    for (const host of h.c.ledger.config.hosts) await h.c.ledger.setManaged(host.id, true, 'test');
    expect((await h.enable(REPO)).status).toBe(200);
    token = await h.operatorToken();
  });
  afterEach(async () => {
    await h.close();
  });
  afterAll(() => cleanupBundle());

  it('a /spark test on a PR GitHub answers 404 for ends with the reason, not a retry (fuzz seed 742671736)', async () => {
    const res = await h.deliver('issue_comment', spark('/spark test', 404));
    expect(res.status).toBe(202);
    const body = await res.json();
    expect(body.state).toBe('done');
    expect(body.result).toMatch(/^ended: GitHub answered 404/);
    expect(await count(h, 'reservations')).toBe(0);
    expect(await count(h, 'webhook_deliveries', `attempts > 0`)).toBe(0);
  });

  it('a payload that does not match its event is acknowledged, then recorded as invalid', async () => {
    const res = await h.deliver('pull_request', { action: 'labeled', repository: { full_name: REPO } });
    expect(res.status).toBe(202);
    const body = await res.json();
    expect(body.state).toBe('done');
    expect(body.result).toMatch(/^invalid payload: pull_request payload is missing fields: /);
    expect(await count(h, 'reservations')).toBe(0);
    // not a payload GitHub sends, on purpose: the fake's check says so
    expect(h.gh.takeViolations()).toEqual([
      expect.stringMatching(/^webhook pull_request\.labeled: \/ must have required property 'number'/),
    ]);
  });

  it('malformed JSON and missing headers are refused before the insert', async () => {
    const send = (headers: Record<string, string>, body: string) =>
      fetch(`${h.c.url}/github/webhooks`, { method: 'POST', headers, body });
    const { createHmac } = await import('node:crypto');
    const sig = (b: string) => `sha256=${createHmac('sha256', SECRET).update(b).digest('hex')}`;
    const bad = await send(
      {
        'content-type': 'application/json',
        'x-github-event': 'pull_request',
        'x-github-delivery': 'bad-json',
        'x-hub-signature-256': sig('{nope'),
      },
      '{nope',
    );
    expect(bad.status).toBe(400);
    expect((await bad.json()).error.code).toBe('invalid_json');
    const noId = await send({ 'x-github-event': 'pull_request', 'x-hub-signature-256': sig('{}') }, '{}');
    expect(noId.status).toBe(400);
    expect(await count(h, 'webhook_deliveries')).toBe(0);
  });

  it('a missing signature is refused before the body is read (the body never ends)', async () => {
    const url = new URL(h.c.url);
    const status = await new Promise<number>((resolve, reject) => {
      const req = httpRequest(
        {
          host: url.hostname,
          port: url.port,
          path: '/github/webhooks',
          method: 'POST',
          headers: {
            'x-github-event': 'push',
            'x-github-delivery': 'never-ends',
            'transfer-encoding': 'chunked',
          },
        },
        (res) => {
          resolve(res.statusCode ?? 0);
          req.destroy();
        },
      );
      req.on('error', (e) => (e.message.includes('socket hang up') ? undefined : reject(e)));
      // a first chunk, then nothing: only an answer that did not wait for the body arrives
      req.write('{"action":');
    });
    expect(status).toBe(401);
    expect(await count(h, 'webhook_deliveries')).toBe(0);
  });

  it('transient GitHub failures are retried in order per PR, parked after N attempts, visible and retryable', async () => {
    h.gh.fail({ method: 'GET', path: /\/pulls\/1$/, status: 502, times: 1000 });
    const first = await h.deliver('issue_comment', spark('/spark test'), { id: 'pr1-first' });
    expect(first.status).toBe(202);
    expect((await first.json()).state).toBe('pending');
    // a later delivery about the same PR waits behind it; another PR's is not held up
    expect(
      (await (await h.deliver('issue_comment', spark('/spark status'), { id: 'pr1-second' })).json()).state,
    ).toBe('pending');
    expect(
      (await (await h.deliver('issue_comment', spark('/spark test', 2), { id: 'pr2' })).json()).result,
    ).toBe('queued r-1');
    expect(h.gh.calls('GET', /\/pulls\/1$/)).toHaveLength(1);

    const svc = githubService(h.c.ctx);
    for (let attempt = 1; attempt < INBOX_MAX_ATTEMPTS; attempt++) {
      h.clock.advance(inboxBackoffMs(attempt) + 1);
      await svc.inbox.drain();
    }
    const listed = await api('GET', '/api/v1/deliveries?state=parked');
    expect(listed.status).toBe(200);
    const parked = (listed.json.deliveries as unknown as Array<Record<string, unknown>>).find(
      (d) => d.id === 'pr1-first',
    );
    expect(parked).toMatchObject({ state: 'parked', attempts: INBOX_MAX_ATTEMPTS, event: 'issue_comment' });
    expect(String(parked!.lastError)).toMatch(/GitHub: .*502/);
    expect(listed.json.inbox).toMatchObject({ parked: 1, pending: 1 });
    // the second waited behind it while it was retried, then got its own first attempt (same PR
    // fetch, same 502) once the first was parked
    expect((await api('GET', '/api/v1/deliveries/pr1-second')).json.delivery).toMatchObject({
      state: 'pending',
      attempts: 1,
    });

    const metrics = await (await fetch(`${h.c.url}/metrics`)).text();
    expect(metrics).toMatch(/spark_webhook_inbox_depth\{state="parked"\} 1/);
    const dash = await (await fetch(`${h.c.url}/dashboard/live`)).text();
    expect(dash).toMatch(/webhooks: 1 waiting, 1 parked/);

    // the operator sees it with sparkctl, GitHub recovers, and the operator retries it
    const env = { SPARK_URL: h.c.url, SPARK_TOKEN: token };
    const bin = await sparkctlBundle();
    const home = tempDir('sparkctl-home-');
    try {
      const listedCli = await runSparkctl(bin, ['deliveries'], env, home.dir);
      expect(listedCli.stderr).toBe('');
      expect(listedCli.stdout).toMatch(/^inbox: 1 waiting \(oldest .+\), 1 parked\n/);
      expect(listedCli.stdout).toMatch(
        /pr1-first +issue_comment\.created +parked .+ 6 +parked: GitHub: .*502/,
      );
      const jsonCli = JSON.parse((await runSparkctl(bin, ['deliveries', '--json'], env, home.dir)).stdout);
      expect(jsonCli.inbox).toMatchObject({ pending: 1, parked: 1 });
      h.gh.failures.length = 0;
      const retriedCli = await runSparkctl(bin, ['deliveries', 'retry', 'pr1-first'], env, home.dir);
      expect(retriedCli.stderr).toBe('');
      expect(retriedCli.stdout.trim()).toBe('delivery pr1-first (issue_comment) queued for processing again');
      expect((await runSparkctl(bin, ['deliveries', 'retry', 'no-such-id'], env, home.dir)).code).toBe(6);
    } finally {
      home.cleanup();
    }
    // the retry made it due with a fresh attempt budget (and kicked the processor, which may have
    // processed it already)
    const retried = (await api('GET', '/api/v1/deliveries/pr1-first')).json.delivery as unknown as {
      state: string;
      attempts: number;
    };
    expect(['pending', 'done']).toContain(retried.state);
    expect(retried.attempts).toBe(0);
    // the later delivery of the same PR follows once its own backoff has passed
    await h.until('pr1-second processed after the retry', async () => {
      h.clock.advance(inboxBackoffMs(1) + 1);
      await svc.inbox.drain();
      const d = (await api('GET', '/api/v1/deliveries/pr1-second')).json.delivery as unknown as {
        state: string;
      };
      return d.state === 'done';
    });
    const done = (await api('GET', '/api/v1/deliveries/pr1-first')).json.delivery as unknown as Record<
      string,
      unknown
    >;
    expect(done).toMatchObject({ state: 'done', result: 'queued r-2' });
    expect(
      await count(
        h,
        'events',
        `type = 'webhook.retried' AND subject_id = 'pr1-first' AND actor = 'api:test-operator'`,
      ),
    ).toBe(1);
    expect(await count(h, 'events', `type = 'webhook.parked' AND subject_id = 'pr1-first'`)).toBe(1);
    // nothing left to retry: a clear 409, and a redelivery of the id stays a no-op
    const again = await api('POST', '/api/v1/deliveries/pr1-first/retry');
    expect(again.status).toBe(409);
    const redelivered = await h.deliver('issue_comment', spark('/spark test'), { id: 'pr1-first' });
    expect(redelivered.status).toBe(200);
    expect(await redelivered.json()).toMatchObject({ duplicate: true });
    expect(await count(h, 'reservations')).toBe(2);
    expect((await api('POST', '/api/v1/deliveries/nope/retry')).status).toBe(404);
    expect((await api('GET', '/api/v1/deliveries?state=bogus')).status).toBe(400);
  });
});
