import type { HostFacts, HostPhase, LeaseStatus, Outcome, ReservationStatus } from '../../core/model.ts';
import { admissionPassTx, loadAdmissionInput, type PassResult } from './admission-pass.ts';
import type { Tx } from './db.ts';
import * as defaultBranch from './default-branch.ts';
import { recordGitHubEffects } from './github-effects.ts';
import * as hosts from './hosts.ts';
import * as leases from './leases.ts';
import { AgentsLedger, ApiLedger, ReadsLedger, TokensLedger } from './ledger-api.ts';
import { InboxLedger, OutboxLedger } from './ledger-deliveries.ts';
import { GitHubLedger } from './ledger-github.ts';
import * as pullRequests from './pull-requests.ts';
import * as queries from './queries.ts';
import * as reservations from './reservations.ts';
import type { HostRow, LeaseRow, ReservationRow } from './rows.ts';
import { type HookContext, type LedgerEvent, LedgerStore } from './store.ts';
import * as workflowJobs from './workflow-jobs.ts';

export { type PassResult, PERSISTED_WAITS_PER_PASS } from './admission-pass.ts';
export { RUNNER_START_BUCKETS_S, seriesKey, WAIT_BUCKETS_S } from './counters.ts';
export type { DefaultBranchPush } from './default-branch.ts';
export type { ComputedState } from './desired-state.ts';
export { type GitHubMeta, readMeta } from './github-meta.ts';
export type { PrComment, PrRefusal, PrSubject, TestRequest } from './pull-requests.ts';
export type { NewReservation, RecoveryResult, SupersedeScope } from './reservations.ts';
export type {
  AgentTokenRow,
  ApiTokenRow,
  EventRow,
  HandoffRow,
  HostRow,
  LeaseRow,
  OutboxRow,
  RepositoryRow,
  ReservationRow,
} from './rows.ts';
export { toHostRecord, toLeaseRecord, toReservationRecord } from './rows.ts';
export type { SentEffect } from './sent-effects.ts';
export type { Clock, LedgerEvent, LedgerOptions, TransitionHook } from './store.ts';
export { isLedgerUnavailable, ledgerUnavailable, storageCause } from './unavailable.ts';
export type { ReservationLabel, WorkflowJobReport } from './workflow-jobs.ts';

/**
 * The reservation ledger, the controller's only writer (ADR 0005). Every state change
 * is one named command in one write transaction that checks the transition table, writes the
 * new state, appends the event and runs the outbox hooks. This class is the handle the rest of
 * the controller holds; the rules live in `hosts.ts`, `reservations.ts`, `leases.ts`,
 * `admission-pass.ts` and the integration modules beside them, the read models in `queries.ts`.
 */
export class Ledger extends LedgerStore {
  private readonly passObservers = new Set<(durationMs: number) => void>();
  /** The GitHub part's commands and reads (`ledger-github.ts`). */
  readonly github = new GitHubLedger(this);
  /** The webhook inbox (`ledger-deliveries.ts`). */
  readonly inbox = new InboxLedger(this);
  /** The GitHub outbox (`ledger-deliveries.ts`). */
  readonly outbox = new OutboxLedger(this);
  /** The public API's commands and reads (`ledger-api.ts`). */
  readonly api = new ApiLedger(this);
  /** API and agent tokens (`ledger-api.ts`). */
  readonly tokens = new TokensLedger(this);
  /** The dashboard's, the metrics' and the queue estimate's reads (`ledger-api.ts`). */
  readonly reads = new ReadsLedger(this);
  /** The agent API's reports, desired state and hand-over (`ledger-api.ts`). */
  readonly agents = new AgentsLedger(this);

  /** Each recorded event's GitHub outbox rows, in its transaction (docs/adr/0220-one-ledger-front-door.md). */
  protected override recordEffects(tx: Tx, ev: LedgerEvent, ctx: HookContext): Promise<void> {
    return recordGitHubEffects(this, tx, ev, ctx);
  }

  // ---------------------------------------------------------------- hosts

