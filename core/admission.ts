import type { SparkConfig } from './config.ts';
import {
  BINDING_LEASE_STATUSES,
  type HostRecord,
  type HostState,
  hostsNeeded,
  isActiveStatus,
  type LeaseRecord,
  prKey,
  queueOrder,
  type ReservationRecord,
} from './model.ts';

/**
 * The admission engine (DESIGN.md "Admission rules"). Pure: given the fleet, the leases, the
 * reservations and the time, it decides what to grant, which hosts to hold or drain, which leases
 * expired, which queued requests timed out, and for every queued request why it waits.
 * The ledger applies a plan in one write transaction.
 */

export type AdmissionConfig = Pick<SparkConfig, 'budgets' | 'timings' | 'preferHosts'>;

export interface AdmissionInput {
  now: number;
  config: AdmissionConfig;
  hosts: readonly HostRecord[];
  /** Leases that still bind a host (active, expired, releasing); others are ignored. */
  leases: readonly LeaseRecord[];
  /** Queued and active reservations; terminal ones are ignored. */
  reservations: readonly ReservationRecord[];
}

export interface Grant {
  reservationId: string;
  hostIds: string[];
  /** Hosts whose home service must be lent (drained, stopped, GPU-verified) before work starts. */
  lend: string[];
  gpus: number;
}

export type WaitCode =
  | 'hosts-busy'
  | 'held-for-pair'
  | 'budget-prs'
  | 'budget-pr-gpus'
  | 'budget-gpus'
  | 'target-unavailable'
  | 'pool-too-small';

export interface Wait {
  reservationId: string;
  /** 1-based position among queued reservations, in admission order. */
  position: number;
  code: WaitCode;
  reason: string;
}

export interface Expiry {
  leaseId: string;
  reservationId: string;
  hostId: string;
  /** `release-required`: processes remain (or are unknown) — never killed, never admitted (rule 7). */
  outcome: 'release' | 'release-required';
}

export interface AdmissionPlan {
  grants: Grant[];
  waits: Wait[];
  holds: { hostId: string; reservationId: string }[];
  draining: { hostId: string; reservationId: string }[];
  expiries: Expiry[];
  queueTimeouts: string[];
  /** Deckard-start requests whose host already serves: nothing to grant, the request is met. */
  satisfied: string[];
  hostStates: Record<string, HostState>;
  /** Why a host that looks free cannot be granted (foreign GPU process, GPU unknown). */
  hostNotes: Record<string, string>;
}

type Base =
  | { kind: 'out'; state: HostState; why: string; note?: boolean }
  | { kind: 'busy'; state: HostState; why: string }
  | { kind: 'free'; state: 'idle' | 'service' };

/** Whether a host's last heartbeat is recent enough; a host never heard from is offline (rule 8). */
export function isHeartbeatFresh(
  host: Pick<HostRecord, 'lastHeartbeatAt'>,
  now: number,
  offlineAfterS: number,
) {
  return host.lastHeartbeatAt != null && now - host.lastHeartbeatAt <= offlineAfterS * 1000;
}

function classify(host: HostRecord, bound: LeaseRecord | undefined, now: number, cfg: AdmissionConfig): Base {
  if (!host.managed) return { kind: 'out', state: 'unknown', why: `${host.id} is not adopted` };
  if (!isHeartbeatFresh(host, now, cfg.timings.offlineAfterS)) {
    // an offline host keeps its lease; it is never inferred idle
    return { kind: 'out', state: 'offline', why: `${host.id} offline (no recent heartbeat)` };
  }
  switch (host.phase) {
    case 'quarantined':
      return { kind: 'out', state: 'quarantined', why: `${host.id} quarantined until an operator clears it` };
    case 'release-required':
      return {
        kind: 'out',
        state: 'release-required',
        why: `${host.id} needs release: processes outlived the lease`,
      };
    case 'cleaning':
      return { kind: 'busy', state: 'cleaning', why: `${host.id} cleaning up` };
    case 'restoring':
      return {
        kind: 'busy',
        state: 'restoring',
        why: `${host.id} restoring ${host.homeService ?? 'service'}`,
      };
    default:
      break;
  }
  if (bound || host.phase === 'allocated') {
    return {
      kind: 'busy',
      state: 'allocated',
      why: `${host.id} allocated${bound ? ` to ${bound.reservationId}` : ''}`,
    };
  }
  const facts = host.facts;
  if (!facts || facts.gpuProcesses == null) {
    return {
      kind: 'out',
      state: host.phase,
      why: `${host.id} GPU state unknown (${facts?.gpuError ?? 'no report'})`,
      note: true,
    };
  }
  if (host.phase === 'idle' && facts.gpuProcesses.length > 0) {
    return {
      kind: 'out',
      state: 'idle',
      why: `${host.id} has ${facts.gpuProcesses.length} GPU process(es) outside any lease`,
      note: true,
    };
  }
  return { kind: 'free', state: host.phase === 'service' ? 'service' : 'idle' };
}

