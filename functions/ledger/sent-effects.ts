import { isReleasableStatus } from '../../core/model.ts';
import * as ciTask from './ci-task.ts';
import type { Tx } from './db.ts';
import * as github from './github.ts';
import { patchMeta } from './github-meta.ts';
import { enqueue } from './outbox.ts';
import * as reservations from './reservations.ts';
import type { LedgerStore } from './store.ts';

/**
 * What an outbox send changes in the ledger, named as data (docs/adr/0260-outbox-and-sweeps-as-ledger-commands.md):
 * the GitHub part's sender says which of these its answer means, and `markSent` applies it in the
 * transaction that marks the row sent. The ledger calls nothing back in `functions/github/`.
 * An effect may carry a secret for its one-time hand-over (a JIT config, a clone token): it is
 * applied, never stored or logged (the row stores only the sender's `result`).
 */
export type SentEffect =
  /** The work is no longer wanted before its dispatch (PR closed, label gone, SHA moved). */
  | { kind: 'withdrawn'; reservationId: string; why: string }
  /** The dispatched workflow run was identified (by the dispatch answer or its jobs' nonce label). */
  | {
      kind: 'run-identified';
      reservationId: string;
      runId: number;
      runAttempt: number;
      via: 'dispatch-response' | 'job-label';
      nonceLabel: boolean;
    }
  /** The dispatch was sent but GitHub lists no run yet: look again through a `find-run` row. */
  | { kind: 'run-not-listed-yet'; reservationId: string }
  /** A JIT runner was registered; its config waits for the agent (withheld if released meanwhile). */
  | {
      kind: 'runner-registered';
      reservationId: string;
      leaseId: string;
      hostId: string;
      runnerName: string;
      attempt: number;
      runnerId: number;
      jitConfig: string;
    }
  /** A CI task's clone token was minted; it waits for the agent (withheld if released meanwhile). */
  | {
      kind: 'clone-token-minted';
      reservationId: string;
      leaseId: string;
      hostId: string;
      taskName: string;
      cloneToken: string;
      repo: string;
      expiresAt: string | null;
    }
  /** A runner was deregistered on GitHub. */
  | { kind: 'runner-deleted'; runnerName: string }
  /** A check run was created or updated: its id and the rendering it shows now. */
  | { kind: 'check-run-synced'; reservationId: string; checkRunId: number; lastCheck: string };

/** Applies one send's effect inside `markSent`'s transaction. */
export async function applySentEffect(
  s: LedgerStore,
  tx: Tx,
  now: number,
  changed: Set<string>,
  e: SentEffect,
): Promise<void> {
  switch (e.kind) {
    case 'withdrawn':
      return reservations.withdrawBeforeDispatch(s, e.reservationId, e.why, tx);
    case 'run-identified':
      await github.recordDispatchedRun(s, tx, e.reservationId, {
        runId: e.runId,
        runAttempt: e.runAttempt,
        via: e.via,
        meta: { nonceLabel: e.nonceLabel },
      });
      return;
    case 'run-not-listed-yet': {
      const cur = await reservations.getReservation(s, tx, e.reservationId);
      if (cur) await patchMeta(tx, cur, { nonceLabel: true });
      // GitHub lists a new run after a moment: look again through the outbox (bounded)
      await enqueue(tx, now, {
        kind: 'find-run',
        key: `find-run:${e.reservationId}`,
        reservationId: e.reservationId,
        payload: { reservationId: e.reservationId },
        notBefore: now + 2000,
      });
      return;
    }
    case 'runner-registered': {
      const { kind: _k, ...h } = e;
      await github.recordRunnerRegistration(s, tx, now, h);
      const cur = await reservations.getReservation(s, tx, e.reservationId);
      if (cur && !isReleasableStatus(cur.status)) {
        // released while GitHub registered it: the runner must go again, config never handed out
        await github.withholdJitConfigs(tx, { runnerName: e.runnerName });
        await github.enqueueRunnerDeletes(tx, now, cur);
      }
      changed.add(`host:${e.hostId}`);
      return;
    }
    case 'clone-token-minted': {
      const { kind: _k, ...h } = e;
      await ciTask.recordTaskCredential(s, tx, now, h);
      const cur = await reservations.getReservation(s, tx, e.reservationId);
      // released while GitHub answered: the token is never handed out
      if (cur && !isReleasableStatus(cur.status))
        await github.withholdJitConfigs(tx, { runnerName: e.taskName });
      changed.add(`host:${e.hostId}`);
      return;
    }
    case 'runner-deleted':
      return github.markRunnerDeleted(tx, now, e.runnerName);
    case 'check-run-synced': {
      const cur = await reservations.getReservation(s, tx, e.reservationId);
      if (!cur) return;
      await reservations.setCheckRunId(tx, cur, e.checkRunId);
      await patchMeta(tx, cur, { lastCheck: e.lastCheck });
      return;
    }
  }
}
