import { verify } from '@octokit/webhooks-methods';
import { ANONYMOUS_BODY_DEADLINE_MS } from '../api/anonymous-budget.ts';
import { readAnonymousBody } from '../api/body.ts';
import type { App } from '../app.ts';
import { ApiError } from '../errors.ts';
import type { GitHubService } from './service.ts';

/** Webhook bodies above this are refused while streaming (GitHub caps payloads at 25 MB; ours are small). */
export const MAX_WEBHOOK_BYTES = 2 * 1024 * 1024;
/** A body still arriving after this is refused (408): GitHub itself gives up after 10 s. */
export const WEBHOOK_BODY_DEADLINE_MS = ANONYMOUS_BODY_DEADLINE_MS;

const SIGNATURE = /^sha256=[0-9a-f]{64}$/;
const DELIVERY = /^[0-9A-Za-z-]{1,100}$/;
/**
 * The App's webhook is configured with content type `application/json` (docs/github-app.md);
 * GitHub then sends `Content-Type: application/json` with each delivery
 * (https://docs.github.com/en/webhooks/webhook-events-and-payloads#delivery-headers).
 */
const JSON_TYPE = /^application\/json\s*(?:;|$)/i;

const ledgerUnavailable = () =>
  new ApiError(
    503,
    'ledger_unavailable',
    'the ledger cannot be reached; GitHub will show this delivery as failed',
  );

/**
 * `POST /github/webhooks`, the inbox's front door (docs/adr/0035-webhook-inbox.md): headers
 * first — signature shape, event, delivery id, content type, a Content-Length within
 * {@link MAX_WEBHOOK_BYTES}, and room in the process-wide budget for anonymous bodies (503 with
 * Retry-After past it, docs/adr/0150-anonymous-body-budget.md) — all refused before a byte of the
 * body is read; then the body read as a bounded stream into one buffer, `X-Hub-Signature-256`
 * verified over it, JSON checked, then one INSERT of the delivery (id unique, event, raw body)
 * and 202. Processing runs afterwards (the service's inbox processor, `svc.inbox`); a redelivery
 * of a known id is answered 200 and changes nothing. Fails closed: no secret configured or ledger
 * unreachable → 503, nothing written.
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
    const { gate } = s;
    gate.enter();
    try {
      const sig = c.req.header('x-hub-signature-256') ?? '';
      if (!SIGNATURE.test(sig)) throw badSignature();
      const event = c.req.header('x-github-event') ?? '';
      const delivery = c.req.header('x-github-delivery') ?? '';
      if (!event || !DELIVERY.test(delivery))
        throw new ApiError(
          400,
          'invalid_request',
          'X-GitHub-Event and X-GitHub-Delivery headers are required',
        );
      if (!JSON_TYPE.test(c.req.header('content-type') ?? ''))
        throw new ApiError(
          415,
          'unsupported_media_type',
          'webhook deliveries must be application/json: set the content type of the GitHub App webhook to application/json',
        );

      const raw = await readAnonymousBody(c, {
        max: MAX_WEBHOOK_BYTES,
        deadlineMs: WEBHOOK_BODY_DEADLINE_MS,
        tooLarge,
      });
      if (!(await verifySafe(s.webhookSecret, raw, sig))) throw badSignature();
      if (event === 'ping') return c.json({ ok: true, pong: true });

      let payload: unknown;
      try {
        payload = JSON.parse(raw);
      } catch {
        throw new ApiError(400, 'invalid_json', 'the webhook body is not valid JSON');
      }
      const action = stringAt(payload, ['action']);
      let inserted: boolean;
      try {
        inserted = await s.ledger.inbox.insert({
          id: delivery,
          event,
          action,
          orderKey: orderKeyOf(payload),
          body: raw,
        });
      } catch (e) {
        s.log.warn('webhook: ledger unreachable', { error: String(e) });
        throw ledgerUnavailable();
      }
      if (!inserted) return c.json({ ok: true, duplicate: true, delivery });
      s.inbox.kick();
      return c.json({ ok: true, accepted: true, delivery }, 202);
    } finally {
      gate.leave();
    }
  });
}

function stringAt(v: unknown, path: string[]): string | null {
  let cur = v;
  for (const k of path) {
    if (cur === null || typeof cur !== 'object' || !Object.hasOwn(cur, k)) return null;
    cur = (cur as Record<string, unknown>)[k];
  }
  return typeof cur === 'string' ? cur.slice(0, 200) : null;
}

function numberAt(v: unknown, path: string[]): number | null {
  let cur = v;
  for (const k of path) {
    if (cur === null || typeof cur !== 'object' || !Object.hasOwn(cur, k)) return null;
    cur = (cur as Record<string, unknown>)[k];
  }
  return typeof cur === 'number' && Number.isSafeInteger(cur) ? cur : null;
}

/**
 * The inbox's ordering key: deliveries about one PR are processed in arrival order, other
 * keys do not wait for them. `push` and `workflow_job` order per repository.
 */
export function orderKeyOf(payload: unknown): string | null {
  const repo = stringAt(payload, ['repository', 'full_name'])?.toLowerCase() ?? null;
  if (!repo) return null;
  const pr = numberAt(payload, ['pull_request', 'number']) ?? numberAt(payload, ['issue', 'number']);
  return pr == null ? repo : `${repo}#${pr}`;
}

const badSignature = () =>
  new ApiError(401, 'bad_signature', 'X-Hub-Signature-256 is missing or does not match the webhook secret');

const tooLarge = () =>
  new ApiError(413, 'payload_too_large', `webhook body exceeds ${MAX_WEBHOOK_BYTES} bytes`);

async function verifySafe(secret: string, body: string, sig: string): Promise<boolean> {
  try {
    return await verify(secret, body, sig);
  } catch {
    return false;
  }
}
