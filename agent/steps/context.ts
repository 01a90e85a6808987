import type { HostFacts } from '../../core/model.ts';
import type { Report } from '../../core/protocol/agent.ts';
import type { AgentConfig } from '../config.ts';
import type { Executor } from '../executor/types.ts';
import type { GpuQuery } from '../gpu.ts';
import type { HostPort } from '../host/port.ts';
import type { AgentLogger } from '../log.ts';
import type { AgentState, LeaseState } from '../state-file.ts';

/** What a step may use: the host port, the executor, the state (and how to persist it), the controller. */
export interface StepContext {
  cfg: AgentConfig;
  port: HostPort;
  executor: Executor;
  log: AgentLogger;
  /** The agent's persisted progress; steps change it and call {@link save} before acting on it. */
  state: AgentState;
  save(): void;
  /** Sends a step result to the controller (throws `ControllerRejected`/`ControllerUnreachable`). */
  report(r: Report): Promise<void>;
  /** Host facts as a heartbeat would send them now (`gpu`: a GPU query just made). */
  collectFacts(gpu?: GpuQuery): Promise<HostFacts>;
  /** Interruptible sleep (ends early when the agent stops). */
  sleep(ms: number): Promise<void>;
  stopped(): boolean;
  heartbeatMs(): number;
  /** Last interconnect check result, shared with the heartbeat facts. */
  interconnect: { ok: boolean; at: number } | null;
}

/** `again`: decide the next step now; `wait`: nothing more to do until `ms` (null: a new desired state). */
export type StepResult = { next: 'again' } | { next: 'wait'; ms: number | null };

export const again: StepResult = { next: 'again' };
export const waitFor = (ms: number | null): StepResult => ({ next: 'wait', ms });

/** The local lease record; a step is only chosen when it exists. */
export function currentLease(ctx: StepContext): LeaseState {
  const l = ctx.state.lease;
  if (!l) throw new TypeError('step needs a local lease record but there is none');
  return l;
}
