import { sign } from '@octokit/webhooks-methods';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../scripts/sim/doubles/index.ts';
import { example } from '../../scripts/sim/fake-github/harness.ts';
import { startWranglerDev, type WranglerDev } from '../helpers/wrangler-dev.ts';

/**
 * The Worker entry in real workerd through `wrangler dev --local`. The ledger URL points at a
 * closed loopback port, so every ledger call fails: the Worker must fail closed.
 */

const SECRET = 'worker-smoke-secret';

async function post(url: string, event: string, body: string, signature: string) {
  return fetch(`${url}/github/webhooks`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'x-github-event': event,
      'x-github-delivery': crypto.randomUUID(),
      'x-hub-signature-256': signature,
    },
    body,
  });
}

describe('Cloudflare Worker entry (workerd via wrangler dev), ledger unreachable', () => {
  let dev: WranglerDev;

  beforeAll(async () => {
    dev = await startWranglerDev({
      SPARK_LEDGER_URL: `http://127.0.0.1:${await freePort()}`,
      SPARK_WEBHOOK_SECRET: SECRET,
    });
  }, 70_000);

  afterAll(async () => {
    await dev?.stop();
  });

  it('health answers (and says the ledger is unreachable)', async () => {
    const res = await fetch(`${dev.url}/healthz`);
    expect(res.status).toBe(503);
    expect(await res.json()).toEqual({
      error: { code: 'ledger_unreachable', message: 'the ledger cannot be reached' },
    });
  });

  it('the cron handler runs and fails closed without the ledger; the Worker keeps answering', async () => {
    const res = await fetch(`${dev.url}/cdn-cgi/handler/scheduled?cron=*+*+*+*+*`);
    await res.text();
    // the handler threw: syncing hosts needs the (unreachable) ledger, so nothing ran half-way
    expect(res.status).toBe(500);
    expect((await fetch(`${dev.url}/healthz`)).status).toBe(503);
  });

  it('a forged signature gets 401', async () => {
    const body = JSON.stringify(example('pull_request', 'labeled'));
    const res = await post(dev.url, 'pull_request', body, await sign('not-the-secret', body));
    expect(res.status).toBe(401);
    expect((await res.json()).error.code).toBe('bad_signature');
  });

  it('a correctly signed delivery gets 503 while the ledger is unreachable (fail closed)', async () => {
    const ping = JSON.stringify(example('ping'));
    // the signature check itself works in workerd (Web Crypto)
    expect((await post(dev.url, 'ping', ping, await sign(SECRET, ping))).status).toBe(200);
    const body = JSON.stringify(example('pull_request', 'labeled'));
    const res = await post(dev.url, 'pull_request', body, await sign(SECRET, body));
    expect(res.status).toBe(503);
    expect((await res.json()).error.code).toBe('ledger_unavailable');
  });
});
