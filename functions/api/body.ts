import type { Context, MiddlewareHandler } from 'hono';
import type { z } from 'zod';
import type { AppContext } from '../app-context.ts';
import { ApiError, badRequest } from '../errors.ts';
import { ANONYMOUS_BODY_DEADLINE_MS, anonymousBodies, bodyBudgetExhausted } from './anonymous-budget.ts';

/** Body size guard shared by routes (413 before parsing) unless a route sets a lower one. */
export const MAX_BODY_BYTES = 1024 * 1024;

/** A route's body limit as {@link limitBody} records it for {@link parseBody}. */
interface BodyLimit {
  max: number;
  tooLarge: () => ApiError;
}

const defaultTooLarge = (max: number) => () =>
  new ApiError(413, 'payload_too_large', `request body is larger than ${max} bytes`);

/**
 * A route's body limit (docs/adr/0031-bounded-public-surface-and-failing-ledger.md), checked
 * without reading the body: a Content-Length above `max` is refused (`tooLarge`) at once, and the
 * limit is recorded so that {@link parseBody} stops a chunked body as soon as it passes it. Unlike
 * `hono/body-limit`, which reads a chunked body whole before the next middleware runs, nothing is
 * read here: a body is read only by the handler, after the route's authentication
 * (docs/adr/0150-anonymous-body-budget.md). Nested limits keep the lowest.
 */
export function limitBody(max: number, tooLarge: () => ApiError = defaultTooLarge(max)): MiddlewareHandler {
  return async (c, next) => {
    const declared = declaredLength(c);
    if (declared !== null && declared > max) throw tooLarge();
    const outer = c.get('bodyLimit') as BodyLimit | undefined;
    if (!outer || max < outer.max) c.set('bodyLimit', { max, tooLarge } satisfies BodyLimit);
    await next();
  };
}

/**
 * The controller's one JSON body parser (operator API, agent API, in-job leases API). An empty
 * body is `{}` so optional-only bodies may be omitted; text that is not JSON is a 400
 * `invalid_json`; a body the schema refuses is a 400 `invalid_request` naming each field — all
 * before the ledger is touched. The body is read as a bounded stream within the route's limit
 * ({@link limitBody}); a request no middleware authenticated (the in-job leases API resolves its
 * job token together with the body's host id) reads it through {@link readAnonymousBody}, within
 * the process-wide budget for such bodies.
 */
export async function parseBody<S extends z.ZodType>(
  c: Context,
  schema: S,
  opts: { maxBytes?: number } = {},
): Promise<z.output<S>> {
  const route = c.get('bodyLimit') as BodyLimit | undefined;
  const own = opts.maxBytes ?? MAX_BODY_BYTES;
  const limit: BodyLimit = route && route.max <= own ? route : { max: own, tooLarge: defaultTooLarge(own) };
  // the operator API sets `principal` and the agent API `agent` before any handler runs
  const authenticated = c.get('principal') != null || c.get('agent') != null;
  const text = authenticated
    ? await readKnownBody(c, limit)
    : await readAnonymousBody(c, { max: limit.max, tooLarge: limit.tooLarge });
  let raw: unknown = {};
  if (text.trim()) {
    try {
      raw = JSON.parse(text);
    } catch {
      throw badRequest('request body is not valid JSON', 'invalid_json');
    }
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    throw badRequest(
      `invalid body: ${parsed.error.issues.map((i) => `${i.path.length ? i.path.join('.') : 'body'}: ${i.message}`).join('; ')}`,
    );
  }
  return parsed.data;
}

/** The Content-Length a request declares, null when it has none (chunked); 400 when it is no byte count. */
function declaredLength(c: Context): number | null {
  const header = c.req.header('content-length');
  if (header == null) return null;
  const n = Number(header);
  if (!Number.isSafeInteger(n) || n < 0) throw badRequest('Content-Length is not a byte count');
  return n;
}

