import { ciModeForRepo } from '../../core/config.ts';
import { type LedgerEventType, leaseGrantsOfData } from '../../core/events.ts';
import { type CiMode, isReleasableStatus } from '../../core/model.ts';
import type { Tx } from './db.ts';
import { enqueueRunCancel, enqueueRunnerDeletes, withholdJitConfigs } from './github.ts';
import { mergeMeta, patchMeta, readMeta } from './github-meta.ts';
import { leasesOf } from './leases.ts';
import { type EnqueueItem, enqueue, enqueueCheckSync, enqueueMany } from './outbox.ts';
import { getReservation } from './reservations.ts';
import { newRunnerNonce } from './runner-nonce.ts';
import type { HookContext, LedgerEvent, LedgerStore } from './store.ts';

const RELEASE_EVENTS = new Set<LedgerEventType>([
  'reservation.releasing',
  'reservation.done',
  'reservation.failed',
]);

/** What each granted lease needs from GitHub: a JIT runner's registration, or a CI task's clone token. */
function leaseWorkItem(mode: CiMode, reservationId: string, leaseId: string): EnqueueItem {
  return mode === 'task'
    ? {
        kind: 'mint-clone-token',
        key: `clone-token:${leaseId}`,
        reservationId,
        payload: { reservationId, leaseId },
      }
    : {
        kind: 'generate-jitconfig',
        key: `jit:${leaseId}:a0`,
        reservationId,
        payload: { reservationId, leaseId, attempt: 0 },
      };
}

/**
 * The GitHub outbox rows one recorded event needs, written in the transaction that records it, so
 * the side effect is queued atomically with the state change (or not at all). The ledger's record
 * path calls this itself when the GitHub part is mounted (`LedgerStore.recordsGitHubEffects`); the
 * GitHub part only sends the rows (docs/adr/0220-one-ledger-front-door.md). Only reservations
 * GitHub created (repository + head SHA + GitHub meta) get check runs; development work from
 * sparkctl has no repository and is ignored here.
 *
 * The workflow dispatch and each lease's JIT runner registration are queued at the grant, so
 * GitHub's answers arrive while the agents prepare their hosts (ADR 0070); the controller hands a
 * JIT config to its agent only once every node of the reservation is prepared (desired state
 * `run`), so nothing starts earlier than before.
 */
export async function recordGitHubEffects(
  ledger: LedgerStore,
  tx: Tx,
  ev: LedgerEvent,
  { now, reservation }: HookContext,
): Promise<void> {
  // the host's evidence decides the check (ADR 0160): its arrival re-renders the check even
  // when no reservation event follows (work already releasing when the agent's exit report lands)
  if (ev.type === 'lease.runner_exited' && typeof ev.data?.reservationId === 'string') {
    const r = await getReservation(ledger, tx, ev.data.reservationId);
    if (r?.repo && r.headSha && readMeta(r)) await enqueueCheckSync(tx, now, r.id);
    return;
  }
  if (ev.subjectType !== 'reservation') return;
  // the admission pass hands its own row over: the grant and wait paths read nothing here, so a
  // remote ledger's pass can send them in one write batch (ADR 0185)
  const r = reservation?.id === ev.subjectId ? reservation : await getReservation(ledger, tx, ev.subjectId);
  // sparkctl work may name a repo and SHA, but only work GitHub asked for gets a check run
  if (!r?.repo || !r.headSha || !readMeta(r)) return;
  await enqueueCheckSync(tx, now, r.id);

  if (ev.type === 'reservation.allocated' && ciModeForRepo(ledger.config, r.repo) === 'task') {
    // CI as a dstack task (ADR 0110): decided once, here; no workflow is dispatched and no runner
    // registered, each lease gets a read-only clone token instead
    await mergeMeta(tx, r, { ci: 'task' });
    // the grant's one history row lists its leases (ADR 0100)
    await enqueueMany(
      tx,
      now,
      leaseGrantsOfData(ev.type, r.id, ev.data).map((l) => leaseWorkItem('task', r.id, l.leaseId)),
    );
  } else if (ev.type === 'reservation.allocated') {
    // the runner label's nonce is drawn once, before anything outside the ledger sees it:
    // the dispatch hands it to the workflow and the JIT registration puts it on the runner
    await mergeMeta(tx, r, { nonce: newRunnerNonce() }, 'nonce');
    // dispatch first, so its "still wanted?" re-check runs before any runner is registered (the
    // registration also waits for the dispatched run to be identified); the grant's one history
    // row lists its leases (ADR 0100): each lease's registration is queued from it, before the
    // lease rows are written and without reading them back
    await enqueueMany(tx, now, [
      { kind: 'dispatch', key: `dispatch:${r.id}`, reservationId: r.id, payload: { reservationId: r.id } },
      ...leaseGrantsOfData(ev.type, r.id, ev.data).map((l) => leaseWorkItem('runner', r.id, l.leaseId)),
    ]);
  }

  if (ev.type === 'reservation.preparing' && readMeta(r)?.ci === 'task') {
    // the same keys as at the grant: a no-op unless a clone token was never asked for
    for (const l of await leasesOf(ledger, tx, r.id))
      await enqueue(tx, now, leaseWorkItem('task', r.id, l.id));
  } else if (ev.type === 'reservation.preparing') {
    // every lease reported prepared. Work granted before this version asked GitHub only now:
    // the same keys make this a no-op for work whose dispatch and runners were queued at grant
    if (!readMeta(r)?.nonce) await patchMeta(tx, r, { nonce: newRunnerNonce() });
    await enqueue(tx, now, {
      kind: 'dispatch',
      key: `dispatch:${r.id}`,
      reservationId: r.id,
      payload: { reservationId: r.id },
    });
    const leases = await leasesOf(ledger, tx, r.id);
    for (const l of leases) await enqueue(tx, now, leaseWorkItem('runner', r.id, l.id));
  }

  if (RELEASE_EVENTS.has(ev.type)) {
    // a config not yet handed over must never be handed over now
    await withholdJitConfigs(tx, { reservationId: r.id });
    await enqueueRunnerDeletes(tx, now, r);
  }

  // the one place a dispatched run of ended work is cancelled (ADR 0095): when the release
  // begins (granted work only ends through releasing), or when the run is identified only
  // after that (dispatch answer or nonce-label lookup still pending at the release)
  if (
    ev.type === 'reservation.releasing' ||
    (ev.type === 'reservation.run_recorded' && !isReleasableStatus(r.status))
  ) {
    await enqueueRunCancel(tx, now, r);
  }
}
