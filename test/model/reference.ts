import type { HostState } from '../../core/model.ts';
import { bindingLease, isActive, isFresh, type MHost, type MRes, type World } from './world.ts';

/**
 * The reference admission: docs/architecture.md rules 1–8 restated over the model world, predicting what one
 * admission pass must do. It never reads the system's plan or wait codes; the tests compare.
 *
 * Choices the design leaves open are fixed here as the product documents them: single work
 * prefers hosts that need no lending (spark-2 before spark-1), then `preferHosts`, then host
 * number; a request blocked by a budget keeps nothing (only a host shortage holds hosts).
 */

export type WaitCode =
  | 'hosts-busy'
  | 'held-for-pair'
  | 'budget-prs'
  | 'budget-pr-gpus'
  | 'budget-gpus'
  | 'target-unavailable'
  | 'pool-too-small'
  | 'background-yields'
  | 'restoring';

export interface Prediction {
  grants: { id: string; hosts: string[]; lend: string[]; gpus: number }[];
  waits: { id: string; position: number; code: WaitCode }[];
  holds: { host: string; id: string }[];
  draining: { host: string; id: string }[];
  expiries: { leaseId: string; outcome: 'release' | 'release-required' }[];
  timeouts: string[];
  satisfied: string[];
  /** Explicit Deckard starts that send their idle host restoring. */
  restores: { host: string; id: string }[];
  /** Active pairs with a node gone dark: failed as a unit. */
  pairLosses: { id: string; lost: string[]; healthy: string[] }[];
  hostStates: Record<string, HostState>;
  /** Hosts that look free but are kept out for what their GPU shows (foreign process / unknown). */
  noted: string[];
}

/** How a host stands before the pass: out of scheduling, busy with work, or free to grant. */
type Standing =
  | { is: 'out'; state: HostState; noted: boolean }
  | { is: 'busy'; state: HostState }
  | { is: 'free' };

export function standing(w: World, h: MHost): Standing {
  // rule 2 and rule 8: unadopted, offline (stale or never heard), quarantined, release-required
  if (!h.managed) return { is: 'out', state: 'unknown', noted: false };
  if (!isFresh(w, h)) return { is: 'out', state: 'offline', noted: false };
  if (h.phase === 'quarantined' || h.phase === 'release-required')
    return { is: 'out', state: h.phase, noted: false };
  // cleaning and restoring hosts come back by themselves: busy, not out
  if (h.phase === 'cleaning' || h.phase === 'restoring') return { is: 'busy', state: h.phase };
  if (bindingLease(w, h.id) || h.phase === 'allocated') return { is: 'busy', state: 'allocated' };
  // fail closed on the GPU: unknown, or compute processes on an idle host that no lease explains
  if (!h.reported || h.procs == null) return { is: 'out', state: h.phase, noted: true };
  if (h.phase === 'idle' && h.procs > 0) return { is: 'out', state: 'idle', noted: true };
  return { is: 'free' };
}

function hostNumber(id: string): number {
  const m = /(\d+)$/.exec(id);
  return m ? Number(m[1]) : Number.MAX_SAFE_INTEGER;
}

