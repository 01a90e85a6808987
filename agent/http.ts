import * as http from 'node:http';
import * as https from 'node:https';

/**
 * A small HTTP/1.1 client on `node:http`/`node:https` with keep-alive sockets. The agent uses it
 * instead of `fetch`: fetch (undici) costs ~12 MiB of resident memory at first use, this ~3
 * (measured with the bundle on Node 20).
 */

export interface HttpAnswer {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
  /** Whether the request went over a kept-alive connection (else a new one was opened). */
  reused: boolean;
}

/** A transport error (refused, reset, timed out); `code` is Node's (`ECONNREFUSED`, `ETIMEDOUT`, …). */
export class HttpError extends Error {
  override name = 'HttpError';
  constructor(
    message: string,
    readonly code: string,
  ) {
    super(message);
  }
}

/** Answers larger than this are cut off: the agent never needs more (the controller's are a few KiB). */
const MAX_ANSWER_BYTES = 1024 * 1024;

export interface HttpRequest {
  method: 'GET' | 'POST';
  url: URL;
  headers?: Record<string, string>;
  body?: string;
  timeoutMs: number;
  signal?: AbortSignal;
}

/** One keep-alive connection pool per origin scheme. */
export class HttpClient {
  private readonly agents: { http: http.Agent; https: https.Agent };

  constructor() {
    const opts = {
      keepAlive: true,
      keepAliveMsecs: 1000,
      maxSockets: 4,
      maxFreeSockets: 2,
      scheduling: 'lifo' as const,
    };
    this.agents = { http: new http.Agent(opts), https: new https.Agent(opts) };
  }

  /**
   * Sends one request. A request that failed on a reused socket the server had just closed
   * (ECONNRESET/EPIPE before any answer) is repeated once on a new connection — every agent call
   * is idempotent on the controller.
   */
  async request(req: HttpRequest): Promise<HttpAnswer> {
    try {
      return await this.once(req);
    } catch (e) {
      const err = e as HttpError & { reusedSocket?: boolean };
      if (err.reusedSocket && (err.code === 'ECONNRESET' || err.code === 'EPIPE') && !req.signal?.aborted) {
        return this.once(req);
      }
      throw e;
    }
  }

  private once(r: HttpRequest): Promise<HttpAnswer> {
    const isHttps = r.url.protocol === 'https:';
    const mod = isHttps ? https : http;
    return new Promise<HttpAnswer>((resolve, reject) => {
      let settled = false;
      const finish = (f: () => void) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        r.signal?.removeEventListener('abort', onAbort);
        f();
      };
      const headers: Record<string, string> = { ...(r.headers ?? {}) };
      if (r.body != null) headers['content-length'] = String(Buffer.byteLength(r.body));
      const req = mod.request(r.url, {
        method: r.method,
        headers,
        agent: isHttps ? this.agents.https : this.agents.http,
      });
      const fail = (message: string, code: string) => {
        const err = Object.assign(new HttpError(message, code), { reusedSocket: req.reusedSocket });
        finish(() => reject(err));
        req.destroy();
      };
      const timer = setTimeout(
        () => fail(`no answer within ${Math.round(r.timeoutMs / 1000)} s`, 'ETIMEDOUT'),
        r.timeoutMs,
      );
      const onAbort = () => fail('aborted', 'ABORT_ERR');
      if (r.signal?.aborted) {
        onAbort();
        return;
      }
      r.signal?.addEventListener('abort', onAbort, { once: true });
      req.on('error', (e: NodeJS.ErrnoException) => fail(e.code ?? e.message, e.code ?? 'EIO'));
      req.on('response', (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (b: Buffer) => {
          size += b.length;
          if (size <= MAX_ANSWER_BYTES) chunks.push(b);
        });
        res.on('error', (e: NodeJS.ErrnoException) => fail(e.code ?? e.message, e.code ?? 'EIO'));
        res.on('end', () =>
          finish(() =>
            resolve({
              status: res.statusCode ?? 0,
              headers: res.headers,
              text: Buffer.concat(chunks).toString('utf8'),
              reused: req.reusedSocket,
            }),
          ),
        );
      });
      req.end(r.body);
    });
  }

  /** Closes idle sockets (the agent is stopping). */
  close(): void {
    this.agents.http.destroy();
    this.agents.https.destroy();
  }
}