  /** Makes the ledger's host rows match the config (new hosts start unadopted). */
  syncHosts(): Promise<void> {
    return hosts.syncHosts(this);
  }
  getHost(tx: Tx | undefined, id: string): Promise<HostRow | null> {
    return hosts.getHost(this, tx, id);
  }
  /** Moves a host's persisted phase through the transition table and records it. */
  setHostPhase(
    tx: Tx,
    now: number,
    host: HostRow,
    to: HostPhase,
    cause: string,
    actor: string,
  ): Promise<void> {
    return hosts.setHostPhase(this, tx, now, host, to, cause, actor);
  }
  /** Adopt (or un-adopt) a host: only adopted hosts are ever granted (rule 2). */
  setManaged(id: string, managed: boolean, actor: string): Promise<HostRow> {
    return hosts.setManaged(this, id, managed, actor);
  }
  /** Stores a heartbeat and renews the host's CI leases (docs/architecture.md: TTL renewed by heartbeats). */
  recordHeartbeat(hostId: string, facts: HostFacts, actor = `agent:${hostId}`): Promise<void> {
    return hosts.recordHeartbeat(this, hostId, facts, actor);
  }
  /** The home service came back healthy (or failed to): restoring → service / retry / quarantined. */
  recordRestore(hostId: string, ok: boolean, detail: string, actor: string): Promise<HostRow> {
    return hosts.recordRestore(this, hostId, ok, detail, actor);
  }
  /** Operator clears quarantine; the host restores its service (or goes idle) before any grant. */
  clearQuarantine(hostId: string, actor: string): Promise<HostRow> {
    return hosts.clearQuarantine(this, hostId, actor);
  }

  // ---------------------------------------------------------------- reservations

  getReservation(tx: Tx | undefined, id: string): Promise<ReservationRow | null> {
    return reservations.getReservation(this, tx, id);
  }
  /** Persists a reservation before any runner exists (rule 7). Admission runs separately. */
  createReservation(input: reservations.NewReservation, actor: string, tx?: Tx): Promise<ReservationRow> {
    return reservations.createReservation(this, input, actor, tx);
  }
  /** Moves a reservation through the transition table and records why. */
  transitionReservation(
    tx: Tx,
    now: number,
    r: ReservationRow,
    to: ReservationStatus,
    cause: string,
    actor: string,
    extra: Parameters<typeof reservations.transitionReservation>[7] = {},
    data?: Record<string, unknown>,
  ): Promise<void> {
    return reservations.transitionReservation(this, tx, now, r, to, cause, actor, extra, data);
  }
  /** Cancels queued work only (outcome `cancelled`); active work must be released. */
  cancelReservation(
    id: string,
    actor: string,
    cause = 'cancelled by requester',
    tx?: Tx,
  ): Promise<ReservationRow> {
    return reservations.cancelReservation(this, id, actor, cause, tx);
  }
  /**
   * A new head SHA for a PR: its queued requests for an older SHA are superseded (outcome
   * `superseded`); active work keeps the SHA it actually tests. Returns the superseded rows.
   */
  supersedeQueued(
    repo: string,
    pr: number,
    newSha: string,
    actor: string,
    tx?: Tx,
  ): Promise<ReservationRow[]> {
    return reservations.supersedeQueued(this, { repo, pr }, newSha, actor, undefined, tx);
  }
  /** Moves a granted reservation forward (allocated → preparing → running). */
  advanceReservation(
    id: string,
    to: 'preparing' | 'running',
    cause: string,
    actor: string,
    tx?: Tx,
  ): Promise<ReservationRow> {
    return reservations.advanceReservation(this, id, to, cause, actor, tx);
  }
  /** Starts releasing active work; hosts are freed only when the agent confirms cleanup. */
  beginRelease(id: string, outcome: Outcome, cause: string, actor: string, tx?: Tx): Promise<ReservationRow> {
    return reservations.beginRelease(this, id, outcome, cause, actor, tx);
  }

  // ---------------------------------------------------------------- leases

  leasesOf(tx: Tx | undefined, reservationId: string): Promise<LeaseRow[]> {
    return leases.leasesOf(this, tx, reservationId);
  }
  /** Throws 409 `stale_fencing_token` unless `fencingToken` is the host's current binding lease. */
  requireCurrentLease(tx: Tx | undefined, hostId: string, fencingToken: number): Promise<LeaseRow> {
    return leases.requireCurrentLease(this, tx, hostId, fencingToken);
  }
  setLeaseStatus(tx: Tx, now: number, lease: LeaseRow, to: LeaseStatus, cause: string, actor: string) {
    return leases.setLeaseStatus(this, tx, now, lease, to, cause, actor);
  }
  /** The agent confirmed termination and cleanup under `fencingToken` (rule 7). */
  confirmReleased(
    hostId: string,
    fencingToken: number,
    actor: string,
    opts: { processesRemain?: boolean } = {},
    tx?: Tx,
  ): Promise<{ reservation: ReservationRow; lease: LeaseRow }> {
    return leases.confirmReleased(this, hostId, fencingToken, actor, opts, tx);
  }

