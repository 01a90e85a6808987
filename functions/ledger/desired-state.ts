import { executorForRepo } from '../../core/config.ts';
import type { Topology } from '../../core/model.ts';
import type { DesiredState, LeaseRef } from '../../core/protocol/agent.ts';
import { sha256Hex } from '../auth/sha256.ts';
import { ciTaskOf } from './ci-task.ts';
import type { Tx } from './db.ts';
import { currentHandoff } from './queries.ts';
import { bindingLeaseOfHost, hostById, reservationById } from './raw-rows.ts';
import type { HandoffRow, HostRow, LeaseRow, ReservationRow } from './rows.ts';
import type { LedgerStore } from './store.ts';

export { currentHandoff };

/** The desired state of a host as computed from the ledger, before any secret is attached. */
export interface ComputedState {
  desired: DesiredState;
  /** Stable fingerprint: absolute times instead of relative ones, no secrets. */
  version: string;
  /** A JIT config (or a CI task's clone token) waiting to be handed over with this state (only for `run`). */
  pendingHandoff: HandoffRow | null;
}

type Query = Tx | LedgerStore['db'];

function leaseRef(ledger: LedgerStore, lease: LeaseRow, r: ReservationRow, now: number): LeaseRef {
  // the repository's backend for its CI work; development leases keep the host's
  const executor = r.kind === 'development' ? null : executorForRepo(ledger.config, r.repo);
  return {
    leaseId: lease.id,
    reservationId: r.id,
    fencingToken: lease.fencingToken,
    kind: r.kind,
    topology: r.topology as Topology,
    lend: lease.lend,
    expiresInMs: lease.expiresAt - now,
    ...(executor ? { executor } : {}),
    // CI work of a repository shares its build cache on the host (ADR 0157)
    ...(r.repo && r.kind !== 'development' ? { repo: r.repo } : {}),
  };
}

/**
 * Computes what the agent of `hostId` should be doing, from the host phase, its binding lease,
 * the reservation status and the lease's runner handoffs. Pure read; consuming a handoff is the
 * caller's job (in a write transaction).
 */
export async function computeDesiredState(
  ledger: LedgerStore,
  q: Query,
  hostId: string,
  now: number,
): Promise<ComputedState> {
  // every agent polls: raw SQL on kept statements
  const raw = ledger.store.raw(q === ledger.db ? undefined : (q as Tx));
  const host = await hostById(raw, hostId);
  if (!host) throw new TypeError(`host ${hostId} is not in the ledger`);
  const lease = await bindingLeaseOfHost(raw, hostId);
  const r = lease ? await reservationById(raw, lease.reservationId) : null;
  let pendingHandoff: HandoffRow | null = null;
  let desired: DesiredState;
  const ref = lease && r ? leaseRef(ledger, lease, r, now) : null;

  if (host.phase === 'quarantined') {
    desired = { state: 'hold', reason: quarantineReason(host) };
  } else if (host.phase === 'release-required' && lease?.status === 'releasing' && ref) {
    // the controller asked for this release (a pair that lost this node): once
    // the agent is back it stops what it started and confirms cleanup, which frees the host
    desired = { state: 'clean', lease: ref };
  } else if (host.phase === 'release-required') {
    desired = {
      state: 'hold',
      reason: 'release required: processes outlived the lease; nothing is killed',
      ...(ref ? { lease: ref } : {}),
    };
  } else if (lease && r && ref) {
    if (lease.status === 'releasing' || r.status === 'releasing') {
      desired = { state: 'clean', lease: ref };
    } else if (lease.status === 'expired') {
      desired = {
        state: 'hold',
        reason: 'lease expired; waiting for the controller to release it',
        lease: ref,
      };
    } else if (r.status === 'allocated') {
      desired = lease.preparedAt == null ? { state: 'prepare', lease: ref } : { state: 'wait', lease: ref };
    } else if (lease.preparedAt == null) {
      desired = { state: 'prepare', lease: ref };
    } else if (r.kind === 'development') {
      desired = { state: 'develop', lease: ref };
    } else {
      const handoff = await currentHandoff(q, lease.id);
      if (handoff) {
        // a repository that runs CI as a task: the workload rides with the run state
        const task = ciTaskOf(ledger.config, r);
        desired = { state: 'run', lease: ref, runnerName: handoff.runnerName, ...(task ? { task } : {}) };
        if (handoff.jitConfig != null && handoff.consumedAt == null) pendingHandoff = handoff;
      } else {
        desired = { state: 'wait', lease: ref };
      }
    }
  } else if (host.phase === 'restoring') {
    desired = {
      state: 'restore',
      fencingToken: host.fencingToken,
      attempt: host.restoreAttempts,
      waitMs: Math.max(0, (host.restoreNotBefore ?? 0) - now),
      healthTimeoutS: ledger.config.timings.restoreHealthTimeoutS,
    };
  } else if (host.phase === 'service') {
    desired = { state: 'serve' };
  } else {
    desired = { state: 'idle' };
  }
  return { desired, version: await fingerprint(desired, lease, host), pendingHandoff };
}

function quarantineReason(host: HostRow): string {
  return `quarantined until an operator clears it${host.note ? `: ${host.note.slice(0, 300)}` : ''}`;
}

async function fingerprint(d: DesiredState, lease: LeaseRow | null, host: HostRow): Promise<string> {
  // relative times change on every call; the absolute ones change only when the ledger does
  const stable = {
    ...d,
    ...('lease' in d && d.lease ? { lease: { ...d.lease, expiresInMs: lease?.expiresAt ?? 0 } } : {}),
    ...(d.state === 'restore' ? { waitMs: host.restoreNotBefore ?? 0 } : {}),
  };
  delete (stable as { jitConfig?: unknown }).jitConfig;
  delete (stable as { jobToken?: unknown }).jobToken;
  delete (stable as { cloneToken?: unknown }).cloneToken;
  return (await sha256Hex(JSON.stringify(stable))).slice(0, 16);
}