/** An authenticated caller's body: bounded by its route's limit, not charged to the anonymous budget. */
async function readKnownBody(c: Context, limit: BodyLimit): Promise<string> {
  const declared = declaredLength(c);
  if (declared !== null && declared > limit.max) throw limit.tooLarge();
  const bytes = await readBodyBytes(c.req.raw, { max: limit.max, declared, tooLarge: limit.tooLarge });
  return new TextDecoder().decode(bytes);
}

/**
 * Reads the body of a request whose sender is not known yet (docs/adr/0150-anonymous-body-budget.md):
 * a Content-Length above `max` is refused before a byte is read; the declared length (`max` for
 * a chunked body) is taken from the process-wide budget for anonymous bodies, or the request is
 * answered 503 with Retry-After without reading it; the body is then read within `deadlineMs`
 * into one buffer ({@link readBodyBytes}) and the budget given back. (On Node the adapter closes
 * the connection of every answer given before its body arrived: `functions/node-server.ts`.)
 */
export async function readAnonymousBody(
  c: Context,
  o: { max: number; tooLarge: () => ApiError; deadlineMs?: number },
): Promise<string> {
  const declared = declaredLength(c);
  if (declared !== null && declared > o.max) throw o.tooLarge();
  const giveBack = anonymousBodies.tryTake(declared ?? o.max);
  if (!giveBack) throw bodyBudgetExhausted((c.get('ctx') as AppContext | undefined)?.log, c.req.path);
  try {
    const bytes = await readBodyBytes(c.req.raw, {
      max: o.max,
      declared,
      deadlineMs: o.deadlineMs ?? ANONYMOUS_BODY_DEADLINE_MS,
      tooLarge: o.tooLarge,
    });
    return new TextDecoder().decode(bytes);
  } finally {
    giveBack();
  }
}

/** A chunked body starts in a buffer this large and doubles up to its limit. */
const FIRST_CHUNKED_BUFFER = 64 * 1024;

/**
 * Reads a request body as a stream into one buffer: exactly `declared` bytes when the length is
 * known, else a buffer that doubles up to `max`. Each chunk is copied and dropped as it arrives,
 * so a body costs its own size, not its chunks plus a concatenated copy. Refused (413) as soon
 * as it passes `max` or its declared length, (408) when it is still arriving after `deadlineMs`,
 * and (400 `body_incomplete`) when the client went away before it ended.
 */
export async function readBodyBytes(
  req: Request,
  o: { max: number; declared: number | null; deadlineMs?: number; tooLarge: () => ApiError },
): Promise<Uint8Array> {
  if (!req.body) return new Uint8Array(0);
  const limit = Math.min(o.max, o.declared ?? o.max);
  const reader = req.body.getReader();
  let buf = new Uint8Array(o.declared ?? Math.min(limit, FIRST_CHUNKED_BUFFER));
  let size = 0;
  let timedOut = false;
  const deadlineMs = o.deadlineMs;
  const tooSlow = () =>
    new ApiError(408, 'body_timeout', `the request body did not arrive within ${(deadlineMs ?? 0) / 1000} s`);
  const timer =
    deadlineMs == null
      ? null
      : setTimeout(() => {
          timedOut = true;
          void reader.cancel().catch(() => undefined);
        }, deadlineMs);
  try {
    for (;;) {
      let r: ReadableStreamReadResult<Uint8Array>;
      try {
        r = await reader.read();
      } catch {
        if (timedOut) throw tooSlow();
        throw new ApiError(400, 'body_incomplete', 'the request body ended before it was complete');
      }
      if (r.done) break;
      const chunk = r.value;
      if (size + chunk.byteLength > limit) {
        void reader.cancel().catch(() => undefined);
        throw o.tooLarge();
      }
      if (size + chunk.byteLength > buf.byteLength) {
        const grown = new Uint8Array(Math.min(limit, Math.max(buf.byteLength * 2, size + chunk.byteLength)));
        grown.set(buf.subarray(0, size));
        buf = grown;
      }
      buf.set(chunk, size);
      size += chunk.byteLength;
    }
    if (timedOut) throw tooSlow();
  } finally {
    if (timer) clearTimeout(timer);
  }
  return size === buf.byteLength ? buf : buf.subarray(0, size);
}
