/**
 * Domain model shared by every part (docs/architecture.md "Domain model"). Plain data, no I/O.
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

/** Backends of the agent's executor seam; `jit-runner` is the default. */
export const EXECUTOR_NAMES = ['jit-runner', 'slurm', 'dstack'] as const;
export type ExecutorName = (typeof EXECUTOR_NAMES)[number];

/**
 * How a repository's CI work runs: `runner` — a dispatched GitHub job on a one-job
 * JIT runner (default); `task` — the agent runs the repository's spark-test.sh at the exact SHA
 * as a dstack task, and reports its outcome and receipt itself.
 */
export const CI_MODES = ['runner', 'task'] as const;
export type CiMode = (typeof CI_MODES)[number];

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

/**
 * Granted work that has not begun to release: it can be released, recovered or terminated, and
 * its job may still run.
 */
export const RELEASABLE_STATUSES = [
  'allocated',
  'preparing',
  'running',
] as const satisfies readonly ReservationStatus[];
export type ReleasableStatus = (typeof RELEASABLE_STATUSES)[number];
/** Every host prepared: the workflow is dispatched and its one-job runner registered or running. */
export const RUNNER_STATUSES = ['preparing', 'running'] as const satisfies readonly ReservationStatus[];
export function isRunnerStatus(s: string): s is (typeof RUNNER_STATUSES)[number] {
  return (RUNNER_STATUSES as readonly string[]).includes(s);
}
/** Statuses in which a reservation holds hosts (granted until termination is confirmed, rule 7). */
// written out, not spread: a bundle importing core/model.ts can then drop what it does not use
export const ACTIVE_STATUSES = [
  'allocated',
  'preparing',
  'running',
  'releasing',
] as const satisfies readonly ReservationStatus[];
export type ActiveStatus = (typeof ACTIVE_STATUSES)[number];
/** Queued or active: work a PR still has open. */
export const OPEN_STATUSES = [
  'queued',
  'allocated',
  'preparing',
  'running',
  'releasing',
] as const satisfies readonly ReservationStatus[];
export const TERMINAL_STATUSES = [
  'done',
  'cancelled',
  'superseded',
  'failed',
] as const satisfies readonly ReservationStatus[];
export type TerminalStatus = (typeof TERMINAL_STATUSES)[number];

const has = (set: readonly string[], s: string): boolean => set.includes(s);
export function isReleasableStatus(s: string): s is ReleasableStatus {
  return has(RELEASABLE_STATUSES, s);
}
export function isActiveStatus(s: string): s is ActiveStatus {
  return has(ACTIVE_STATUSES, s);
}
export function isTerminalStatus(s: string): s is TerminalStatus {
  return has(TERMINAL_STATUSES, s);
}

/**
 * How a reservation ended (or is ending, while `releasing`), kept in `reservations.outcome`.
 * Never a queue wait code: that is `reservations.wait_code`.
 */
export const OUTCOMES = [
  // the GitHub job's result (workflow_job completed)
  'passed',
  'failed',
  'cancelled',
  // withdrawn while queued
  'superseded',
  'queue_timeout',
  // a Deckard start whose host already serves: met without a lease
  'already_serving',
  // a Deckard start that drove the restore path: met when the model-ready gate passed, or ended
  // when the restore failed past its retry budget and the host was quarantined
  'restored',
  'restore_failed',
  // a pair whose node lost contact: failed as a unit
  'pair_node_lost',
  // released by a person or by the lease running out
  'released',
  'recovered',
  'terminated',
  'expired',
  // ended by the controller before or around the job
  'runner exited 0',
  'runner_not_picked_up',
  // a CI task its backend (dstack) never started within timings.taskStartTimeoutS (ADR 0120)
  'task_not_started',
  'github_failed',
  'withdrawn',
  // a job that is not the admitted one took the reservation's runner: stopped
  'foreign_job',
  // the host refused before anything of the PR ran: preparation failed, or the agent's own
  // preflight before the runner (ADR 0177)
  'preflight_failed',
  // a CI lease expired (its host stopped heartbeating) before its runner or task started (ADR 0177)
  'lease_lost',
] as const;
export type Outcome = (typeof OUTCOMES)[number];
/**
 * Outcomes of work that ended before the PR's script started because the infrastructure failed
 * (ADR 0177): not a test result. The check says so in the spec's words, never "failed".
 */
