import * as ciTask from './ci-task.ts';
import type { Tx } from './db.ts';
import * as github from './github.ts';
import * as meta from './github-meta.ts';
import { hostEvidenceOf } from './host-evidence.ts';
import * as outbox from './outbox.ts';
import * as queries from './queries.ts';
import * as reservations from './reservations.ts';
import type { ReservationRow } from './rows.ts';
import type { LedgerStore } from './store.ts';

/** The arguments of a ledger function after the store it takes first. */
export type After<F> = F extends (s: LedgerStore, ...a: infer A) => unknown ? A : never;

/**
 * The GitHub part's door into the ledger, `ledger.github` (docs/adr/0240-ledger-front-door-only.md):
 * the commands and reads its senders, sweeps and routes name, bound to the ledger. The functions
 * stay internal to `functions/ledger/`; what takes a transaction only (`tx` first) is handed over
 * as is, to be called inside the caller's `ledger.write`.
 */
export class GitHubLedger {
  constructor(private readonly s: LedgerStore) {}

  // ------------------------------------------------------------ repositories

  /** Enables a repository for Spark (with its settings), audited. */
  enableRepository(...a: After<typeof github.enableRepository>) {
    return github.enableRepository(this.s, ...a);
  }
  /** Disables a repository: new work is refused, queued work stays. */
  disableRepository(...a: After<typeof github.disableRepository>) {
    return github.disableRepository(this.s, ...a);
  }
  listRepositories() {
    return queries.listRepositories(this.s);
  }

  // ------------------------------------------------------------ reads

  /** GitHub-created reservations in the given statuses (optionally only those with a commit). */
  reservations(...a: After<typeof queries.githubReservations>) {
    return queries.githubReservations(this.s, ...a);
  }
  /** Queued and active reservations of one PR. */
  openReservationsOfPr(repo: string, pr: number, tx?: Tx) {
    return reservations.openReservationsOfPr(this.s, tx, repo, pr);
  }
  /** Queued reservations of a kind for a repository. */
  queuedOfKind(repo: string, kind: Parameters<typeof reservations.queuedOfKind>[3], tx?: Tx) {
    return reservations.queuedOfKind(this.s, tx, repo, kind);
  }
  /** How many queued reservations of any class but `kind` wait. */
  countQueuedOtherThan(kind: Parameters<typeof reservations.countQueuedOtherThan>[2], tx?: Tx) {
    return reservations.countQueuedOtherThan(this.s, tx, kind);
  }
  handoffsOf(reservationId: string, tx?: Tx) {
    return queries.handoffsOf(tx ?? this.s.db, reservationId);
  }
  checkRunRowsOf(reservationIds: string[]) {
    return queries.checkRunRowsOf(this.s, reservationIds);
  }
  hostEvidenceOf(reservationId: string) {
    return hostEvidenceOf(this.s.db, reservationId);
  }
  hostRows() {
    return queries.hostRows(this.s);
  }
  restoreEvidence(hostId: string) {
    return queries.restoreEvidence(this.s, hostId);
  }
  /** Started CI tasks of `r` that never reported their start within `timeoutS`. */
  unstartedTasks(r: ReservationRow, now: number, timeoutS: number, tx?: Tx) {
    return ciTask.unstartedTasks(tx ?? this.s.db, r, now, timeoutS);
  }

  // ------------------------------------------------------------ commands

  /** Ends a CI task that never started (not run), in its own transaction. */
  endTaskNotStarted(...a: After<typeof ciTask.endTaskNotStarted>) {
    return ciTask.endTaskNotStarted(this.s, ...a);
  }
  /** Stores a CI task's clone credential for its agent to take once. */
  recordTaskCredential(...a: After<typeof ciTask.recordTaskCredential>) {
    return ciTask.recordTaskCredential(this.s, ...a);
  }
  /** Records the workflow run a dispatch created. */
  recordDispatchedRun(...a: After<typeof github.recordDispatchedRun>) {
    return github.recordDispatchedRun(this.s, ...a);
  }
  /** Stores a registered JIT runner and its config, handed to the agent once. */
  recordRunnerRegistration(...a: After<typeof github.recordRunnerRegistration>) {
    return github.recordRunnerRegistration(this.s, ...a);
  }
  /** Releases work no longer wanted before its dispatch (outcome `withdrawn`). */
  withdrawBeforeDispatch(...a: After<typeof reservations.withdrawBeforeDispatch>) {
    return reservations.withdrawBeforeDispatch(this.s, ...a);
  }
  /** Queues a PR's merge or background work (GitHub meta included). */
  createReservation(...a: After<typeof reservations.createReservation>) {
    return reservations.createReservation(this.s, ...a);
  }
  /** Starts releasing active work. */
  beginRelease(...a: After<typeof reservations.beginRelease>) {
    return reservations.beginRelease(this.s, ...a);
  }

  // ------------------------------------------------------------ inside the caller's transaction

  readonly withholdJitConfigs = github.withholdJitConfigs;
  readonly markRunnerDeleted = github.markRunnerDeleted;
  readonly enqueueRunnerDeletes = github.enqueueRunnerDeletes;
  readonly enqueue = outbox.enqueue;
  readonly enqueueCheckSync = outbox.enqueueCheckSync;
  readonly outboxKeyExists = outbox.outboxKeyExists;
  readonly setCheckRunId = reservations.setCheckRunId;
  readonly setRunnerAttempt = reservations.setRunnerAttempt;
  readonly patchMeta = meta.patchMeta;
}
