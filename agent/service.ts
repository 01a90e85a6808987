import { HttpClient, type HttpError } from './http.ts';

/**
 * The home service's model-ready health check (Deckard on spark-1). Restore is gated on it:
 * the service is advertised again only after it answers 2xx (docs/architecture.md rule 5).
 */

export interface HealthResult {
  /** 2xx from the model-ready endpoint. */
  ok: boolean;
  /** HTTP status, or null when nothing answered (connection refused, timeout). */
  status: number | null;
  /**
   * Nothing listens on the health URL's port (connection refused): the service's process is gone.
   * A timeout is not this: a busy or hung service still holds its port (ADR 0175).
   */
  refused?: boolean;
  /** Status and a short body excerpt (or the network error), for the restore report. */
  detail: string;
}

const client = new HttpClient();

/** One model-ready probe. Never throws. */
export async function probeHealth(url: string, timeoutMs: number): Promise<HealthResult> {
  try {
    const res = await client.request({ method: 'GET', url: new URL(url), timeoutMs });
    const body = res.text.replace(/\s+/g, ' ').trim().slice(0, 300);
    const ok = res.status >= 200 && res.status < 300;
    return { ok, status: res.status, detail: `HTTP ${res.status}${body ? ` ${body}` : ''}` };
  } catch (e) {
    const err = e as HttpError;
    const why = err.code === 'ETIMEDOUT' ? `no answer within ${timeoutMs} ms` : err.message;
    return {
      ok: false,
      status: null,
      refused: err.code === 'ECONNREFUSED',
      detail: `health check unreachable: ${why}`,
    };
  }
}

/**
 * Polls the health URL until it passes or `timeoutMs` runs out; returns the last result. The
 * `stopped` callback ends the wait early when the agent shuts down.
 */
export async function waitHealthy(
  url: string,
  timeoutMs: number,
  pollMs: number,
  stopped: () => boolean = () => false,
): Promise<HealthResult> {
  const deadline = Date.now() + timeoutMs;
  let last: HealthResult = { ok: false, status: null, detail: 'health check not run' };
  // the operator learns more from the service's own error than from a probe that timed out at
  // the deadline, so the last answer the service gave is what a failure reports
  let lastAnswer: HealthResult | null = null;
  for (;;) {
    last = await probeHealth(url, Math.max(1000, Math.min(5000, deadline - Date.now())));
    if (last.status != null) lastAnswer = last;
    if (last.ok) return last;
    if (Date.now() >= deadline || stopped()) return lastAnswer ?? last;
    await new Promise((r) => setTimeout(r, Math.min(pollMs, Math.max(0, deadline - Date.now()))));
  }
}
