import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ANONYMOUS_BODY_BUDGET_BYTES,
  anonymousBodies,
  createBodyBudget,
} from '../../functions/api/anonymous-budget.ts';
import { MAX_WEBHOOK_BYTES } from '../../functions/github/webhook.ts';
import type { RunningController } from '../../functions/node-server.ts';
import { startTestController } from '../helpers/controller.ts';

/**
 * Bodies read before their sender is known (docs/adr/0150-anonymous-body-budget.md), through the
 * app as Node serves it: every refusal that can be made from the headers is made before a byte of
 * the body is pulled, and the bodies that are read share one process-wide budget. Each request's
 * body is a stream that records whether anything pulled from it. The memory this bounds is
 * measured on a real process in test/e2e/anonymous-bodies.test.ts.
 */

const SECRET = 'anonymous-bodies-secret';
let c: RunningController & { dir: string };

beforeAll(async () => {
  c = await startTestController({ env: { SPARK_WEBHOOK_SECRET: SECRET }, listen: false });
});
afterAll(async () => {
  await c?.close();
});

/** A body that never ends and says whether it was read at all. */
function watchedBody(): { body: ReadableStream<Uint8Array>; pulled: () => boolean } {
  let pulled = false;
  // highWaterMark 0: the stream pulls only when a reader asks, not to fill its queue
  const body = new ReadableStream<Uint8Array>(
    {
      pull(controller) {
        pulled = true;
        controller.enqueue(new TextEncoder().encode(' '.repeat(1024)));
      },
    },
    { highWaterMark: 0 },
  );
  return { body, pulled: () => pulled };
}

async function post(path: string, headers: Record<string, string>) {
  const w = watchedBody();
  const res = await c.app.request(path, {
    method: 'POST',
    headers,
    body: w.body,
    duplex: 'half',
  } as RequestInit);
  return {
    status: res.status,
    headers: res.headers,
    json: (await res.json()) as { error: { code: string } },
    pulled: w.pulled(),
  };
}

const webhookHeaders = (over: Record<string, string | null> = {}) => {
  const h: Record<string, string | null> = {
    'content-type': 'application/json',
    'x-hub-signature-256': `sha256=${'0'.repeat(64)}`,
    'x-github-event': 'push',
    'x-github-delivery': 'anon-1',
    'content-length': '4096',
    ...over,
  };
  return Object.fromEntries(Object.entries(h).filter((e): e is [string, string] => e[1] !== null));
};

/** Takes the whole anonymous budget for the length of `fn`. */
async function withBudgetInUse<T>(fn: () => Promise<T>): Promise<T> {
  const giveBack = anonymousBodies.tryTake(anonymousBodies.capacity - anonymousBodies.inFlight);
  expect(giveBack).not.toBeNull();
  try {
    return await fn();
  } finally {
    giveBack!();
  }
}

describe('the webhook judges its headers before it reads a byte', () => {
  it.each([
    ['no signature', 401, 'bad_signature', { 'x-hub-signature-256': null }],
    [
      'a form-encoded delivery',
      415,
      'unsupported_media_type',
      { 'content-type': 'application/x-www-form-urlencoded' },
    ],
    ['no content type', 415, 'unsupported_media_type', { 'content-type': null }],
    [
      'a Content-Length over 2 MiB',
      413,
      'payload_too_large',
      { 'content-length': String(MAX_WEBHOOK_BYTES + 1) },
    ],
  ] as const)('%s: %i before reading', async (_what, status, code, over) => {
    const r = await post('/github/webhooks', webhookHeaders(over));
    expect(r.status).toBe(status);
    expect(r.json.error.code).toBe(code);
    expect(r.pulled).toBe(false);
  });

  it('past the anonymous budget: 503 with Retry-After, nothing read; served again once there is room', async () => {
    const r = await withBudgetInUse(() => post('/github/webhooks', webhookHeaders()));
    expect(r.status).toBe(503);
    expect(r.json.error.code).toBe('too_many_bodies');
    expect(r.headers.get('retry-after')).toBe('5');
    expect(r.pulled).toBe(false);
    // room again: the same headers get their body read (and refused by the signature)
    const again = await c.app.request('/github/webhooks', {
      method: 'POST',
      headers: webhookHeaders({ 'content-length': '2' }),
      body: '{}',
    });
    expect(again.status).toBe(401);
    expect(anonymousBodies.inFlight).toBe(0);
  });

  it('a chunked delivery takes the whole webhook limit from the budget while it is read', async () => {
    const giveBack = anonymousBodies.tryTake(ANONYMOUS_BODY_BUDGET_BYTES - MAX_WEBHOOK_BYTES + 1);
    try {
      const r = await post('/github/webhooks', webhookHeaders({ 'content-length': null }));
      expect(r.status).toBe(503);
      expect(r.pulled).toBe(false);
    } finally {
      giveBack!();
    }
  });
});

