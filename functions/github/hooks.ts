import type { LedgerEventType } from '../../core/events.ts';
import { withholdJitConfigs } from '../ledger/github.ts';
import { leasesOf } from '../ledger/leases.ts';
import type { TransitionHook } from '../ledger/ledger.ts';
import { enqueue, enqueueCheckSync } from '../ledger/outbox.ts';
import { getReservation } from '../ledger/reservations.ts';
import type { LedgerStore } from '../ledger/store.ts';
import { readMeta } from './meta.ts';
import { enqueueRunnerDeletes } from './senders.ts';

const RELEASE_EVENTS = new Set<LedgerEventType>([
  'reservation.releasing',
  'reservation.done',
  'reservation.failed',
]);

/**
 * The GitHub part's ledger hook: runs inside the transaction that records each reservation
 * event, so the side effect is queued atomically with the state change (or not at all).
 * Only reservations GitHub created (repository + head SHA) get check runs; development work
 * from sparkctl has no repository and is ignored here.
 */
export function createGitHubHook(ledger: LedgerStore): TransitionHook {
  return async (tx, ev, { now }) => {
    if (ev.subjectType !== 'reservation') return;
    const r = await getReservation(ledger, tx, ev.subjectId);
    // sparkctl work may name a repo and SHA, but only work GitHub asked for gets a check run
    if (!r?.repo || !r.headSha || !readMeta(r)) return;
    await enqueueCheckSync(tx, now, r.id);

    if (ev.type === 'reservation.preparing') {
      // every lease reported prepared (agent part): dispatch first, so its "still wanted?"
      // re-check runs before any runner is registered
      await enqueue(tx, now, {
        kind: 'dispatch',
        key: `dispatch:${r.id}`,
        reservationId: r.id,
        payload: { reservationId: r.id },
      });
      const leases = await leasesOf(ledger, tx, r.id);
      for (const l of leases) {
        await enqueue(tx, now, {
          kind: 'generate-jitconfig',
          key: `jit:${l.id}:a0`,
          reservationId: r.id,
          payload: { reservationId: r.id, leaseId: l.id, attempt: 0 },
        });
      }
    }

    if (RELEASE_EVENTS.has(ev.type)) {
      // a config not yet handed over must never be handed over now
      await withholdJitConfigs(tx, { reservationId: r.id });
      await enqueueRunnerDeletes(tx, now, r);
    }
  };
}
