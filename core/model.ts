/**
 * Domain model shared by every part (DESIGN.md "Domain model"). Plain data, no I/O.
 * Times are epoch milliseconds.
 */

export const RESERVATION_KINDS = [
  'development',
  'deckard',
  'manual',
  'merge',
  'benchmark',
  'background',
] as const;
export type ReservationKind = (typeof RESERVATION_KINDS)[number];

export const TOPOLOGIES = ['single', 'pair'] as const;
export type Topology = (typeof TOPOLOGIES)[number];

export const SUITES = ['smoke', 'performance'] as const;
export type Suite = (typeof SUITES)[number];

export const RESERVATION_STATUSES = [
  'queued',
  'allocated',
  'preparing',
  'running',
  'releasing',
  'done',
  'cancelled',
  'superseded',
  'failed',
] as const;
export type ReservationStatus = (typeof RESERVATION_STATUSES)[number];

/** Statuses in which a reservation holds hosts (granted until termination is confirmed). */
export const ACTIVE_STATUSES: readonly ReservationStatus[] = [
  'allocated',
  'preparing',
  'running',
  'releasing',
];
export const TERMINAL_STATUSES: readonly ReservationStatus[] = ['done', 'cancelled', 'superseded', 'failed'];

export function isActiveStatus(s: ReservationStatus): boolean {
  return ACTIVE_STATUSES.includes(s);
}
export function isTerminalStatus(s: ReservationStatus): boolean {
  return TERMINAL_STATUSES.includes(s);
}

export const LEASE_STATUSES = ['active', 'expired', 'releasing', 'released'] as const;
export type LeaseStatus = (typeof LEASE_STATUSES)[number];
/** A lease in any of these binds its host: only `released` (agent-confirmed) frees it (rule 7). */
export const BINDING_LEASE_STATUSES: readonly LeaseStatus[] = ['active', 'expired', 'releasing'];

/** Persisted host phase; the public state adds what is derived (unknown, offline, held, draining). */
export const HOST_PHASES = [
  'idle',
  'service',
  'allocated',
  'cleaning',
  'restoring',
  'release-required',
  'quarantined',
] as const;
export type HostPhase = (typeof HOST_PHASES)[number];

export const HOST_STATES = [
  'unknown',
  'offline',
  'service',
  'idle',
  'held',
  'allocated',
  'draining',
  'cleaning',
  'restoring',
  'release-required',
  'quarantined',
] as const;
export type HostState = (typeof HOST_STATES)[number];

export interface GpuProcess {
  pid: number;
  name: string;
  usedMemoryMiB: number;
}

/** Facts an agent reports with each heartbeat. */
export interface HostFacts {
  /** null when the GPU could not be queried: unknown, never "no processes". */
  gpuProcesses: GpuProcess[] | null;
  gpuError?: string | null;
  freeDiskBytes: number | null;
  /** State of the home service (Deckard) if the host has one. */
  serviceState: 'serving' | 'stopped' | 'starting' | 'draining' | 'failed' | 'none' | 'unknown';
  runnerState: 'none' | 'starting' | 'running' | 'exited';
  interconnectOk: boolean | null;
}

export interface HostRecord {
  id: string;
  pool: string;
  gpus: number;
  homeService: string | null;
  managed: boolean;
  phase: HostPhase;
  lastHeartbeatAt: number | null;
  facts: HostFacts | null;
}

export interface ReservationRecord {
  id: string;
  /** Monotonic arrival order; FIFO within a priority. */
  seq: number;
  kind: ReservationKind;
  priority: number;
  topology: Topology;
  pool: string;
  /** Development requests may name a host (`sparkctl reserve --host spark-1`). */
  targetHost: string | null;
  repo: string | null;
  pr: number | null;
  headSha: string | null;
  suite: Suite | null;
  requester: string;
  status: ReservationStatus;
  createdAt: number;
  /** A queued reservation ends with reason `queue_timeout` at this time. */
  queueDeadline: number;
  /** Requested lease TTL in seconds (development); CI uses the configured CI TTL. */
  ttlS: number | null;
}

export interface LeaseRecord {
  id: string;
  reservationId: string;
  hostId: string;
  fencingToken: number;
  status: LeaseStatus;
  grantedAt: number;
  expiresAt: number;
}

/** Key used for the per-PR budget, or null for work not tied to a PR. */
export function prKey(r: Pick<ReservationRecord, 'repo' | 'pr'>): string | null {
  return r.repo && r.pr != null ? `${r.repo}#${r.pr}` : null;
}

/** Compare for queue order: priority desc, then FIFO (rule 1). */
export function queueOrder(a: ReservationRecord, b: ReservationRecord): number {
  return b.priority - a.priority || a.seq - b.seq;
}

export function hostsNeeded(t: Topology): number {
  return t === 'pair' ? 2 : 1;
}
