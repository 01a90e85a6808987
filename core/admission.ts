import type { SparkConfig } from './config.ts';
import {
  BINDING_LEASE_STATUSES,
  executorPhrase,
  type HostRecord,
  type HostState,
  hostsNeeded,
  isActiveStatus,
  type LeaseRecord,
  prKey,
  queueOrder,
  type ReservationRecord,
  servesDevelopment,
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
  /**
   * Budget slots ({@link budgetSlot}) whose build already had a lane admitted and still has a lane
   * queued: the slot stays taken between the lanes until the build's last lane finishes (rule 6,
   * issue 14 item 6). The ledger computes it; absent means none.
   */
  keptSlots?: readonly string[];
}

/**
 * The budget slot a reservation takes (rule 6, counted against `maxPrs`): its PR, or for CI not
 * tied to a PR (merge CI, scheduled benchmark, background) its own build `repo@sha` — such work
 * consumes a slot and the same GPU budgets as a PR (issue 14 item 6). Development and Deckard
 * work take no slot: they are not CI.
 */
export function budgetSlot(
  r: Pick<ReservationRecord, 'repo' | 'pr' | 'kind' | 'headSha' | 'id'>,
): string | null {
  const pr = prKey(r);
  if (pr) return pr;
  if (r.repo && (r.kind === 'merge' || r.kind === 'benchmark' || r.kind === 'background'))
    return `${r.repo}@${r.headSha ?? r.id}`;
  return null;
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
  | 'pool-too-small'
  /** Background CI (class 20) waits while any other class waits in its pool (issue 14 item 4). */
  | 'background-yields'
  /** An explicit Deckard start whose idle host is restoring its service for it (issue 14 item 2). */
  | 'restoring';

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
  /**
   * Explicit Deckard starts on an idle host with a home service: the host goes `restoring` at once
   * (model-ready gate, bounded retries, quarantine on failure); the request is met when it serves.
   */
  restores: { hostId: string; reservationId: string }[];
  /**
   * Active pairs with a node whose heartbeat went stale: the pair fails as a unit (DESIGN.md
   * "failed"), the healthy nodes are released, the dark ones need release until their agent returns.
   */
  pairLosses: { reservationId: string; lostHosts: string[]; healthyHosts: string[] }[];
  hostStates: Record<string, HostState>;
  /** Why a host that looks free cannot be granted (foreign GPU process, GPU unknown). */
  hostNotes: Record<string, string>;
}

type Base =
  | { kind: 'out'; state: HostState; why: string; note?: boolean }
  | { kind: 'busy'; state: HostState; why: string }
  | { kind: 'free'; state: 'idle' | 'service' };

/**
 * Host ids sort in natural order (`spark-2` before `spark-10`). One collator for every pass:
 * `localeCompare(b, 'en', { numeric: true })` builds a collator per call, which made sorting 256
 * hosts cost more than the rest of a 10,000-request pass (issue 13 bench). Same order by spec
 * (ECMA-402: `localeCompare` with options behaves as `new Intl.Collator(locales, options).compare`).
 */
const byHostId = new Intl.Collator('en', { numeric: true }).compare;