export const NOT_RUN_OUTCOMES = [
  'task_not_started',
  'runner_not_picked_up',
  'preflight_failed',
  'lease_lost',
] as const satisfies readonly Outcome[];
export type NotRunOutcome = (typeof NOT_RUN_OUTCOMES)[number];
export function isNotRunOutcome(s: string | null | undefined): s is NotRunOutcome {
  return s != null && has(NOT_RUN_OUTCOMES, s);
}
/** The cause of a not-run outcome in the spec's words, for check runs, receipts and the dashboard. */
export const NOT_RUN_CAUSES: Readonly<Record<NotRunOutcome, string>> = {
  task_not_started: 'the task never started',
  runner_not_picked_up: 'the runner never picked the job up',
  preflight_failed: 'the host preflight refused',
  lease_lost: 'the lease was lost',
};

/** `not run — the task never started` for a not-run outcome, else null: a fixed public phrase. */
export function notRunPhrase(outcome: unknown): string | null {
  return typeof outcome === 'string' && isNotRunOutcome(outcome)
    ? `not run — ${NOT_RUN_CAUSES[outcome]}`
    : null;
}

/** Outcomes GitHub's `workflow_job` completed sets; they win over how the release was started. */
export const JOB_OUTCOMES = ['passed', 'failed', 'cancelled'] as const satisfies readonly Outcome[];
export type JobOutcome = (typeof JOB_OUTCOMES)[number];
export function isJobOutcome(s: string | null | undefined): s is JobOutcome {
  return s != null && has(JOB_OUTCOMES, s);
}
/**
 * Outcomes that end a reservation `done` rather than `failed`: a pass, an ordinary release, a
 * runner that exited cleanly before GitHub's job result arrived (the check run takes its
 * conclusion from `workflow_job`), and a development lease that expired with nothing left running.
 */
export const DONE_OUTCOMES = [
  'passed',
  'released',
  'runner exited 0',
  'expired',
] as const satisfies readonly Outcome[];
export function endsDone(outcome: string | null): boolean {
  return outcome == null || has(DONE_OUTCOMES, outcome);
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
  /** The host's own backend (its agent.json `executor`); absent from agents older than ADR 0166. */
  executor?: ExecutorName;
  /**
   * The host's dstack enrolment as its agent last checked it (docs/adr/0166-dstack-enrolment-fact.md):
   * its fleet active on the dstack server with an instance available; null: no dstack section.
   */
  dstack?: DstackEnrolment | null;
}

/** What the agent found when it asked its dstack server for its fleet. */
export interface DstackEnrolment {
  fleet: string;
  ok: boolean;
  /** What was found, in words (the fleet's status and instances, or why it could not be read). */
  detail: string;
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
  /**
   * A restore drill (`sparkctl deckard drill`): development work that only lends and restores its
   * host's home service and is released once prepared. Nobody attaches to it, so unlike other
   * development work it needs no dstack host (ADR 0176).
   */
  drill?: boolean;
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

/**
 * Whether a host can serve a development lease (ADR 0176): a development lease is used through the
 * dstack dev environment made for it (`dstack attach`), so only a host whose agent runs the
 * `dstack` executor has one to give. The controller knows it from the host's heartbeat
 * (`facts.executor`); a host that never said (no heartbeat yet, an agent older than the field) is
 * not taken to serve it.
 */
export function servesDevelopment(host: Pick<HostRecord, 'facts'>): boolean {
  return host.facts?.executor === 'dstack';
}

/** `<host> runs <backend>`, or why the controller does not know its backend, for refusals and waits. */
export function executorPhrase(host: Pick<HostRecord, 'id' | 'facts'>): string {
  if (!host.facts) return `${host.id} has not heartbeated yet`;
  if (!host.facts.executor)
    return `${host.id}'s agent does not say which executor it runs (it predates ADR 0176)`;
  return `${host.id} runs ${host.facts.executor}`;
}
