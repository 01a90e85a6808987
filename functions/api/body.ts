import type { Context } from 'hono';
import type { z } from 'zod';
import { MAX_BODY_BYTES } from '../app.ts';
import { ApiError, badRequest } from '../errors.ts';

/**
 * Reads and validates a JSON request body. An empty body is `{}` so optional-only bodies may be
 * omitted; anything invalid is a 400 naming each field, before the ledger is touched.
 */
export async function parseBody<S extends z.ZodType>(c: Context, schema: S): Promise<z.output<S>> {
  const text = await c.req.text();
  if (text.length > MAX_BODY_BYTES) throw new ApiError(413, 'payload_too_large', 'request body too large');
  let raw: unknown = {};
  if (text.trim()) {
    try {
      raw = JSON.parse(text);
    } catch {
      throw badRequest('request body is not valid JSON');
    }
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    throw badRequest(
      parsed.error.issues.map((i) => `${i.path.length ? i.path.join('.') : 'body'}: ${i.message}`).join('; '),
    );
  }
  return parsed.data;
}