describe('routes that authenticate first read no body before they do', () => {
  // hono/body-limit read a chunked body whole before the route's token check
  it.each([
    ['operator API', '/api/v1/reservations', {}],
    ['agent API', '/agent/v1/heartbeat', { authorization: 'Bearer spk_agent_forged' }],
  ] as const)('%s: a chunked body without a valid token is refused unread', async (_what, path, auth) => {
    const r = await post(path, { 'content-type': 'application/json', ...auth });
    expect(r.status).toBe(401);
    expect(r.pulled).toBe(false);
  });
});

describe('the in-job leases API reads its body before the job token is known', () => {
  it('so its bodies share the anonymous budget: 503 unread past it', async () => {
    for (const path of ['/api/v1/leases/r-1/verify', '/api/v1/leases/r-1/receipt']) {
      const r = await withBudgetInUse(() =>
        post(path, {
          authorization: 'Bearer forged',
          'content-type': 'application/json',
          'content-length': '100',
        }),
      );
      expect(r.status, path).toBe(503);
      expect(r.headers.get('retry-after')).toBe('5');
      expect(r.pulled).toBe(false);
    }
    // with room, the body is read and the forged token refused
    const res = await c.app.request('/api/v1/leases/r-1/verify', {
      method: 'POST',
      headers: { authorization: 'Bearer forged', 'content-type': 'application/json' },
      body: JSON.stringify({ hostId: 'spark-2', fencingToken: 1 }),
    });
    expect(res.status).toBe(401);
    expect(anonymousBodies.inFlight).toBe(0);
  });
});

describe('on Node, an answer given before its body arrived closes the connection', () => {
  /** Sends a request head and `sent` bytes of a `declared`-byte body; resolves with the answer's head and whether the server closed. */
  async function partial(url: string, path: string, declared: number, sent: number) {
    const u = new URL(url);
    const socket = connect({ host: u.hostname, port: Number(u.port) });
    await new Promise((r) => socket.once('connect', r));
    let text = '';
    socket.setEncoding('latin1');
    socket.on('data', (d: string) => {
      text += d;
    });
    const closed = new Promise<boolean>((r) => {
      socket.once('end', () => r(true));
      setTimeout(() => r(false), 5000);
    });
    socket.write(
      `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${declared}\r\n\r\n${' '.repeat(sent)}`,
    );
    const ended = await closed;
    socket.destroy();
    return { head: text.slice(0, text.indexOf('\r\n\r\n')).toLowerCase(), ended };
  }

  it('a refusal while the body is still arriving says Connection: close and ends the socket; a complete one keeps it', async () => {
    const served = await startTestController({ env: { SPARK_WEBHOOK_SECRET: SECRET } });
    try {
      const refused = await partial(served.url, '/api/v1/reservations', 100_000, 1000);
      expect(refused.head).toMatch(/^http\/1\.1 401/);
      expect(refused.head).toContain('connection: close');
      expect(refused.ended).toBe(true);
      const whole = await partial(served.url, '/api/v1/reservations', 2, 2);
      expect(whole.head).toMatch(/^http\/1\.1 401/);
      expect(whole.head).not.toContain('connection: close');
      expect(whole.ended).toBe(false);
    } finally {
      await served.close();
    }
  });
});

describe('the budget', () => {
  it('takes what fits, refuses the rest, and gives back once', () => {
    const b = createBodyBudget(100);
    const one = b.tryTake(60)!;
    expect(b.tryTake(41)).toBeNull();
    const two = b.tryTake(40)!;
    expect(b.inFlight).toBe(100);
    one();
    one();
    expect(b.inFlight).toBe(40);
    two();
    expect(b.inFlight).toBe(0);
    expect(b.refused).toBe(1);
    expect(() => createBodyBudget(0)).toThrow(TypeError);
  });
});
