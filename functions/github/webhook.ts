import { verify } from '@octokit/webhooks-methods';
import { requestGate } from '../admission-loop.ts';
import type { App } from '../app.ts';
import { ApiError } from '../errors.ts';
import { insertDelivery } from '../ledger/inbox.ts';
import { inboxProcessor } from './inbox.ts';
import type { GitHubService } from './service.ts';

/** Webhook bodies above this are refused while streaming (GitHub caps payloads at 25 MB; ours are small). */
export const MAX_WEBHOOK_BYTES = 2 * 1024 * 1024;
/** A body still arriving after this is refused (408): GitHub itself gives up after 10 s. */
export const WEBHOOK_BODY_DEADLINE_MS = 10_000;

const SIGNATURE = /^sha256=[0-9a-f]{64}$/;
const DELIVERY = /^[0-9A-Za-z-]{1,100}$/;

const ledgerUnavailable = () =>
  new ApiError(
    503,
    'ledger_unavailable',
    'the ledger cannot be reached; GitHub will show this delivery as failed',
  );

/**
 * `POST /github/webhooks`, the inbox's front door (issue 13, DESIGN.md "Webhook intake is an
 * inbox"): headers first (signature shape, event, delivery id: refused before a byte of the
 * body is read), the body read as a bounded stream, `X-Hub-Signature-256` verified over it, JSON
 * checked, then one INSERT of the delivery (id unique, event, raw body) and 202. Processing
 * runs afterwards ({@link inboxProcessor}); a redelivery of a known id is answered 200 and
 * changes nothing. Fails closed: no secret configured or ledger unreachable → 503, nothing written.
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
    const gate = requestGate(s.ledger);
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
      const declared = Number(c.req.header('content-length') ?? '0');
      if (declared > MAX_WEBHOOK_BYTES) throw tooLarge();

      const raw = await readBounded(c.req.raw, MAX_WEBHOOK_BYTES, WEBHOOK_BODY_DEADLINE_MS);
      if (!(await verifySafe(s.webhookSecret, raw, sig))) throw badSignature();
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
      const action = stringAt(payload, ['action']);
      let inserted: boolean;
      try {
        inserted = await insertDelivery(s.ledger, {
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
      inboxProcessor(s).kick();
      return c.json({ ok: true, accepted: true, delivery }, 202);
    } finally {
      gate.leave();
    }
  });
}

/**
 * Reads a request body as a stream, refusing it (413) as soon as it passes `max` bytes and
 * (408) when it is still arriving after `deadlineMs`, so neither a huge chunked body nor a slow
 * one holds memory or a connection for long.
 */
export async function readBounded(req: Request, max: number, deadlineMs: number): Promise<string> {
  if (!req.body) return '';
  const reader = req.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    void reader.cancel().catch(() => undefined);
  }, deadlineMs);
  try {
    for (;;) {
      let r: ReadableStreamReadResult<Uint8Array>;
      try {
        r = await reader.read();
      } catch (e) {
        if (timedOut) throw tooSlow(deadlineMs);
        throw e;
      }
      if (r.done) break;
      size += r.value.byteLength;
      if (size > max) {
        void reader.cancel().catch(() => undefined);
        throw tooLarge();
      }
      chunks.push(r.value);
    }
    if (timedOut) throw tooSlow(deadlineMs);
  } finally {
    clearTimeout(timer);
  }
  const all = new Uint8Array(size);
  let at = 0;
  for (const ch of chunks) {
    all.set(ch, at);
    at += ch.byteLength;
  }
  return new TextDecoder().decode(all);
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

const tooSlow = (ms: number) =>
  new ApiError(408, 'body_timeout', `the webhook body did not arrive within ${ms / 1000} s`);

async function verifySafe(secret: string, body: string, sig: string): Promise<boolean> {
  try {
    return await verify(secret, body, sig);
  } catch {
    return false;
  }
}
