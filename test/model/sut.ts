import type fc from 'fast-check';
import type { AdmissionPlan } from '../../core/admission.ts';
import type { HostFacts } from '../../core/model.ts';
import type * as M from './world.ts';

/** What a model test drives. Optional operations are ones the pure engine test has no system for. */
export interface Sut {
  request?(q: M.NewRequest): Promise<string | null>;
  cancel?(id: string): Promise<boolean>;
  supersede?(repo: string, pr: number, sha: string): Promise<string[]>;
  heartbeat?(hostId: string, facts: HostFacts): Promise<void>;
  setManaged?(hostId: string, managed: boolean): Promise<void>;
  advance?(id: string, to: 'preparing' | 'running'): Promise<boolean>;
  beginRelease?(id: string, outcome: string): Promise<boolean>;
  confirmReleased?(hostId: string, token: number, processesRemain: boolean): Promise<boolean>;
  /** A preflight's lease check: is `token` the host's current lease? */
  verifyLease?(hostId: string, token: number): Promise<boolean>;
  /** The agent's `restored` report (Deckard's model-ready health, or its failure). */
  recordRestore?(hostId: string, ok: boolean, token: number): Promise<boolean>;
  /** The agent's `cleaned` / `processes_remain` report through the agent-report command. */
  report?(hostId: string, token: number, type: 'cleaned' | 'processes_remain'): Promise<boolean>;
  clearQuarantine?(hostId: string): Promise<boolean>;
  /** Runs `fn` (a command that must be refused) and checks the system changed nothing at all. */
  unchanged?<T>(fn: () => Promise<T>): Promise<T>;
  tick(ms: number): void;
  /** One admission pass; `tokens` are the fencing tokens the system issued, by reservation and host. */
  pass(w: M.World): Promise<{ plan: AdmissionPlan; tokenFor?: (resId: string, hostId: string) => number }>;
  /** Compares everything the system holds with the world; throws on any difference. */
  check(w: M.World): Promise<void>;
}

export type Cmd = fc.AsyncCommand<M.World, Sut>;
