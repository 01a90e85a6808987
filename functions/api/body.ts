import type { Context } from 'hono';
import type { z } from 'zod';
import { MAX_BODY_BYTES } from '../app.ts';
import { ApiError, badRequest } from '../errors.ts';

/**
 * The controller's one JSON body parser (operator API, agent API, in-job leases API). An empty
 * body is `{}` so optional-only bodies may be omitted; text that is not JSON is a 400
 * `invalid_json`; a body the schema refuses is a 400 `invalid_request` naming each field — all
 * before the ledger is touched.
 */
export async function parseBody<S extends z.ZodType>(
  c: Context,
  schema: S,
  opts: { maxBytes?: number } = {},
): Promise<z.output<S>> {
  const text = await c.req.text();
  const max = opts.maxBytes ?? MAX_BODY_BYTES;
  if (text.length > max)
    throw new ApiError(413, 'payload_too_large', `request body is larger than ${max} bytes`);
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
