import { StatusError } from '../core/errors.ts';
import type { HostFacts } from '../core/model.ts';
import {
  AGENT_API_PREFIX,
  HeartbeatResponseSchema,
  type PollRequest,
  type PollResponse,
  PollResponseSchema,
  type Report,
  type ReportResponse,
} from '../core/protocol/agent.ts';
import { type HttpAnswer, HttpClient } from './http.ts';

/** The controller could not be reached (network, timeout, 5xx, 429): nothing new may start. */
export class ControllerUnreachable extends Error {
  override name = 'ControllerUnreachable';
  constructor(
    message: string,
    readonly retryAfterMs: number | null = null,
  ) {
    super(message);
  }
}

/** The controller answered and refused (4xx): `code` is its error code, e.g. `stale_fencing_token`. */
export class ControllerRejected extends StatusError {
  override name = 'ControllerRejected';
}

/** The agent's only way out: HTTP requests to the controller's agent API, over kept-alive sockets. */
export class ControllerClient {
  /** Requests that had to open a new connection (the rest reused one); for the bench and logs. */
  newConnections = 0;
  private readonly http = new HttpClient();

  constructor(
    private readonly baseUrl: string,
    private readonly token: string,
    private readonly requestTimeoutMs: number,
  ) {}

  private async call(path: string, body: unknown, timeoutMs: number, signal?: AbortSignal): Promise<unknown> {
    let res: HttpAnswer;
    try {
      res = await this.http.request({
        method: 'POST',
        url: new URL(`${AGENT_API_PREFIX}${path}`, this.baseUrl),
        headers: { authorization: `Bearer ${this.token}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
        timeoutMs,
        ...(signal ? { signal } : {}),
      });
    } catch (e) {
      if (signal?.aborted) throw e;
      throw new ControllerUnreachable((e as Error).message);
    }
    if (!res.reused) this.newConnections++;
    let json: unknown = null;
    try {
      json = res.text ? JSON.parse(res.text) : null;
    } catch {
      json = null;
    }
    if (res.status >= 200 && res.status < 300) return json;
    const err = (json as { error?: { code?: string; message?: string } } | null)?.error;
    if (res.status === 429 || res.status >= 500) {
      const ra = Number(res.headers['retry-after']);
      throw new ControllerUnreachable(
        `controller answered ${res.status}${err?.message ? `: ${err.message}` : ''}`,
        Number.isFinite(ra) && ra > 0 ? ra * 1000 : null,
      );
    }
    throw new ControllerRejected(res.status, err?.code ?? 'http_error', err?.message ?? `HTTP ${res.status}`);
  }

  /** Polls the desired state; the controller holds it while `since` is still current. */
  async poll(req: PollRequest, signal?: AbortSignal): Promise<PollResponse> {
    const json = await this.call('/poll', req, this.requestTimeoutMs + (req.maxWaitMs ?? 0), signal);
    const parsed = PollResponseSchema.safeParse(json);
    if (!parsed.success) {
      const i = parsed.error.issues[0];
      throw new ControllerUnreachable(
        `malformed poll response: ${i ? `${i.path.join('.') || '(root)'}: ${i.message}` : 'invalid'}`,
      );
    }
    return parsed.data;
  }

  /** Sends host facts; the answer carries the heartbeat period the controller expects. */
  async heartbeat(facts: HostFacts): Promise<{ heartbeatIntervalS: number }> {
    const parsed = HeartbeatResponseSchema.safeParse(
      await this.call('/heartbeat', { facts }, this.requestTimeoutMs),
    );
    if (!parsed.success) {
      throw new ControllerUnreachable(`malformed heartbeat response: ${parsed.error.issues[0]?.message}`);
    }
    return parsed.data;
  }

  async report(report: Report): Promise<ReportResponse> {
    return (await this.call('/report', report, this.requestTimeoutMs)) as ReportResponse;
  }

  /** Closes kept-alive sockets. */
  close(): void {
    this.http.close();
  }
}