export function predict(w: World): Prediction {
  const p: Prediction = {
    grants: [],
    waits: [],
    holds: [],
    draining: [],
    expiries: [],
    timeouts: [],
    satisfied: [],
    restores: [],
    pairLosses: [],
    hostStates: {},
    noted: [],
  };
  const { budgets, preferHosts } = w.cfg;
  const hosts = [...w.hosts.values()];

  // an active pair with a node whose heartbeat is stale fails as a unit
  const lostPairs = new Set<string>();
  for (const r of w.res.values()) {
    if (r.topology !== 'pair' || !['allocated', 'preparing', 'running'].includes(r.status)) continue;
    const mine = w.leases.filter((l) => l.resId === r.id && l.status === 'active').map((l) => l.hostId);
    const lost = mine.filter((id) => !isFresh(w, w.hosts.get(id)!));
    if (lost.length === 0) continue;
    const byNumber = (a: string, b: string) => hostNumber(a) - hostNumber(b);
    lostPairs.add(r.id);
    p.pairLosses.push({
      id: r.id,
      lost: lost.sort(byNumber),
      healthy: mine.filter((id) => !lost.includes(id)).sort(byNumber),
    });
  }

  // rule 7: an expired lease never frees its host; it is released only if the GPU is known clean
  for (const l of w.leases) {
    if (l.status !== 'active' || l.expiresAt > w.now) continue;
    if (lostPairs.has(l.resId)) continue;
    const h = w.hosts.get(l.hostId)!;
    const clean = isFresh(w, h) && h.reported && h.procs === 0;
    p.expiries.push({ leaseId: l.id, outcome: clean ? 'release' : 'release-required' });
  }

  const st = new Map<string, Standing>();
  for (const h of hosts) {
    const s = standing(w, h);
    st.set(h.id, s);
    if (s.is === 'out' && s.noted) p.noted.push(h.id);
  }
  const isServing = (h: MHost) => st.get(h.id)!.is === 'free' && h.phase === 'service';
  const preferIndex = (id: string) => {
    const i = preferHosts.indexOf(id);
    return i < 0 ? preferHosts.length + 1000 : i;
  };
  // lending a service host is the last resort; then the configured preference; then host number
  const better = (a: MHost, b: MHost) =>
    Number(isServing(a)) - Number(isServing(b)) ||
    preferIndex(a.id) - preferIndex(b.id) ||
    hostNumber(a.id) - hostNumber(b.id);

  const held = new Map<string, string>();
  const draining = new Map<string, string>();
  const granted = new Set<string>();
  // idle service hosts an explicit Deckard start sends restoring in this pass
  const restoring = new Set<string>();
  const freeNow = (h: MHost) =>
    st.get(h.id)!.is === 'free' && !held.has(h.id) && !granted.has(h.id) && !restoring.has(h.id);
  const busyNow = (h: MHost) => st.get(h.id)!.is === 'busy' || granted.has(h.id) || restoring.has(h.id);
  // a service host drains last (it goes back to its service when freed), then preference, number
  const drainOrder = (a: MHost, b: MHost) =>
    Number(a.home != null) - Number(b.home != null) ||
    preferIndex(a.id) - preferIndex(b.id) ||
    hostNumber(a.id) - hostNumber(b.id);
  // waiting for hosts, a request is next in line for the best busy hosts no
  // earlier request claimed; they drain for it
  const claim = (r: MRes, want: number) => {
    const busy = hosts.filter((h) => h.pool === r.pool && busyNow(h) && !draining.has(h.id)).sort(drainOrder);
    for (const h of busy.slice(0, Math.max(0, want))) draining.set(h.id, r.id);
  };
  // background CI waits while any other class waits in its pool
  const othersWaiting = new Set<string>();
  const schedulable = (pool: string) =>
    hosts.filter((h) => h.pool === pool && st.get(h.id)!.is !== 'out').length;

  // rule 6: usage counts every binding lease, from grant until termination is confirmed
  let gpusInUse = 0;
  const prUse = new Map<string, number>();
  // a PR's slot, or a non-PR CI build's own slot
  const prOf = (r: Pick<MRes, 'repo' | 'pr' | 'kind' | 'sha' | 'id'>) =>
    r.repo && r.pr != null
      ? `${r.repo}#${r.pr}`
      : r.repo && ['merge', 'benchmark', 'background'].includes(r.kind)
        ? `${r.repo}@${r.sha ?? r.id}`
        : null;
  for (const r of w.res.values()) {
    if (!isActive(r.status)) continue;
    const key = prOf(r);
    if (key && !prUse.has(key)) prUse.set(key, 0);
  }
  for (const l of w.leases) {
    if (l.status === 'released') continue;
    const g = w.hosts.get(l.hostId)!.gpus;
    gpusInUse += g;
    const r = w.res.get(l.resId)!;
    const key = isActive(r.status) ? prOf(r) : null;
    if (key) prUse.set(key, (prUse.get(key) ?? 0) + g);
  }

  const queue: MRes[] = [];
  for (const r of w.res.values()) {
    if (r.status !== 'queued') continue;
    if (r.deadline <= w.now) p.timeouts.push(r.id);
    else queue.push(r);
  }
  // rule 1: priority desc, then arrival
  queue.sort((a, b) => b.priority - a.priority || a.seq - b.seq);
  // rule 6 between lanes: a build (slot + SHA) with a lane that was granted keeps its slot while
  // another lane of it waits
  const wasGranted = (x: MRes) =>
    ['allocated', 'preparing', 'running', 'releasing', 'done'].includes(x.status) ||
    (x.status === 'failed' && x.outcome !== 'queue_timeout' && x.outcome !== 'restore_failed');
  const keptOnly = new Set<string>();
  for (const r of queue) {
    const key = prOf(r);
    if (!key || prUse.has(key)) continue;
    const sibling = [...w.res.values()].some(
      (x) => x.id !== r.id && prOf(x) === key && x.sha === r.sha && wasGranted(x),
    );
    if (sibling) {
      prUse.set(key, 0);
      keptOnly.add(key);
    }
  }

  let position = 0;
  const wait = (r: MRes, code: WaitCode) => {
    if (r.kind !== 'background') othersWaiting.add(r.pool);
    p.waits.push({ id: r.id, position: ++position, code });
  };

  for (const r of queue) {
    const need = r.topology === 'pair' ? 2 : 1;
    const target = r.target ? w.hosts.get(r.target) : undefined;
    // an explicit Deckard start is met by a host that already serves, and sends an idle host
    // with a home service restoring at once
    if (r.kind === 'deckard' && target && freeNow(target) && target.home != null) {
      if (target.phase === 'service') {
        p.satisfied.push(r.id);
        continue;
      }
      restoring.add(target.id);
      p.restores.push({ host: target.id, id: r.id });
      wait(r, 'restoring');
      continue;
    }
    if (r.kind === 'deckard' && target) {
      const s = st.get(target.id)!;
      if (restoring.has(target.id) || (s.is === 'busy' && s.state === 'restoring')) {
        wait(r, 'restoring');
        continue;
      }
    }
    if (r.kind === 'background' && othersWaiting.has(r.pool)) {
      wait(r, 'background-yields');
      continue;
    }
    let pick: MHost[];
    if (r.target) {
      if (!target || target.pool !== r.pool || st.get(target.id)!.is === 'out') {
        wait(r, 'target-unavailable');
        continue;
      }
      if (!freeNow(target)) {
        // rule 4: development drains its target; rule 3: a held target stays with its pair
        if ((r.kind === 'development' || r.kind === 'deckard') && busyNow(target) && !draining.has(target.id))
          draining.set(target.id, r.id);
        wait(r, held.has(target.id) ? 'held-for-pair' : 'hosts-busy');
        continue;
      }
      const others = hosts.filter((h) => h.pool === r.pool && h.id !== target.id && freeNow(h)).sort(better);
      pick = [target, ...others.slice(0, need - 1)];
    } else {
      const free = hosts.filter((h) => h.pool === r.pool && freeNow(h)).sort(better);
      if (schedulable(r.pool) < need) {
        // not enough hosts in the pool that could ever serve it as the fleet stands now
        wait(r, 'pool-too-small');
        continue;
      }
      pick = free.slice(0, need);
    }

    if (pick.length < need) {
      // rule 3: a pair keeps what is free now, so smaller work cannot take it
      for (const h of pick) {
        held.set(h.id, r.id);
        p.holds.push({ host: h.id, id: r.id });
      }
      // rule 4 untargeted (development) and next in line (everyone else): claim busy hosts
      claim(r, need - pick.length);
      wait(r, pick.length > 0 ? 'held-for-pair' : 'hosts-busy');
      continue;
    }

    const g = pick.reduce((n, h) => n + h.gpus, 0);
    const key = prOf(r);
    // a kept slot still needs room among the others once its build had no lane for a while
    const others = prUse.size - (key && prUse.has(key) ? 1 : 0);
    if (key && (!prUse.has(key) || keptOnly.has(key)) && others >= budgets.maxPrs) {
      wait(r, 'budget-prs');
      continue;
    }
    if (key && (prUse.get(key) ?? 0) + g > budgets.maxGpusPerPr) {
      wait(r, 'budget-pr-gpus');
      continue;
    }
    if (gpusInUse + g > budgets.maxGpus) {
      wait(r, 'budget-gpus');
      continue;
    }
    gpusInUse += g;
    if (key) {
      prUse.set(key, (prUse.get(key) ?? 0) + g);
      keptOnly.delete(key);
    }
    for (const h of pick) granted.add(h.id);
    p.grants.push({
      id: r.id,
      hosts: pick.map((h) => h.id),
      lend: pick.filter((h) => h.phase === 'service').map((h) => h.id),
      gpus: g,
    });
  }

  for (const [host, id] of draining) p.draining.push({ host, id });
  for (const h of hosts) {
    const s = st.get(h.id)!;
    let state: HostState;
    if (held.has(h.id)) state = 'held';
    else if (granted.has(h.id)) state = draining.has(h.id) ? 'draining' : 'allocated';
    else if (restoring.has(h.id)) state = 'restoring';
    else if (s.is === 'free') state = h.phase === 'service' ? 'service' : 'idle';
    else if (s.is === 'busy' && s.state === 'allocated' && draining.has(h.id)) state = 'draining';
    else state = s.state;
    p.hostStates[h.id] = state;
  }
  return p;
}
