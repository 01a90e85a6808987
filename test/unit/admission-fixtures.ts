import type { AdmissionConfig, AdmissionInput } from '../../core/admission.ts';
import { defaultConfig } from '../../core/config.ts';
import type { HostFacts, HostRecord, LeaseRecord, ReservationRecord } from '../../core/model.ts';

/** Builders for pure admission scenarios (no ledger). */

export const NOW = Date.UTC(2026, 10, 30, 9, 0, 0);

export function config(over: Partial<AdmissionConfig> = {}): AdmissionConfig {
  const d = defaultConfig();
  return { budgets: d.budgets, timings: d.timings, preferHosts: d.preferHosts, ...over };
}

/**
 * A host's heartbeat facts. The fixture fleet runs the dstack executor, so its hosts can serve
 * development leases (ADR 0176); a scenario about a host that cannot says `executor: 'jit-runner'`.
 */
export const facts = (over: Partial<HostFacts> = {}): HostFacts => ({
  gpuProcesses: [],
  freeDiskBytes: 1e12,
  serviceState: 'none',
  runnerState: 'none',
  interconnectOk: true,
  executor: 'dstack',
  ...over,
});

export function host(id: string, over: Partial<HostRecord> = {}): HostRecord {
  const home = id === 'spark-1' ? 'deckard' : null;
  return {
    id,
    pool: 'spark',
    gpus: 1,
    homeService: home,
    managed: true,
    phase: home ? 'service' : 'idle',
    lastHeartbeatAt: NOW - 1000,
    facts: home
      ? facts({ serviceState: 'serving', gpuProcesses: [{ pid: 10, name: 'deckard', usedMemoryMiB: 80000 }] })
      : facts(),
    ...over,
  };
}

let seq = 0;
export function resetSeq() {
  seq = 0;
}

export function req(over: Partial<ReservationRecord> & { id?: string } = {}): ReservationRecord {
  seq++;
  const kind = over.kind ?? 'manual';
  const prio = { development: 100, deckard: 90, manual: 80, merge: 70, benchmark: 50, background: 20 }[kind];
  return {
    id: over.id ?? `r-${seq}`,
    seq,
    kind,
    priority: prio,
    topology: 'single',
    pool: 'spark',
    targetHost: null,
    repo: 'acme/butter',
    pr: seq,
    headSha: 'a'.repeat(40),
    suite: 'smoke',
    requester: 'maintainer',
    status: 'queued',
    createdAt: NOW - 60_000,
    queueDeadline: NOW + 3600_000,
    ttlS: null,
    ...over,
  };
}

export function lease(reservationId: string, hostId: string, token: number, over: Partial<LeaseRecord> = {}) {
  return {
    id: `l-${hostId}-${token}`,
    reservationId,
    hostId,
    fencingToken: token,
    status: 'active',
    grantedAt: NOW - 60_000,
    expiresAt: NOW + 600_000,
    ...over,
  } satisfies LeaseRecord;
}

export function input(
  hosts: HostRecord[],
  reservations: ReservationRecord[],
  leases: LeaseRecord[] = [],
  cfg: AdmissionConfig = config(),
): AdmissionInput {
  return { now: NOW, config: cfg, hosts, reservations, leases };
}
