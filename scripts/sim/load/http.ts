import { request } from 'node:http';

/**
 * One HTTP POST on a fresh loopback connection (no keep-alive reuse). Load senders use it
 * because a reused idle connection races the server's keep-alive timeout: on a machine this
 * loaded the client can write a request onto a socket the server is closing, which surfaces as
 * ECONNRESET — a property of the test client, not of the controller.
 */
export function postOnce(
  url: string,
  headers: Record<string, string>,
  body: string,
  timeoutMs = 30_000,
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: 'POST',
        agent: false,
        headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) },
        timeout: timeoutMs,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }),
        );
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no response from ${url} within ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end(body);
  });
}