  // ---------------------------------------------------------------- pull requests
  // one command per webhook event, in the delivery's transaction (docs/adr/0220-one-ledger-front-door.md)

  /** A Spark label on a PR: the policy's refusal, or the test queued (once per commit). */
  labelPullRequest(
    tx: Tx,
    now: number,
    o: Parameters<typeof pullRequests.labelPullRequest>[3],
  ): Promise<string> {
    return pullRequests.labelPullRequest(this, tx, now, o);
  }
  /** A Spark label removed: the work it asked for is cancelled if queued, noted if active. */
  unlabelPullRequest(tx: Tx, o: Parameters<typeof pullRequests.unlabelPullRequest>[2]): Promise<string> {
    return pullRequests.unlabelPullRequest(this, tx, o);
  }
  /** A PR closed: its queued work is cancelled, its active work noted. */
  closePullRequest(tx: Tx, o: Parameters<typeof pullRequests.closePullRequest>[2]): Promise<string> {
    return pullRequests.closePullRequest(this, tx, o);
  }
  /** A push to a PR branch: supersede queued work, queue the new commit again unless refused. */
  pushToPullRequest(
    tx: Tx,
    now: number,
    o: Parameters<typeof pullRequests.pushToPullRequest>[3],
  ): Promise<string> {
    return pullRequests.pushToPullRequest(this, tx, now, o);
  }
  /** A `/spark` comment on a PR: the policy's refusal, or `test`, `cancel`, `status`. */
  commentOnPullRequest(
    tx: Tx,
    now: number,
    o: Parameters<typeof pullRequests.commentOnPullRequest>[3],
  ): Promise<string> {
    return pullRequests.commentOnPullRequest(this, tx, now, o);
  }
  /** A refusal the GitHub part decided: a refusal check and an audited event, throttled. */
  refuseGitHubRequest(
    tx: Tx,
    now: number,
    at: Parameters<typeof pullRequests.refuseGitHubRequest>[3],
    refusal: pullRequests.PrRefusal,
  ): Promise<string> {
    return pullRequests.refuseGitHubRequest(this, tx, now, at, refusal);
  }

  /** A push to the default branch: the policy's refusal, or merge CI for the new tip (ADR 0003). */
  pushToDefaultBranch(tx: Tx, now: number, o: defaultBranch.DefaultBranchPush): Promise<string> {
    return defaultBranch.pushToDefaultBranch(this, tx, now, o);
  }
  /** A `workflow_job` delivery: the job on our runner advances or is stopped; others are audited. */
  recordWorkflowJob(tx: Tx, now: number, job: workflowJobs.WorkflowJobReport): Promise<string> {
    return workflowJobs.recordWorkflowJob(this, tx, now, job);
  }

  // ---------------------------------------------------------------- admission

  /** Loads everything the admission engine needs, inside the caller's transaction. */
  loadAdmissionInput(tx: Tx | undefined) {
    return loadAdmissionInput(this, tx);
  }

  /** One admission pass in one write transaction (ADR 0002). */
  async admissionPass(actor = 'admission'): Promise<PassResult> {
    const started = performance.now();
    try {
      return await admissionPassTx(this, actor);
    } finally {
      const ms = performance.now() - started;
      for (const fn of this.passObservers) fn(ms);
    }
  }

  /** Observe how long each admission pass takes (metrics); returns an unsubscribe function. */
  observePasses(fn: (durationMs: number) => void): () => void {
    this.passObservers.add(fn);
    return () => this.passObservers.delete(fn);
  }

  // ---------------------------------------------------------------- reads

  history(subjectType: Parameters<typeof queries.history>[1], subjectId: string, limit = 200) {
    return queries.history(this, subjectType, subjectId, limit);
  }
  recentEvents(limit = 50) {
    return queries.recentEvents(this, limit);
  }
  /** An enabled repository by name (case-insensitive), or null. */
  enabledRepository(fullName: string, tx?: Tx) {
    return queries.enabledRepository(this, fullName, tx);
  }
}
