import type { SparkConfig } from './config.ts';
import type { HostRecord, HostState, LeaseRecord, ReservationRecord } from './model.ts';

/**
 * What one admission pass reads and what it decides (the rules it applies:
 * docs/adr/0206-admission-as-named-steps.md). Plain data: the ledger applies a plan in one write
 * transaction (docs/adr/0002-one-write-transaction-per-admission-pass.md).
 */

export type AdmissionConfig = Pick<SparkConfig, 'budgets' | 'timings' | 'preferHosts'>;

export interface AdmissionInput {
  now: number;
  config: AdmissionConfig;
  hosts: readonly HostRecord[];
  /** Leases that still bind a host (active, expired, releasing); others are ignored. */
  leases: readonly LeaseRecord[];
  /** Queued and active reservations; terminal ones are ignored. */
  reservations: readonly ReservationRecord[];
  /**
   * Budget slots (`budgetSlot`) whose build already had a lane admitted and still has a lane
   * queued: the slot stays taken between the lanes until the build's last lane finishes (the
   * budget rule). The ledger computes it; absent means none.
   */
  keptSlots?: readonly string[];
}

export interface Grant {
  reservationId: string;
  hostIds: string[];
  /** Hosts whose home service must be lent (drained, stopped, GPU-verified) before work starts. */
  lend: string[];
  gpus: number;
}

export type WaitCode =
  | 'hosts-busy'
  | 'held-for-pair'
  | 'budget-prs'
  | 'budget-pr-gpus'
  | 'budget-gpus'
  | 'target-unavailable'
  | 'pool-too-small'
  /** Background CI (class 20) waits while any other class waits in its pool. */
  | 'background-yields'
  /** An explicit Deckard start whose idle host is restoring its service for it. */
  | 'restoring';

export interface Wait {
  reservationId: string;
  /** 1-based position among queued reservations, in admission order. */
  position: number;
  code: WaitCode;
  reason: string;
}

export interface Expiry {
  leaseId: string;
  reservationId: string;
  hostId: string;
  /** `release-required`: processes remain (or are unknown) — never killed, never admitted (rule 7). */
  outcome: 'release' | 'release-required';
}

export interface AdmissionPlan {
  grants: Grant[];
  waits: Wait[];
  holds: { hostId: string; reservationId: string }[];
  draining: { hostId: string; reservationId: string }[];
  expiries: Expiry[];
  queueTimeouts: string[];
  /** Deckard-start requests whose host already serves: nothing to grant, the request is met. */
  satisfied: string[];
  /**
   * Explicit Deckard starts on an idle host with a home service: the host goes `restoring` at once
   * (model-ready gate, bounded retries, quarantine on failure); the request is met when it serves.
   */
  restores: { hostId: string; reservationId: string }[];
  /**
   * Active pairs with a node whose heartbeat went stale: the pair fails as a unit, the healthy
   * nodes are released, the dark ones need release until their agent returns.
   */
  pairLosses: { reservationId: string; lostHosts: string[]; healthyHosts: string[] }[];
  hostStates: Record<string, HostState>;
  /** Why a host that looks free cannot be granted (foreign GPU process, GPU unknown). */
  hostNotes: Record<string, string>;
}

/** A plan that decides nothing yet; the pass's steps fill it in. */
export function emptyPlan(): AdmissionPlan {
  return {
    grants: [],
    waits: [],
    holds: [],
    draining: [],
    expiries: [],
    queueTimeouts: [],
    satisfied: [],
    restores: [],
    pairLosses: [],
    hostStates: {},
    hostNotes: {},
  };
}
