import { afterEach, describe, expect, it } from 'vitest';
import { createApp } from '../../functions/app.ts';
import { dashboardModule } from '../../functions/dashboard/index.ts';
import { heardAnHourAgo, startApiController, until } from './cli-harness.ts';

let ctl: Awaited<ReturnType<typeof startApiController>> | null = null;
afterEach(async () => {
  await ctl?.c.close();
  ctl = null;
});

describe('dashboard change stream', () => {
  it('on Node pushes `changed` when the ledger changes', async () => {
    ctl = await startApiController();
    // the fleet's backends known, so the development request below is accepted (ADR 0176)
    await heardAnHourAgo(ctl.c.ledger);
    const abort = new AbortController();
    const res = await fetch(`${ctl.c.url}/dashboard/events`, { signal: abort.signal });
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const reader = res.body!.getReader();
    let text = '';
    const pump = (async () => {
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) return;
          text += new TextDecoder().decode(value);
        }
      } catch {
        // aborted at the end of the test
      }
    })();
    await until('hello', () => text.includes('event: hello'));
    expect(text).not.toContain('event: changed');
    expect((await ctl.call(ctl.tokens.dev, 'POST', '/api/v1/reservations', {})).status).toBe(201);
    await until('changed event', () => text.includes('event: changed'), 3000);
    abort.abort();
    await pump;
  });

  it('on Workers answers once with a retry so the browser polls', async () => {
    ctl = await startApiController();
    const app = createApp({ ...ctl.c.ctx, runtime: 'worker' }, [dashboardModule]);
    const res = await app.request('/dashboard/events');
    const body = await res.text();
    expect(body).toMatch(/event: changed\ndata: poll\nretry: 5000/);
  });

  it('serves the live fragment without caching', async () => {
    ctl = await startApiController();
    const res = await fetch(`${ctl.c.url}/dashboard/live`);
    expect(res.headers.get('cache-control')).toBe('no-store');
    const html = await res.text();
    expect(html).toMatch(/^<div id="live"/);
    expect(html).toContain('data-host="spark-1"');
  });
});
