import { createHash } from 'node:crypto';

/**
 * SHA-256 of the text's UTF-8 bytes, in hex. `node:crypto`'s hash is synchronous: WebCrypto's
 * `digest` went through the thread pool and its argument checks on every agent request, poll
 * answer and check-run key (~40–180 µs a call against 4–7 µs here, and a thread hop that waits
 * for a core under load; docs/adr/0200). Workers have it with `nodejs_compat` (wrangler.toml,
 * https://developers.cloudflare.com/workers/runtime-apis/nodejs/crypto/).
 */
export async function sha256Hex(text: string): Promise<string> {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}
