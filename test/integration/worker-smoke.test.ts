import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sign } from '@octokit/webhooks-methods';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { example } from '../fake-github/harness.ts';

/**
 * The Worker entry in real workerd through `wrangler dev --local` (no Cloudflare account, no
 * network: cf fetch, banner update check and metrics are off). The ledger URL points at a closed
 * loopback port, so every ledger call fails: the Worker must fail closed.
 */

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

const SECRET = 'worker-smoke-secret';

describe('Cloudflare Worker entry (workerd via wrangler dev)', () => {
  let proc: ChildProcess;
  let url: string;
  let output = '';
  let dir: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'spark-worker-'));
    const port = await freePort();
    const closedPort = await freePort();
    url = `http://127.0.0.1:${port}`;
    const env: Record<string, string> = {
      PATH: process.env.PATH ?? '',
      HOME: dir,
      XDG_CONFIG_HOME: dir,
      CI: '1',
      WRANGLER_SEND_METRICS: 'false',
      WRANGLER_HIDE_BANNER: 'true',
      CLOUDFLARE_CF_FETCH_ENABLED: 'false',
    };
    proc = spawn(
      process.execPath,
      [
        'node_modules/wrangler/bin/wrangler.js',
        'dev',
        '--local',
        '--ip',
        '127.0.0.1',
        '--port',
        String(port),
        '--inspector-port',
        String(await freePort()),
        '--persist-to',
        join(dir, 'state'),
        '--show-interactive-dev-session=false',
        '--var',
        `SPARK_LEDGER_URL:http://127.0.0.1:${closedPort}`,
        '--var',
        `SPARK_WEBHOOK_SECRET:${SECRET}`,
      ],
      { env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    proc.stdout!.on('data', (b) => (output += String(b)));
    proc.stderr!.on('data', (b) => (output += String(b)));
    const deadline = Date.now() + 50_000;
    for (;;) {
      if (proc.exitCode != null) throw new Error(`wrangler dev exited early:\n${output}`);
      try {
        const res = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(5000) });
        await res.text();
        break;
      } catch {
        if (Date.now() > deadline) throw new Error(`wrangler dev did not answer within 50 s:\n${output}`);
        await new Promise((r) => setTimeout(r, 250));
      }
    }
  }, 70_000);

  afterAll(async () => {
    if (proc?.pid && proc.exitCode == null) {
      const exited = new Promise<void>((r) => proc.once('exit', () => r()));
      process.kill(-proc.pid, 'SIGTERM');
      const timer = setTimeout(() => {
        if (proc.exitCode == null) process.kill(-proc.pid!, 'SIGKILL');
      }, 5000);
      await exited;
      clearTimeout(timer);
    }
    rmSync(dir, { recursive: true, force: true });
  });

  it('health answers (and says the ledger is unreachable)', async () => {
    const res = await fetch(`${url}/healthz`);
    expect(res.status).toBe(503);
    expect(await res.json()).toEqual({
      error: { code: 'ledger_unreachable', message: 'the ledger cannot be reached' },
    });
  });

  it('the cron handler runs and fails closed without the ledger; the Worker keeps answering', async () => {
    const res = await fetch(`${url}/cdn-cgi/handler/scheduled?cron=*+*+*+*+*`);
    await res.text();
    // the handler threw: syncing hosts needs the (unreachable) ledger, so nothing ran half-way
    expect(res.status).toBe(500);
    expect((await fetch(`${url}/healthz`)).status).toBe(503);
  });

  it('a forged signature gets 401', async () => {
    const body = JSON.stringify(example('pull_request', 'labeled'));
    const res = await fetch(`${url}/github/webhooks`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-github-event': 'pull_request',
        'x-github-delivery': 'forged-1',
        'x-hub-signature-256': await sign('not-the-secret', body),
      },
      body,
    });
    expect(res.status).toBe(401);
    expect((await res.json()).error.code).toBe('bad_signature');
  });

  it('a correctly signed delivery gets 503 while the ledger is unreachable (fail closed)', async () => {
    const ping = JSON.stringify(example('ping'));
    const pong = await fetch(`${url}/github/webhooks`, {
      method: 'POST',
      headers: {
        'x-github-event': 'ping',
        'x-github-delivery': 'ping-1',
        'x-hub-signature-256': await sign(SECRET, ping),
      },
      body: ping,
    });
    // the signature check itself works in workerd (Web Crypto)
    expect(pong.status).toBe(200);
    const body = JSON.stringify(example('pull_request', 'labeled'));
    const res = await fetch(`${url}/github/webhooks`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-github-event': 'pull_request',
        'x-github-delivery': 'real-1',
        'x-hub-signature-256': await sign(SECRET, body),
      },
      body,
    });
    expect(res.status).toBe(503);
    expect((await res.json()).error.code).toBe('ledger_unavailable');
  });
});
