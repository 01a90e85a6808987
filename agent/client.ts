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
export class ControllerRejected extends Error {
  override name = 'ControllerRejected';
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** The agent's only way out: HTTP requests to the controller's agent API. */
export class ControllerClient {
  constructor(
    private readonly baseUrl: string,
    private readonly token: string,
    private readonly requestTimeoutMs: number,
    private readonly fetchImpl: typeof fetch = fetch,
  ) {}

  private async call(path: string, body: unknown, timeoutMs: number, signal?: AbortSignal): Promise<unknown> {
    const timeout = AbortSignal.timeout(timeoutMs);
    const both = signal ? AbortSignal.any([signal, timeout]) : timeout;
    let res: Response;
    try {
      res = await this.fetchImpl(new URL(`${AGENT_API_PREFIX}${path}`, this.baseUrl), {
        method: 'POST',
        headers: { authorization: `Bearer ${this.token}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
        signal: both,
      });
    } catch (e) {
      if (signal?.aborted) throw e;
      const cause = (e as { cause?: { code?: string } }).cause?.code;
      throw new ControllerUnreachable(
        timeout.aborted
          ? `no answer within ${Math.round(timeoutMs / 1000)} s`
          : `${cause ?? (e as Error).message}`,
      );
    }
    const text = await res.text().catch(() => '');
    let json: unknown = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      json = null;
    }
    if (res.ok) return json;
    const err = (json as { error?: { code?: string; message?: string } } | null)?.error;
    if (res.status === 429 || res.status >= 500) {
      const ra = Number(res.headers.get('retry-after'));
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
}
