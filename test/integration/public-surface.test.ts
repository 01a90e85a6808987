import { request } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { createApiToken } from '../../functions/auth/tokens.ts';
import type { RunningController } from '../../functions/node-server.ts';
import { startTestController } from '../helpers/controller.ts';
import { bringOnline, startApiController, until } from './cli-harness.ts';

/**
 * on a real loopback port: dashboard change streams are capped per
 * address (the next one gets 503 while `/healthz` keeps answering), anonymous views are computed
 * once per change rather than per request, the dashboard carries its security headers, and
 * `publicViews: "token"` puts `/`, `/api/v1/queue` and `/metrics` behind an API token.
 */

let c: (RunningController & { dir: string }) | null = null;
afterEach(async () => {
  await c?.close();
  c = null;
});

/** Opens an SSE stream and resolves once the status line arrived; `close()` ends it. */
function openStream(url: string): Promise<{ status: number; close(): void }> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}/dashboard/events`, { headers: { accept: 'text/event-stream' } }, (res) => {
      res.on('data', () => {});
      resolve({ status: res.statusCode ?? 0, close: () => req.destroy() });
    });
    req.on('error', (e) => {
      if ((e as NodeJS.ErrnoException).code !== 'ECONNRESET') reject(e);
    });
    req.end();
  });
}

describe('public surface limits', () => {
  it('caps dashboard streams per address; /healthz keeps answering; a closed stream frees its slot', async () => {
    c = await startTestController({ config: { server: { sseMaxPerAddress: 3, sseMaxClients: 50 } } });
    const open = [];
    for (let i = 0; i < 3; i++) open.push(await openStream(c.url));
    expect(open.map((s) => s.status)).toEqual([200, 200, 200]);
    const refused = await fetch(`${c.url}/dashboard/events`);
    expect(refused.status).toBe(503);
    expect(await refused.json()).toMatchObject({ error: { code: 'too_many_streams' } });
    expect((await fetch(`${c.url}/healthz`)).status).toBe(200);
    open[0]!.close();
    // the slot is freed when the server sees the stream end; poll until a new stream is accepted
    let again = await openStream(c.url);
    for (let i = 0; again.status !== 200 && i < 200; i++) {
      again.close();
      await new Promise((r) => setImmediate(r));
      again = await openStream(c.url);
    }
    expect(again.status).toBe(200);
    again.close();
    for (const s of open.slice(1)) s.close();
  });

  it('anonymous views are computed once per ledger change, not per request', async () => {
    c = await startTestController({ config: { server: { publicViewCacheMs: 60_000 } }, listen: false });
    const ledger = c.ledger;
    let computed = 0;
    const original = ledger.loadAdmissionInput.bind(ledger);
    ledger.loadAdmissionInput = (async (...args: Parameters<typeof original>) => {
      computed += 1;
      return original(...args);
    }) as typeof ledger.loadAdmissionInput;
    await Promise.all(Array.from({ length: 20 }, () => c!.app.request('/')));
    for (let i = 0; i < 20; i++) expect((await c.app.request('/api/v1/queue')).status).toBe(200);
    // one computation shared by the dashboard and the fleet/queue views (one per ledger version)
    expect(computed).toBe(1);
    await ledger.setManaged('spark-2', true, 'test'); // a change notice invalidates
    await c.app.request('/api/v1/queue');
    await c.app.request('/');
    expect(computed).toBe(2);
  });

  it('the dashboard carries CSP, nosniff and frame-ancestors', async () => {
    c = await startTestController({ listen: false });
    for (const path of ['/', '/dashboard/live']) {
      const res = await c.app.request(path);
      expect(res.status).toBe(200);
      const csp = res.headers.get('content-security-policy') ?? '';
      expect(csp).toContain("frame-ancestors 'none'");
      expect(csp).toMatch(/script-src 'sha256-[A-Za-z0-9+/=]{44}'/);
      expect(csp).toContain("default-src 'none'");
      expect(res.headers.get('x-content-type-options')).toBe('nosniff');
      expect(res.headers.get('x-frame-options')).toBe('DENY');
    }
    // the hash pins exactly the page's inline script
    const html = await (await c.app.request('/')).text();
    const script = /<script>([\s\S]*?)<\/script>/.exec(html)![1]!;
    const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(script));
    const b64 = Buffer.from(digest).toString('base64');
    expect((await c.app.request('/')).headers.get('content-security-policy')).toContain(`'sha256-${b64}'`);
  });

  it('publicViews "token" requires an API token for /, /api/v1/queue, /api/v1/fleet and /metrics', async () => {
    c = await startTestController({ config: { publicViews: 'token' }, listen: false });
    const token = (await createApiToken(c.ledger, { name: 'viewer', scopes: ['develop'] }, 'test')).token;
    for (const path of ['/', '/dashboard/live', '/api/v1/queue', '/api/v1/fleet', '/metrics']) {
      const anon = await c.app.request(path);
      expect(anon.status, path).toBe(401);
      const forged = await c.app.request(path, { headers: { authorization: 'Bearer spk_api_forged' } });
      expect(forged.status, path).toBe(401);
      const ok = await c.app.request(path, { headers: { authorization: `Bearer ${token}` } });
      expect(ok.status, path).toBe(200);
    }
    // /healthz stays open: load balancers probe it without credentials
    expect((await c.app.request('/healthz')).status).toBe(200);
  });
});

describe('repositories on the public surface', () => {
  it('an aliased repository appears only under its alias; with publicRepos "aliased" others not at all', async () => {
    for (const publicRepos of ['all', 'aliased'] as const) {
      c = await startTestController({
        config: { repoAliases: { 'acme/secret-engine': 'project A' }, publicRepos },
        listen: false,
      });
      for (const repo of ['acme/secret-engine', 'acme/other-private']) {
        await c.ledger.createReservation(
          {
            kind: 'manual',
            topology: 'single',
            suite: 'smoke',
            requester: 'test',
            repo,
            pr: 4,
            headSha: 'a'.repeat(40),
          },
          'test',
        );
      }
      const queue = (await (await c.app.request('/api/v1/queue')).json()) as {
        queued: Array<{ repo: string | null; prUrl: string | null; pr: number | null }>;
      };
      const repos = queue.queued.map((q) => q.repo);
      expect(repos).toContain('project A');
      expect(repos).toContain(publicRepos === 'all' ? 'acme/other-private' : null);
      const html = await (await c.app.request('/')).text();
      expect(html).not.toContain('secret-engine');
      if (publicRepos === 'aliased') expect(html).not.toContain('other-private');
      for (const q of queue.queued) if (q.repo !== 'acme/other-private') expect(q.prUrl).toBeNull();
      await c.close();
      c = null;
    }
  });
});

describe('an aliased repository reveals nothing on the public surface', () => {
  const PR = 4711;
  const RUNNING_SHA = 'c0ffee15a1e5b0a7d2c3e4f5061728394a5b6c7d';
  const QUEUED_SHA = 'badc0de5a1e5b0a7d2c3e4f5061728394a5b6c7e';
  const OPEN_SHA = '0a1b2c3d4e5f60718293a4b5c6d7e8f901234567';

  /** The first bytes of the dashboard's change stream (its hello event). */
  async function streamStart(url: string): Promise<string> {
    const abort = new AbortController();
    const res = await fetch(`${url}/dashboard/events`, { signal: abort.signal });
    const reader = res.body!.getReader();
    let text = '';
    while (!text.includes('\n\n')) text += new TextDecoder().decode((await reader.read()).value);
    abort.abort();
    return text;
  }

  it('no PR number, commit or link of it in the queue, fleet, dashboard, stream or metrics; operators still see them', async () => {
    // the alias is configured with other letter case than GitHub reports the repository
    const ctl = await startApiController({
      config: { repoAliases: { 'Acme/Secret-Engine': 'project A' }, budgets: { maxGpusPerPr: 1 } },
    });
    try {
      const { c, call, tokens } = ctl;
      await bringOnline(c.ledger);
      const pr = (headSha: string, repo = 'acme/secret-engine', number = PR) =>
        c.ledger.createReservation(
          {
            kind: 'manual',
            topology: 'single',
            suite: 'smoke',
            requester: 'github:maintainer',
            repo,
            pr: number,
            headSha,
          },
          'github',
        );
      const running = await pr(RUNNING_SHA);
      await until(
        'granted',
        async () => (await c.ledger.getReservation(undefined, running.id))?.status === 'allocated',
      );
      // the same PR again: it waits on the per-PR GPU budget, whose reason names the PR's slot
      const queued = await pr(QUEUED_SHA);
      await c.loop.runNow();
      const operator = await call(tokens.ops, 'GET', `/api/v1/reservations/${queued.id}`);
      expect(operator.status).toBe(200);
      // operators see the repository, PR, commit and the reason as they are
      expect(operator.body.reservation).toMatchObject({
        repo: 'acme/secret-engine',
        pr: PR,
        headSha: QUEUED_SHA,
      });
      expect(operator.body.reservation.reason).toBe(
        `budget: acme/secret-engine#${PR} holds 1 of 1 GPUs per PR`,
      );
      const texts: Record<string, string> = {};
      for (const path of ['/api/v1/queue', '/api/v1/fleet', '/', '/dashboard/live', '/metrics']) {
        const res = await fetch(`${c.url}${path}`);
        expect(res.status, path).toBe(200);
        texts[path] = await res.text();
      }
      texts['/dashboard/events'] = await streamStart(c.url);
      for (const [where, body] of Object.entries(texts)) {
        for (const s of [
          String(PR),
          RUNNING_SHA.slice(0, 7),
          QUEUED_SHA.slice(0, 7),
          'secret-engine',
          'Secret-Engine',
        ])
          expect(body.includes(s), `"${s}" shown by ${where}`).toBe(false);
      }
      const q = JSON.parse(texts['/api/v1/queue']!) as {
        queued: Array<{
          id: string;
          repo: string | null;
          pr: number | null;
          prUrl: string | null;
          headSha: string | null;
          reason: string | null;
        }>;
        active: Array<{
          id: string;
          repo: string | null;
          pr: number | null;
          prUrl: string | null;
          headSha: string | null;
        }>;
      };
      const all = [...q.queued, ...q.active];
      for (const id of [running.id, queued.id])
        expect(all.find((x) => x.id === id)).toMatchObject({
          repo: 'project A',
          pr: null,
          prUrl: null,
          headSha: null,
        });
      expect(q.queued.find((x) => x.id === queued.id)!.reason).toBe(
        'budget: project A holds 1 of 1 GPUs per PR',
      );
      // a repository without an alias keeps its number, commit and link
      const open = await pr(OPEN_SHA, 'acme/open', 12);
      await c.loop.runNow();
      const after = (await (await fetch(`${c.url}/api/v1/queue`)).json()) as typeof q;
      expect([...after.queued, ...after.active].find((x) => x.id === open.id)).toMatchObject({
        repo: 'acme/open',
        pr: 12,
        headSha: OPEN_SHA,
        prUrl: 'https://github.com/acme/open/pull/12',
      });
      expect(texts['/']).toContain('project A');
    } finally {
      await ctl.c.close();
    }
  });

  it('with publicRepos "aliased", a repository without an alias shows no commit either', async () => {
    c = await startTestController({
      config: { repoAliases: { 'acme/shown': 'project B' }, publicRepos: 'aliased' },
      listen: false,
    });
    await c.ledger.createReservation(
      {
        kind: 'merge',
        topology: 'single',
        suite: 'smoke',
        requester: 'github:push',
        repo: 'acme/unlisted',
        pr: null,
        headSha: QUEUED_SHA,
      },
      'github',
    );
    for (const path of ['/api/v1/queue', '/', '/dashboard/live']) {
      const body = await (await c.app.request(path)).text();
      expect(body.includes(QUEUED_SHA.slice(0, 7)), path).toBe(false);
      expect(body.includes('unlisted'), path).toBe(false);
    }
  });
});
