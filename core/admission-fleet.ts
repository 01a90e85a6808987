import type { AdmissionConfig, AdmissionPlan } from './admission-plan.ts';
import { type HostRecord, type HostState, type LeaseRecord, servesDevelopment } from './model.ts';

/**
 * The fleet as one admission pass sees it: each host's standing (rule 2: only a fresh, adopted,
 * clean host is ever granted), the free hosts of each pool best first, and the order in which busy
 * hosts are asked to drain. Rules: docs/adr/0206-admission-as-named-steps.md.
 */

/** A host out of admission, busy with work, or free to grant (idle, or serving and lendable). */
export type Standing =
  | { kind: 'out'; state: HostState; why: string; note?: boolean }
  | { kind: 'busy'; state: HostState; why: string }
  | { kind: 'free'; state: 'idle' | 'service' };

/**
 * Host ids sort in natural order (`spark-2` before `spark-10`). One collator for every pass:
 * `localeCompare(b, 'en', { numeric: true })` builds a collator per call, which made sorting 256
 * hosts cost more than the rest of a 10,000-request pass (docs/adr/0060-admission-pass-cost.md).
 * Same order by spec (ECMA-402: `localeCompare` with options behaves as
 * `new Intl.Collator(locales, options).compare`).
 */
export const byHostId = new Intl.Collator('en', { numeric: true }).compare;

/** Whether a host's last heartbeat is recent enough; a host never heard from is offline (rule 8). */
export function isHeartbeatFresh(
  host: Pick<HostRecord, 'lastHeartbeatAt'>,
  now: number,
  offlineAfterS: number,
) {
  return host.lastHeartbeatAt != null && now - host.lastHeartbeatAt <= offlineAfterS * 1000;
}

/** Rule 2: an unknown, unmanaged, offline, restoring, release-required or quarantined host is never granted. */
export function classifyHost(
  host: HostRecord,
  bound: LeaseRecord | undefined,
  now: number,
  cfg: AdmissionConfig,
): Standing {
  if (!host.managed) return { kind: 'out', state: 'unknown', why: `${host.id} is not adopted` };
  if (!isHeartbeatFresh(host, now, cfg.timings.offlineAfterS)) {
    // an offline host keeps its lease; it is never inferred idle
    return { kind: 'out', state: 'offline', why: `${host.id} offline (no recent heartbeat)` };
  }
  const phase = standingOfPhase(host);
  if (phase) return phase;
  if (bound || host.phase === 'allocated') {
    return {
      kind: 'busy',
      state: 'allocated',
      why: `${host.id} allocated${bound ? ` to ${bound.reservationId}` : ''}`,
    };
  }
  return standingOfGpu(host);
}

/** A persisted phase that alone decides: quarantined, release-required, cleaning, restoring. */
function standingOfPhase(host: HostRecord): Standing | null {
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
      return null;
  }
}

