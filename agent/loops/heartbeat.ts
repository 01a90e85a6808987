import type { HostFacts } from '../../core/model.ts';
import type { AgentLogger } from '../log.ts';
import { backoffMs } from './backoff.ts';

export interface HeartbeatLoopDeps {
  log: AgentLogger;
  backoffMaxMs: number;
  collectFacts(): Promise<HostFacts>;
  send(facts: HostFacts): Promise<{ heartbeatIntervalS: number }>;
  /** The current period (the controller sets it; the poll loop may update it too). */
  periodMs(): number;
  setPeriodS(s: number): void;
  sleep(ms: number): Promise<void>;
  stopped(): boolean;
  /** Extra fields for the debug line of each heartbeat. */
  stats?(): Record<string, unknown>;
}

/** Sends host facts every period; on failure retries with backoff, never faster than the period. */
export async function heartbeatLoop(deps: HeartbeatLoopDeps): Promise<void> {
  let failures = 0;
  while (!deps.stopped()) {
    try {
      const t0 = Date.now();
      const facts = await deps.collectFacts();
      const t1 = Date.now();
      // the controller sets the period: the first sleep must already use it, or a host whose
      // default period exceeds the controller's offline limit would flap offline
      deps.setPeriodS((await deps.send(facts)).heartbeatIntervalS);
      deps.log.debug('heartbeat sent', { factsMs: t1 - t0, sendMs: Date.now() - t1, ...deps.stats?.() });
      failures = 0;
    } catch (e) {
      failures++;
      deps.log.warn('heartbeat failed', { error: (e as Error).message, failures });
    }
    const base = deps.periodMs();
    await deps.sleep(failures ? Math.max(base, backoffMs(failures, deps.backoffMaxMs)) : base);
  }
}