/** Runs one admission pass. Deterministic for a given input. */
export function planAdmission(input: AdmissionInput): AdmissionPlan {
  const { now, config } = input;
  const plan: AdmissionPlan = {
    grants: [],
    waits: [],
    holds: [],
    draining: [],
    expiries: [],
    queueTimeouts: [],
    satisfied: [],
    hostStates: {},
    hostNotes: {},
  };

  const hostsById = new Map<string, HostRecord>();
  for (const h of input.hosts) hostsById.set(h.id, h);

  const boundLease = new Map<string, LeaseRecord>();
  for (const l of input.leases) {
    if (BINDING_LEASE_STATUSES.includes(l.status)) boundLease.set(l.hostId, l);
  }

  // Expiry (rule 7): an expired lease never silently frees its host.
  for (const l of boundLease.values()) {
    if (l.status !== 'active' || l.expiresAt > now) continue;
    const host = hostsById.get(l.hostId);
    const fresh = host ? isHeartbeatFresh(host, now, config.timings.offlineAfterS) : false;
    const procs = host?.facts?.gpuProcesses;
    const clean = fresh && procs != null && procs.length === 0;
    plan.expiries.push({
      leaseId: l.id,
      reservationId: l.reservationId,
      hostId: l.hostId,
      outcome: clean ? 'release' : 'release-required',
    });
  }

  const base = new Map<string, Base>();
  const rank = new Map<string, number>();
  const prefer = config.preferHosts;
  for (const h of input.hosts) {
    const b = classify(h, boundLease.get(h.id), now, config);
    base.set(h.id, b);
    if (b.kind === 'out' && b.note) plan.hostNotes[h.id] = b.why;
    // prefer hosts that need no lending, then the configured order, then id order
    const pi = prefer.indexOf(h.id);
    rank.set(h.id, (b.kind === 'free' && b.state === 'service' ? 1_000_000 : 0) + (pi >= 0 ? pi : 1000));
  }

  // Free hosts per pool, best first. Taking a host removes it for the rest of the pass.
  const freeByPool = new Map<string, HostRecord[]>();
  const schedulableByPool = new Map<string, number>();
  const poolHosts = new Map<string, HostRecord[]>();
  for (const h of input.hosts) {
    const b = base.get(h.id)!;
    if (!poolHosts.has(h.pool)) poolHosts.set(h.pool, []);
    poolHosts.get(h.pool)!.push(h);
    if (b.kind !== 'out') schedulableByPool.set(h.pool, (schedulableByPool.get(h.pool) ?? 0) + 1);
    if (b.kind === 'free') {
      if (!freeByPool.has(h.pool)) freeByPool.set(h.pool, []);
      freeByPool.get(h.pool)!.push(h);
    }
  }
  for (const list of freeByPool.values()) {
    list.sort(
      (a, b) => rank.get(a.id)! - rank.get(b.id)! || a.id.localeCompare(b.id, 'en', { numeric: true }),
    );
  }

  // Budgets (rule 6): count from grant until termination is confirmed.
  const gpusOf = (hostIds: Iterable<string>) => {
    let g = 0;
    for (const id of hostIds) g += hostsById.get(id)?.gpus ?? 1;
    return g;
  };
  const leasesByReservation = new Map<string, string[]>();
  for (const l of boundLease.values()) {
    const list = leasesByReservation.get(l.reservationId) ?? [];
    list.push(l.hostId);
    leasesByReservation.set(l.reservationId, list);
  }
  const prGpus = new Map<string, number>();
  let totalGpus = 0;
  const queued: ReservationRecord[] = [];
  const byId = new Map<string, ReservationRecord>();
  for (const r of input.reservations) {
    byId.set(r.id, r);
    if (r.status === 'queued') {
      if (r.queueDeadline <= now) plan.queueTimeouts.push(r.id);
      else queued.push(r);
      continue;
    }
    if (!isActiveStatus(r.status)) continue;
    const g = gpusOf(leasesByReservation.get(r.id) ?? []);
    totalGpus += g;
    const key = prKey(r);
    if (key) prGpus.set(key, (prGpus.get(key) ?? 0) + g);
  }
  // leases whose reservation is not in the input still hold GPUs
  for (const [rid, hostIds] of leasesByReservation) {
    if (!byId.has(rid)) totalGpus += gpusOf(hostIds);
  }
  // the ledger loads queued work already in this order; sort only when it is not
  for (let i = 1; i < queued.length; i++) {
    if (queueOrder(queued[i - 1]!, queued[i]!) > 0) {
      queued.sort(queueOrder);
      break;
    }
  }

  const held = new Map<string, string>();
  const draining = new Map<string, string>();
  const { maxPrs, maxGpusPerPr, maxGpus } = config.budgets;
  const poolBusyReason = new Map<string, string>();

  const describePool = (pool: string): string => {
    const cached = poolBusyReason.get(pool);
    if (cached) return cached;
    const hosts = poolHosts.get(pool) ?? [];
    let text: string;
    if (hosts.length <= 4) {
      text = hosts
        .map((h) => {
          const hr = held.get(h.id);
          if (hr) return `${h.id} held for ${hr}`;
          const dr = draining.get(h.id);
          const b = base.get(h.id)!;
          if (dr) return `${h.id} draining for ${dr}`;
          return b.kind === 'free' ? `${h.id} free` : b.why;
        })
        .join('; ');
    } else {
      let busy = 0;
      let out = 0;
      let kept = 0;
      for (const h of hosts) {
        const b = base.get(h.id)!;
        if (b.kind === 'busy') busy++;
        else if (b.kind === 'out') out++;
        else if (held.has(h.id)) kept++;
      }
      // held hosts of this pool only: a pair waiting in another pool keeps nothing here
      text = `${busy} busy, ${kept} held, ${out} unavailable of ${hosts.length} hosts`;
    }
    text = `waiting for a host in pool ${pool}: ${text}`;
    poolBusyReason.set(pool, text);
    return text;
  };

  // Busy hosts per pool in preference order, computed once; draining only consumes from the front.
  // Hosts with a home service drain last (they go back to it when freed), then preferHosts, then
  // host id: the same choice whatever order the ledger returns hosts in, and whether or not a host
  // was granted earlier in this pass.
  const drainRank = (h: HostRecord) => (h.homeService ? 1_000_000 : 0) + (prefer.indexOf(h.id) + 1 || 1001);
  const busyByPool = new Map<string, HostRecord[]>();
  const busyRanked = (pool: string): HostRecord[] => {
    let list = busyByPool.get(pool);
    if (!list) {
      list = (poolHosts.get(pool) ?? [])
        .filter((h) => base.get(h.id)!.kind === 'busy')
        .sort((a, b) => drainRank(a) - drainRank(b) || a.id.localeCompare(b.id, 'en', { numeric: true }));
      busyByPool.set(pool, list);
    }
    return list;
  };

  let position = 0;
  let r: ReservationRecord;
  // one closure for the whole pass (not one per request): this loop runs 10,000s of times
  const wait = (code: WaitCode, reason: string) => {
    position++;
    plan.waits.push({ reservationId: r.id, position, code, reason });
  };
  for (r of queued) {
    const need = hostsNeeded(r.topology);
    const pool = r.pool;

    // Explicit Deckard start: met at once when its host already serves.
    if (r.kind === 'deckard' && r.targetHost) {
      const b = base.get(r.targetHost);
      if (b?.kind === 'free' && b.state === 'service' && !held.has(r.targetHost)) {
        plan.satisfied.push(r.id);
        continue;
      }
    }

    let candidates: HostRecord[];
    if (r.targetHost) {
      const target = hostsById.get(r.targetHost);
      const b = target ? base.get(target.id)! : undefined;
      if (!target || !b || target.pool !== pool) {
        wait('target-unavailable', `${r.targetHost} is not a host of pool ${pool}`);
        continue;
      }
      if (b.kind === 'out') {
        wait('target-unavailable', `waiting for ${b.why}`);
        continue;
      }
      if (b.kind === 'busy' || held.has(target.id)) {
        // rule 4: a development request drains its target: current work finishes, nothing new starts
        if (b.kind === 'busy' && r.kind === 'development' && !draining.has(target.id)) {
          draining.set(target.id, r.id);
          poolBusyReason.delete(pool);
        }
        const by = held.get(target.id);
        wait(
          by ? 'held-for-pair' : 'hosts-busy',
          by
            ? `${target.id} held for ${by}`
            : `${target.id} draining: ${b.kind === 'busy' ? b.why : ''}; active job finishing`,
        );
        continue;
      }
      candidates = [target];
      if (need > 1) {
        const others = (freeByPool.get(pool) ?? []).filter((h) => h.id !== target.id);
        candidates = candidates.concat(others.slice(0, need - 1));
      }
    } else {
      const free = freeByPool.get(pool);
      if (
        (!free || free.length === 0) &&
        r.kind !== 'development' &&
        need <= (schedulableByPool.get(pool) ?? 0)
      ) {
        // hot path for a long queue behind a busy pool: nothing to take, hold or drain
        wait('hosts-busy', describePool(pool));
        continue;
      }
      const schedulable = schedulableByPool.get(pool) ?? 0;
      if (schedulable < need) {
        wait(
          'pool-too-small',
          `needs ${need} host${need > 1 ? 's' : ''} in pool ${pool}; ${schedulable} schedulable now`,
        );
        continue;
      }
      candidates = (freeByPool.get(pool) ?? []).slice(0, need);
    }

    if (candidates.length < need) {
      // Rule 3: a blocked pair keeps what is free now so smaller work cannot take it.
      for (const h of candidates) {
        held.set(h.id, r.id);
        plan.holds.push({ hostId: h.id, reservationId: r.id });
        removeFree(freeByPool, h);
      }
      if (candidates.length > 0) poolBusyReason.delete(pool);
      if (r.kind === 'development') {
        // rule 4 for an untargeted request: the best busy hosts drain for it
        const busy = busyRanked(pool);
        let want = need - candidates.length;
        while (want > 0 && busy.length > 0) {
          const h = busy.shift()!;
          if (draining.has(h.id) || base.get(h.id)!.kind !== 'busy') continue;
          draining.set(h.id, r.id);
          poolBusyReason.delete(pool);
          want--;
        }
      }
      if (candidates.length > 0) {
        wait(
          'held-for-pair',
          `holding ${candidates.map((h) => h.id).join(', ')}; ${describePool(pool).replace(/^waiting for a host in/, 'waiting for a second host in')}`,
        );
      } else {
        wait('hosts-busy', describePool(pool));
      }
      continue;
    }

    const g = gpusOf(candidates.map((h) => h.id));
    const key = prKey(r);
    if (key) {
      const mine = prGpus.get(key);
      if (mine === undefined && prGpus.size >= maxPrs) {
        wait('budget-prs', `budget: ${prGpus.size} PRs admitted (limit ${maxPrs})`);
        continue;
      }
      if ((mine ?? 0) + g > maxGpusPerPr) {
        wait('budget-pr-gpus', `budget: ${key} holds ${mine ?? 0} of ${maxGpusPerPr} GPUs per PR`);
        continue;
      }
    }
    if (totalGpus + g > maxGpus) {
      wait('budget-gpus', `budget: ${totalGpus} of ${maxGpus} GPUs in use`);
      continue;
    }

    for (const h of candidates) removeFree(freeByPool, h);
    poolBusyReason.delete(pool);
    totalGpus += g;
    if (key) prGpus.set(key, (prGpus.get(key) ?? 0) + g);
    const lend = candidates.filter((h) => {
      const b = base.get(h.id)!;
      return b.kind === 'free' && b.state === 'service';
    });
    plan.grants.push({
      reservationId: r.id,
      hostIds: candidates.map((h) => h.id),
      lend: lend.map((h) => h.id),
      gpus: g,
    });
    for (const h of candidates)
      base.set(h.id, { kind: 'busy', state: 'allocated', why: `${h.id} allocated to ${r.id}` });
  }

  for (const [hostId, reservationId] of draining) plan.draining.push({ hostId, reservationId });
  for (const h of input.hosts) {
    const b = base.get(h.id)!;
    let s: HostState = b.state;
    if (held.has(h.id)) s = 'held';
    else if (draining.has(h.id) && b.state === 'allocated') s = 'draining';
    plan.hostStates[h.id] = s;
  }
  return plan;
}

function removeFree(freeByPool: Map<string, HostRecord[]>, host: HostRecord) {
  const list = freeByPool.get(host.pool);
  if (!list) return;
  const i = list.indexOf(host);
  if (i >= 0) list.splice(i, 1);
}