/** An unbound host is free only when its agent reports the GPU, and an idle one runs no process on it. */
function standingOfGpu(host: HostRecord): Standing {
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

/** The fleet during one pass. Taking a free host removes it from its pool for the rest of the pass. */
export interface Fleet {
  hostsById: Map<string, HostRecord>;
  standing: Map<string, Standing>;
  /** Free hosts per pool, best first: no lending needed, then `preferHosts`, then host id. */
  freeByPool: Map<string, HostRecord[]>;
  /** Hosts per pool that are not out (busy or free): what a request could ever get there now. */
  schedulableByPool: Map<string, number>;
  /**
   * Of those, the hosts that can serve a development lease (ADR 0176, `servesDevelopment`): no
   * host stops or starts being out within a pass, so counted once instead of per request.
   */
  devSchedulableByPool: Map<string, number>;
  poolHosts: Map<string, HostRecord[]>;
  /**
   * Each pool's hosts in the order busy ones are asked to drain: home-service hosts last (they go
   * back to their service when freed), then `preferHosts`, then host id — the same choice whatever
   * order the ledger returns hosts in. Sorted once per pass.
   */
  drainOrder: Map<string, HostRecord[]>;
}

/** Classifies every host (rule 2) and orders each pool's free hosts and drain candidates. */
export function classifyFleet(
  hosts: readonly HostRecord[],
  boundLease: ReadonlyMap<string, LeaseRecord>,
  now: number,
  config: AdmissionConfig,
  plan: AdmissionPlan,
): Fleet {
  const hostsById = new Map<string, HostRecord>();
  for (const h of hosts) hostsById.set(h.id, h);
  const { byId, preferAt } = hostOrder(hosts, config.preferHosts);
  const standing = new Map<string, Standing>();
  const rank = new Map<string, number>();
  for (const h of hosts) {
    const b = classifyHost(h, boundLease.get(h.id), now, config);
    standing.set(h.id, b);
    if (b.kind === 'out' && b.note) plan.hostNotes[h.id] = b.why;
    // prefer hosts that need no lending, then the configured order, then id order
    rank.set(
      h.id,
      (b.kind === 'free' && b.state === 'service' ? 1_000_000 : 0) + (preferAt.get(h.id) ?? 1000),
    );
  }
  const fleet = groupByPool(hosts, standing, hostsById);
  for (const list of fleet.freeByPool.values()) {
    list.sort((a, b) => rank.get(a.id)! - rank.get(b.id)! || byId(a, b));
  }
  const drainRank = (h: HostRecord) => (h.homeService ? 1_000_000 : 0) + (preferAt.get(h.id) ?? 1000);
  for (const h of [...hosts].sort((a, b) => drainRank(a) - drainRank(b) || byId(a, b))) {
    const list = fleet.drainOrder.get(h.pool);
    if (list) list.push(h);
    else fleet.drainOrder.set(h.pool, [h]);
  }
  return fleet;
}

/**
 * The last fleet's id ranks: the fleet rarely changes between passes and the ledger returns its
 * hosts in the same order, so the collator sort (256 hosts: ~2,000 compares) runs only when the
 * ids differ. The ranks depend on the ids alone, so the plan is the same either way.
 */
let lastIds: string[] = [];
let lastRank = new Map<string, number>();

function idRanks(hosts: readonly HostRecord[]): Map<string, number> {
  let same = hosts.length === lastIds.length;
  for (let i = 0; same && i < hosts.length; i++) same = hosts[i]!.id === lastIds[i];
  if (same) return lastRank;
  const ids = hosts.map((h) => h.id);
  const idRank = new Map<string, number>();
  const sortedIds = [...ids].sort(byHostId);
  for (let i = 0; i < sortedIds.length; i++) idRank.set(sortedIds[i]!, i);
  lastIds = ids;
  lastRank = idRank;
  return idRank;
}

/** Id order and `preferHosts` positions. Every host sort ends on the id: ranked once, sorts compare integers. */
function hostOrder(hosts: readonly HostRecord[], preferHosts: readonly string[]) {
  const idRank = idRanks(hosts);
  const byId = (a: HostRecord, b: HostRecord) => idRank.get(a.id)! - idRank.get(b.id)!;
  // position in preferHosts, first mention wins (as `indexOf`)
  const preferAt = new Map<string, number>();
  preferHosts.forEach((id, i) => {
    if (!preferAt.has(id)) preferAt.set(id, i);
  });
  return { byId, preferAt };
}

function groupByPool(
  hosts: readonly HostRecord[],
  standing: Map<string, Standing>,
  hostsById: Map<string, HostRecord>,
): Fleet {
  const freeByPool = new Map<string, HostRecord[]>();
  const schedulableByPool = new Map<string, number>();
  const devSchedulableByPool = new Map<string, number>();
  const poolHosts = new Map<string, HostRecord[]>();
  for (const h of hosts) {
    const b = standing.get(h.id)!;
    if (!poolHosts.has(h.pool)) poolHosts.set(h.pool, []);
    poolHosts.get(h.pool)!.push(h);
    if (b.kind !== 'out') schedulableByPool.set(h.pool, (schedulableByPool.get(h.pool) ?? 0) + 1);
    if (b.kind !== 'out' && servesDevelopment(h))
      devSchedulableByPool.set(h.pool, (devSchedulableByPool.get(h.pool) ?? 0) + 1);
    if (b.kind === 'free') {
      if (!freeByPool.has(h.pool)) freeByPool.set(h.pool, []);
      freeByPool.get(h.pool)!.push(h);
    }
  }
  return {
    hostsById,
    standing,
    freeByPool,
    schedulableByPool,
    devSchedulableByPool,
    poolHosts,
    drainOrder: new Map(),
  };
}

/** Takes `host` out of its pool's free list for the rest of the pass. */
export function removeFree(freeByPool: Map<string, HostRecord[]>, host: HostRecord) {
  const list = freeByPool.get(host.pool);
  if (!list) return;
  const i = list.indexOf(host);
  if (i >= 0) list.splice(i, 1);
}
