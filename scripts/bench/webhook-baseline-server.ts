/**
 * The webhook bench's baseline: the least a webhook endpoint can do here. Hono on
 * Node (`@hono/node-server`, as the controller), a libSQL file opened with the controller's own
 * settings (`openWebhookBaseline`, functions/ledger/raw-baseline.ts: WAL, synchronous=NORMAL on
 * every pooled connection), the signature verified over the raw body, one INSERT of the delivery,
 * 202. Run as its own process by
 * `scripts/bench/webhooks.ts`: `node --import tsx webhook-baseline-server.ts <db-file> <secret>`;
 * prints `listening <port>` once it accepts connections.
 */
import { serve } from '@hono/node-server';
import { verify } from '@octokit/webhooks-methods';
import { Hono } from 'hono';
import { openWebhookBaseline } from '../../functions/ledger/raw-baseline.ts';

const [file, secret] = process.argv.slice(2);
if (!file || !secret) {
  console.error('usage: webhook-baseline-server.ts <db-file> <secret>');
  process.exit(2);
}
const store = await openWebhookBaseline(file);
const app = new Hono();
app.post('/github/webhooks', async (c) => {
  const body = await c.req.text();
  const sig = c.req.header('x-hub-signature-256') ?? '';
  if (!(await verify(secret, body, sig).catch(() => false))) return c.json({ error: 'bad signature' }, 401);
  const id = c.req.header('x-github-delivery') ?? '';
  const event = c.req.header('x-github-event') ?? '';
  await store.insert({ id, event, body, receivedAt: Date.now() });
  return c.json({ ok: true }, 202);
});
const server = serve({ fetch: app.fetch, hostname: '127.0.0.1', port: 0 }, (info) => {
  console.log(`listening ${info.port}`);
});
process.once('SIGTERM', () => {
  server.close();
  store.close();
  process.exit(0);
});
