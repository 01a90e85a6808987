import { verify } from '@octokit/webhooks-methods';
import { ZodError } from 'zod';
import type { App } from '../app.ts';
import { ApiError } from '../errors.ts';
import { GitHubError } from './client.ts';
import { deliverySeen, ignoreDelivery, intakeHandlers } from './intake/index.ts';
import type { GitHubService } from './service.ts';

/** Webhook bodies above this are refused before parsing (GitHub caps payloads at 25 MB; ours are small). */
export const MAX_WEBHOOK_BYTES = 2 * 1024 * 1024;

const SIGNATURE = /^sha256=[0-9a-f]{64}$/;
const DELIVERY = /^[0-9A-Za-z-]{1,100}$/;

const ledgerUnavailable = () =>
  new ApiError(
    503,
    'ledger_unavailable',
    'the ledger cannot be reached; GitHub will show this delivery as failed',
  );

/**
 * `POST /github/webhooks`: verifies `X-Hub-Signature-256` over the raw body, deduplicates on
 * `X-GitHub-Delivery`, and hands the event to the intake. Fails closed: no secret configured or
 * ledger unreachable → 503 and nothing written.
 */
export function mountWebhook(app: App, svc: () => GitHubService) {
  app.post('/github/webhooks', async (c) => {
    const s = svc();
    if (!s.webhookSecret)
      throw new ApiError(
        503,
        'webhook_not_configured',
        'SPARK_WEBHOOK_SECRET is not set; refusing every delivery',
      );
    const declared = Number(c.req.header('content-length') ?? '0');
    if (declared > MAX_WEBHOOK_BYTES) throw tooLarge();
    const raw = await c.req.text();
    if (new TextEncoder().encode(raw).byteLength > MAX_WEBHOOK_BYTES) throw tooLarge();

    const sig = c.req.header('x-hub-signature-256') ?? '';
    if (!SIGNATURE.test(sig) || !(await verifySafe(s.webhookSecret, raw, sig)))
      throw new ApiError(
        401,
        'bad_signature',
        'X-Hub-Signature-256 is missing or does not match the webhook secret',
      );

    const event = c.req.header('x-github-event') ?? '';
    const delivery = c.req.header('x-github-delivery') ?? '';
    if (!event || !DELIVERY.test(delivery))
      throw new ApiError(400, 'invalid_request', 'X-GitHub-Event and X-GitHub-Delivery headers are required');
    if (event === 'ping') return c.json({ ok: true, pong: true });

    let payload: unknown;
    try {
      payload = JSON.parse(raw);
    } catch {
      throw new ApiError(
        400,
        'invalid_json',
        'the webhook body is not JSON (set the content type to application/json)',
      );
    }
    const action =
      typeof (payload as { action?: unknown })?.action === 'string'
        ? (payload as { action: string }).action
        : null;

    try {
      if (await deliverySeen(s, delivery)) return c.json({ ok: true, duplicate: true });
    } catch (e) {
      s.log.warn('webhook: ledger unreachable', { error: String(e) });
      throw ledgerUnavailable();
    }
    // own keys only: an event named "constructor" or "toString" must not reach Object.prototype
    const handler = Object.hasOwn(intakeHandlers, event) ? intakeHandlers[event] : undefined;
    const d = { id: delivery, event };
    try {
      const r = handler ? await handler(s, d, payload) : await ignoreDelivery(s, d, action);
      s.log.info('webhook', { event, action, delivery, result: r.result });
      return c.json({ ok: true, ...r });
    } catch (e) {
      if (e instanceof ZodError) {
        throw new ApiError(
          400,
          'invalid_payload',
          `${event} payload is missing fields: ${e.issues.map((i) => i.path.join('.')).join(', ')}`.slice(
            0,
            300,
          ),
        );
      }
      if (e instanceof GitHubError) {
        // GitHub shows the failed delivery; nothing was written, so a redelivery starts clean
        s.log.warn('webhook: GitHub call failed', { event, delivery, error: e.message });
        throw new ApiError(
          502,
          'github_unavailable',
          `could not check the request with GitHub: ${e.message}`.slice(0, 300),
        );
      }
      if (e instanceof ApiError) throw e;
      try {
        await s.ledger.ping();
      } catch {
        throw ledgerUnavailable();
      }
      throw e;
    }
  });
}

const tooLarge = () =>
  new ApiError(413, 'payload_too_large', `webhook body exceeds ${MAX_WEBHOOK_BYTES} bytes`);

async function verifySafe(secret: string, body: string, sig: string): Promise<boolean> {
  try {
    return await verify(secret, body, sig);
  } catch {
    return false;
  }
}