/** Pools of up to this many hosts list each host in a wait reason; larger ones give counts. */
const LIST_HOSTS_UP_TO = 4;

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
    restores: [],
    pairLosses: [],
    hostStates: {},
    hostNotes: {},
  };

  const hostsById = new Map<string, HostRecord>();
  for (const h of input.hosts) hostsById.set(h.id, h);

  const boundLease = new Map<string, LeaseRecord>();
  for (const l of input.leases) {
    if (BINDING_LEASE_STATUSES.includes(l.status)) boundLease.set(l.hostId, l);
  }

  const leasesByReservation = new Map<string, string[]>();
  for (const l of boundLease.values()) {
    const list = leasesByReservation.get(l.reservationId) ?? [];
    list.push(l.hostId);
    leasesByReservation.set(l.reservationId, list);
  }
  // One walk over the reservations (10,000s queued): a set or map of every id costs more than the
  // rest of the pass, so only the active ones are indexed.
  const queued: ReservationRecord[] = [];
  const active: ReservationRecord[] = [];
  const activeById = new Map<string, ReservationRecord>();
  for (const r of input.reservations) {
    if (r.status === 'queued') {
      if (r.queueDeadline <= now) plan.queueTimeouts.push(r.id);
      else queued.push(r);
    } else if (isActiveStatus(r.status)) {
      active.push(r);
      activeById.set(r.id, r);
    }
  }

  // A pair whose node went dark fails as a unit within the offline threshold (issue 14 item 1):
  // its job cannot finish on one node, so waiting for the lease TTL only keeps the healthy node.
  const pairHosts = new Map<string, string[]>();
  for (const l of boundLease.values()) {
    if (l.status !== 'active') continue;
    const list = pairHosts.get(l.reservationId) ?? [];
    list.push(l.hostId);
    pairHosts.set(l.reservationId, list);
  }
  const lostPairs = new Set<string>();
  for (const [rid, hostIds] of pairHosts) {
    const r = activeById.get(rid);
    if (r?.topology !== 'pair' || r.status === 'releasing') continue;
    const lost = hostIds.filter((id) => {
      const h = hostsById.get(id);
      return !h || !isHeartbeatFresh(h, now, config.timings.offlineAfterS);
    });
    if (lost.length === 0) continue;
    lost.sort(byHostId);
    lostPairs.add(rid);
    plan.pairLosses.push({
      reservationId: rid,
      lostHosts: lost,
      healthyHosts: hostIds.filter((id) => !lost.includes(id)).sort(byHostId),
    });
  }

  // Expiry (rule 7): an expired lease never silently frees its host.
  for (const l of boundLease.values()) {
    if (l.status !== 'active' || l.expiresAt > now) continue;
    // a lost pair is released as a unit above; its leases do not also expire
    if (lostPairs.has(l.reservationId)) continue;
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

  // Every host sort below ends on the id: rank the ids once so the sorts compare integers.
  const idRank = new Map<string, number>();
  const sortedIds = input.hosts.map((h) => h.id).sort(byHostId);
  for (let i = 0; i < sortedIds.length; i++) idRank.set(sortedIds[i]!, i);
  const byId = (a: HostRecord, b: HostRecord) => idRank.get(a.id)! - idRank.get(b.id)!;
  // position in preferHosts, first mention wins (as `indexOf`)
  const preferAt = new Map<string, number>();
  config.preferHosts.forEach((id, i) => {
    if (!preferAt.has(id)) preferAt.set(id, i);
  });

  const base = new Map<string, Base>();
  const rank = new Map<string, number>();
  for (const h of input.hosts) {
    const b = classify(h, boundLease.get(h.id), now, config);
    base.set(h.id, b);
    if (b.kind === 'out' && b.note) plan.hostNotes[h.id] = b.why;
    // prefer hosts that need no lending, then the configured order, then id order
    rank.set(
      h.id,
      (b.kind === 'free' && b.state === 'service' ? 1_000_000 : 0) + (preferAt.get(h.id) ?? 1000),
    );
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
    list.sort((a, b) => rank.get(a.id)! - rank.get(b.id)! || byId(a, b));
  }

  // Budgets (rule 6): count from grant until termination is confirmed.
  const gpusOf = (hostIds: Iterable<string>) => {
    let g = 0;
    for (const id of hostIds) g += hostsById.get(id)?.gpus ?? 1;
    return g;
  };
  const prGpus = new Map<string, number>();
  let totalGpus = 0;
  for (const r of active) {
    const g = gpusOf(leasesByReservation.get(r.id) ?? []);
    totalGpus += g;
    const key = budgetSlot(r);
    if (key) prGpus.set(key, (prGpus.get(key) ?? 0) + g);
  }
  // leases whose reservation is not in the input still hold GPUs (a lease of an active
  // reservation is the rule; only a rare other one costs a walk over the input)
  for (const [rid, hostIds] of leasesByReservation) {
    if (!activeById.has(rid) && !input.reservations.some((r) => r.id === rid)) totalGpus += gpusOf(hostIds);
  }
  // a build between its lanes keeps its slot (0 GPUs now, but the slot is taken)
  // (it still needs a free slot itself if others took every one while it had no lane queued)
  const keptOnly = new Set<string>();
  if (input.keptSlots?.length) {
    const kept = new Set(input.keptSlots);
    for (const r of queued) {
      const key = budgetSlot(r);
      if (key && kept.has(key) && !prGpus.has(key)) {
        prGpus.set(key, 0);
        keptOnly.add(key);
      }
    }
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
    if (hosts.length <= LIST_HOSTS_UP_TO) {
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
  // A drain claim shows only in a pool text that lists its hosts one by one; a larger pool's text
  // counts busy, held and unavailable hosts, which a claim does not change. Recomputing that
  // count after every claim made a long queue behind a 256-host pool O(queue × hosts).
  const claimChangesText = (pool: string) => {
    if (poolHosts.get(pool)!.length <= LIST_HOSTS_UP_TO) poolBusyReason.delete(pool);
  };

  // Hosts with a home service drain last (they go back to it when freed), then preferHosts, then
  // host id: the same choice whatever order the ledger returns hosts in. Each pool's hosts in that
  // order, sorted once per pass (which of them are busy and unclaimed changes as the pass goes).
  const drainRank = (h: HostRecord) => (h.homeService ? 1_000_000 : 0) + (preferAt.get(h.id) ?? 1000);
  const drainOrder = new Map<string, HostRecord[]>();
  for (const h of [...input.hosts].sort((a, b) => drainRank(a) - drainRank(b) || byId(a, b))) {
    const list = drainOrder.get(h.pool);
    if (list) list.push(h);
    else drainOrder.set(h.pool, [h]);
  }
  // Where the next claim in a pool starts looking: every host before it is not busy or already
  // draining. Claims are never undone and no host stops being busy within a pass; and a pool is
  // claimed from only once its free list is empty (the hot path, or a shortage that held every
  // free host), after which no grant or restore can make one of its hosts busy in this pass.
  const drainFrom = new Map<string, number>();
  // Issue 14 item 3: a request waiting because every host is busy is next in line for the best
  // busy host no earlier request claimed; that host is `draining` for it (its active job
  // finishes, it accepts nothing new), so the request's check can say so. One claim per host.
  // Busy includes hosts granted earlier in this pass. This runs for every waiting request (want ≥ 1);
  // once a pool's busy hosts are all claimed its cursor stays at the end and a call costs nothing.
  const claimBusy = (pool: string, want: number, forId: string) => {
    const order = drainOrder.get(pool)!;
    let claimed = 0;
    let i = drainFrom.get(pool) ?? 0;
    for (; i < order.length && claimed < want; i++) {
      const h = order[i]!;
      if (base.get(h.id)!.kind !== 'busy' || draining.has(h.id)) continue;
      draining.set(h.id, forId);
      claimed++;
    }
    drainFrom.set(pool, i);
    if (claimed > 0) claimChangesText(pool);
  };
  // The same for an untargeted development request, over the hosts that can serve it only (ADR
  // 0176); rare, so it scans the pool instead of keeping a cursor.
  const claimBusyServing = (pool: string, want: number, forId: string) => {
    let claimed = 0;
    for (const h of drainOrder.get(pool)!) {
      if (claimed >= want) break;
      if (base.get(h.id)!.kind !== 'busy' || draining.has(h.id) || !servesDevelopment(h)) continue;
      draining.set(h.id, forId);
      claimed++;
    }
    if (claimed > 0) claimChangesText(pool);
  };
  // Issue 14 item 4: background CI yields to every other class waiting in its pool.
  const othersWaiting = new Set<string>();

  let position = 0;
  let r: ReservationRecord;
  // one closure for the whole pass (not one per request): this loop runs 10,000s of times
  const wait = (code: WaitCode, reason: string) => {
    if (r.kind !== 'background') othersWaiting.add(r.pool);
    position++;
    plan.waits.push({ reservationId: r.id, position, code, reason });
  };
  for (r of queued) {
    const need = hostsNeeded(r.topology);
    const pool = r.pool;

    // Explicit Deckard start: met at once when its host already serves; on an idle host with a
    // home service it drives the restore path now instead of taking a lease (issue 14 item 2).
    if (r.kind === 'deckard' && r.targetHost) {
      const target = hostsById.get(r.targetHost);
      const b = base.get(r.targetHost);
      if (b?.kind === 'free' && !held.has(r.targetHost) && target?.homeService) {
        if (b.state === 'service') {
          plan.satisfied.push(r.id);
          continue;
        }
        plan.restores.push({ hostId: target.id, reservationId: r.id });
        removeFree(freeByPool, target);
        base.set(target.id, {
          kind: 'busy',
          state: 'restoring',
          why: `${target.id} restoring ${target.homeService}`,
        });
        poolBusyReason.delete(target.pool);
        wait(
          'restoring',
          `${target.id} restoring ${target.homeService}: waiting for its model-ready health check`,
        );
        continue;
      }
      if (b?.kind === 'busy' && b.state === 'restoring') {
        wait('restoring', `waiting for ${b.why}: model-ready health check`);
        continue;
      }
    }

    if (r.kind === 'background' && othersWaiting.has(pool)) {
      wait('background-yields', `background CI yields: other work waits in pool ${pool}`);
      continue;
    }
    admitOne(need, pool);
  }

  function admitOne(need: number, pool: string): void {
    let candidates: HostRecord[];
    if (r.targetHost) {
      const target = hostsById.get(r.targetHost);
      const b = target ? base.get(target.id)! : undefined;
      if (!target || !b || target.pool !== pool) {
        wait('target-unavailable', `${r.targetHost} is not a host of pool ${pool}`);
        return;
      }
      // a development lease is used through its dstack dev environment (ADR 0176): the operator
      // API refuses such a request at once; this holds if the host's backend changed since
      // (a host without facts is out below: its GPU state is unknown)
      if (r.kind === 'development' && target.facts && !servesDevelopment(target)) {
        wait(
          'target-unavailable',
          `${executorPhrase(target)}: a development lease needs the dstack executor`,
        );
        return;
      }
      if (b.kind === 'out') {
        wait('target-unavailable', `waiting for ${b.why}`);
        return;
      }
      if (b.kind === 'busy' || held.has(target.id)) {
        // rule 4: a development request drains its target: current work finishes, nothing new
        // starts; an explicit Deckard start runs next after active work (issue 14 item 2)
        if (
          b.kind === 'busy' &&
          (r.kind === 'development' || r.kind === 'deckard') &&
          !draining.has(target.id)
        ) {
          draining.set(target.id, r.id);
          claimChangesText(pool);
        }
        const by = held.get(target.id);
        wait(
          by ? 'held-for-pair' : 'hosts-busy',
          by
            ? `${target.id} held for ${by}`
            : `${target.id} draining: ${b.kind === 'busy' ? b.why : ''}; active job finishing`,
        );
        return;
      }
      candidates = [target];
      if (need > 1) {
        const others = (freeByPool.get(pool) ?? []).filter((h) => h.id !== target.id);
        candidates = candidates.concat(others.slice(0, need - 1));
      }
    } else if (r.kind === 'development') {
      // only hosts whose backend gives a development lease its environment (ADR 0176)
      const free = (freeByPool.get(pool) ?? []).filter(servesDevelopment);
      let schedulable = 0;
      for (const h of poolHosts.get(pool) ?? [])
        if (base.get(h.id)!.kind !== 'out' && servesDevelopment(h)) schedulable++;
      if (schedulable < need) {
        wait(
          'pool-too-small',
          `needs ${need} host${need > 1 ? 's' : ''} in pool ${pool} running the dstack executor (development); ${schedulable} schedulable now`,
        );
        return;
      }
      candidates = free.slice(0, need);
      if (candidates.length < need) {
        for (const h of candidates) {
          held.set(h.id, r.id);
          plan.holds.push({ hostId: h.id, reservationId: r.id });
          removeFree(freeByPool, h);
        }
        if (candidates.length > 0) poolBusyReason.delete(pool);
        // rule 4: the best busy hosts that can serve it drain for it
        claimBusyServing(pool, need - candidates.length, r.id);
        wait(
          candidates.length > 0 ? 'held-for-pair' : 'hosts-busy',
          candidates.length > 0
            ? `holding ${candidates.map((h) => h.id).join(', ')}; waiting for a second host in pool ${pool} running the dstack executor`
            : `waiting for a host in pool ${pool} running the dstack executor: ${describePool(pool).replace(/^waiting for a host in pool [^:]*: /, '')}`,
        );
        return;
      }
    } else {
      const free = freeByPool.get(pool);
      if ((!free || free.length === 0) && need <= (schedulableByPool.get(pool) ?? 0)) {
        // hot path for a long queue behind a busy pool: nothing to take or hold; the first
        // requests claim the busy hosts they are next in line for (issue 14 item 3)
        claimBusy(pool, need, r.id);
        wait('hosts-busy', describePool(pool));
        return;
      }
      const schedulable = schedulableByPool.get(pool) ?? 0;
      if (schedulable < need) {
        wait(
          'pool-too-small',
          `needs ${need} host${need > 1 ? 's' : ''} in pool ${pool}; ${schedulable} schedulable now`,
        );
        return;
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
      // issue 14 item 3: the best busy hosts no earlier request claimed drain for it (an
      // untargeted development request claims its own above, rule 4)
      claimBusy(pool, need - candidates.length, r.id);
      if (candidates.length > 0) {
        wait(
          'held-for-pair',
          `holding ${candidates.map((h) => h.id).join(', ')}; ${describePool(pool).replace(/^waiting for a host in/, 'waiting for a second host in')}`,
        );
      } else {
        wait('hosts-busy', describePool(pool));
      }
      return;
    }

    const g = gpusOf(candidates.map((h) => h.id));
    const key = budgetSlot(r);
    if (key) {
      const mine = prGpus.get(key);
      const others = prGpus.size - (mine === undefined ? 0 : 1);
      if ((mine === undefined || keptOnly.has(key)) && others >= maxPrs) {
        wait('budget-prs', `budget: ${others} PRs admitted (limit ${maxPrs})`);
        return;
      }
      if ((mine ?? 0) + g > maxGpusPerPr) {
        wait('budget-pr-gpus', `budget: ${key} holds ${mine ?? 0} of ${maxGpusPerPr} GPUs per PR`);
        return;
      }
    }
    if (totalGpus + g > maxGpus) {
      wait('budget-gpus', `budget: ${totalGpus} of ${maxGpus} GPUs in use`);
      return;
    }

    for (const h of candidates) removeFree(freeByPool, h);
    poolBusyReason.delete(pool);
    totalGpus += g;
    if (key) {
      prGpus.set(key, (prGpus.get(key) ?? 0) + g);
      keptOnly.delete(key);
    }
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
