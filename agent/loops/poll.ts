import type { DesiredState, PollRequest, PollResponse } from '../../core/protocol/agent.ts';
import { ControllerRejected, type ControllerUnreachable } from '../client.ts';
import type { AgentLogger } from '../log.ts';
import { backoffMs } from './backoff.ts';

export interface PollLoopDeps {
  log: AgentLogger;
  longPollMs: number;
  backoffMaxMs: number;
  poll(req: PollRequest, signal: AbortSignal): Promise<PollResponse>;
  /** Acts on a desired state; returns when to look again without a change (null: on change only). */
  converge(d: DesiredState): Promise<{ recheckMs: number | null; forget: boolean }>;
  setPeriodS(s: number): void;
  /** Registers the abort of the poll in flight (a local event, or stop, ends it early). */
  setAbort(ac: AbortController | null): void;
  sleep(ms: number): Promise<void>;
  stopped(): boolean;
}

/**
 * Long-polls the desired state and converges on it. Fail closed: with the controller unreachable
 * it starts nothing new and retries with backoff (docs/architecture.md rule 8).
 */
export async function pollLoop(deps: PollLoopDeps): Promise<void> {
  let failures = 0;
  let recheckMs: number | null = null;
  let version: string | null = null;
  while (!deps.stopped()) {
    const ac = new AbortController();
    deps.setAbort(ac);
    const maxWaitMs = Math.min(deps.longPollMs, recheckMs ?? Number.POSITIVE_INFINITY);
    let desired: DesiredState;
    try {
      const res = await deps.poll({ since: version, maxWaitMs }, ac.signal);
      failures = 0;
      deps.setPeriodS(res.heartbeatIntervalS);
      version = res.version;
      desired = res.desired;
    } catch (e) {
      if (deps.stopped()) break;
      if (ac.signal.aborted) {
        // woken by a local event: ask again at once
        version = null;
        continue;
      }
      failures++;
      const wait = Math.max(
        (e as ControllerUnreachable).retryAfterMs ?? 0,
        backoffMs(failures, deps.backoffMaxMs),
      );
      if (e instanceof ControllerRejected) {
        deps.log.error('controller refused the poll', { status: e.status, code: e.code, error: e.message });
      } else {
        deps.log.warn('controller unreachable; starting nothing new', {
          error: (e as Error).message,
          failures,
          retryInMs: wait,
        });
      }
      await deps.sleep(wait);
      continue;
    } finally {
      deps.setAbort(null);
    }
    const r = await deps.converge(desired);
    recheckMs = r.recheckMs;
    if (r.forget) version = null;
  }
}
