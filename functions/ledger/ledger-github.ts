import * as ciTask from './ci-task.ts';
import type { Tx } from './db.ts';
import * as github from './github.ts';
import * as sweeps from './github-sweeps.ts';
import { hostEvidenceOf } from './host-evidence.ts';
import * as queries from './queries.ts';
import * as reservations from './reservations.ts';
import type { ReservationRow } from './rows.ts';
import type { LedgerStore } from './store.ts';

/** The arguments of a ledger function after the store it takes first. */
export type After<F> = F extends (s: LedgerStore, ...a: infer A) => unknown ? A : never;

/**
 * The GitHub part's door into the ledger, `ledger.github` (docs/adr/0240-ledger-front-door-only.md):
 * the commands and reads its senders, sweeps and routes name, bound to the ledger. The functions
 * stay internal to `functions/ledger/`. Each command is one write transaction of its own: nothing
 * here takes the caller's transaction, so the GitHub part composes no ledger steps
 * (docs/adr/0260-outbox-and-sweeps-as-ledger-commands.md); what a send changes comes back to
 * `ledger.outbox.markSent` as a named effect (`sent-effects.ts`).
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
    return hostEvidenceOf(this.s.store.raw(undefined), reservationId);
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

  // ------------------------------------------------------------ sweeps and send bookkeeping (github-sweeps.ts)

  /** A dispatch, run lookup or registration gave up for good: release with `github_failed`. */
  releaseAfterFailedSend(...a: After<typeof sweeps.releaseAfterFailedSend>) {
    return sweeps.releaseAfterFailedSend(this.s, ...a);
  }
  /** Claims the webhook redelivery sweep when it is due (ADR 0091). */
  claimRedeliverySweep(...a: After<typeof sweeps.claimRedeliverySweep>) {
    return sweeps.claimRedeliverySweep(this.s, ...a);
  }
  /** Takes one JIT registration from the App-wide hourly bucket; else when it refills. */
  takeJitRegistration(...a: After<typeof sweeps.takeJitRegistration>) {
    return sweeps.takeJitRegistration(this.s, ...a);
  }
  /** Replaces a runner not picked up in time, or releases after the last retry. */
  replaceUnpickedRunner(...a: After<typeof sweeps.replaceUnpickedRunner>) {
    return sweeps.replaceUnpickedRunner(this.s, ...a);
  }
  /** Queues a check-run sync for a reservation whose rendering moved. */
  queueCheckSync(...a: After<typeof sweeps.queueCheckSync>) {
    return sweeps.queueCheckSync(this.s, ...a);
  }
  /** A schedule seen for the first time starts counting now. */
  startSchedule(...a: After<typeof sweeps.startSchedule>) {
    return sweeps.startSchedule(this.s, ...a);
  }
  /** Fires a due schedule slot once across processes: its reservation, or null. */
  fireSchedule(...a: After<typeof sweeps.fireSchedule>) {
    return sweeps.fireSchedule(this.s, ...a);
  }
}
