import { type Budgets, budgetSlot } from './admission-budgets.ts';
import { type Fleet, removeFree, type Standing } from './admission-fleet.ts';
import type { AdmissionPlan, WaitCode } from './admission-plan.ts';
import {
  executorPhrase,
  type HostRecord,
  type HostState,
  hostsNeeded,
  type ReservationRecord,
  servesDevelopment,
} from './model.ts';

/**
 * The queue half of an admission pass: each queued request in admission order is granted, or held
 * for, or told why it waits. Nothing here ends active work (rule 1, never preempt): a busy host is
 * at most asked to drain. Rules and their steps: docs/adr/0206-admission-as-named-steps.md.
 */

/** Pools of up to this many hosts list each host in a wait reason; larger ones give counts. */
const LIST_HOSTS_UP_TO = 4;

export class QueuePass {
  /** Free hosts kept for a blocked pair (rule 3), by host: the pair's reservation. */
  private readonly held = new Map<string, string>();
  /** Busy hosts asked to drain (rule 4, and next in line), by host: the request they drain for. */
  private readonly draining = new Map<string, string>();
  /** The wait reason of each pool, until a change in the pool makes it stale. */
  private readonly poolBusyReason = new Map<string, string>();
  /**
   * Where the next drain claim in a pool starts looking: every host before it is not busy or
   * already draining. Claims are never undone and no host stops being busy within a pass; and a
   * pool is claimed from only once its free list is empty (the hot path, or a shortage that held
   * every free host), after which no grant or restore can make one of its hosts busy in this pass.
   */
  private readonly drainFrom = new Map<string, number>();
  /** {@link drainFrom} for the drain claims of development requests ({@link claimBusyServing}). */
  private readonly drainServingFrom = new Map<string, number>();
  /** Pools where some class other than background CI waits: background CI yields there. */
  private readonly othersWaiting = new Set<string>();
  private position = 0;

  constructor(
    private readonly fleet: Fleet,
    private readonly budgets: Budgets,
    private readonly plan: AdmissionPlan,
  ) {}

  /** One queued request, taken in priority order (rule 1): granted, held for, or told why it waits. */
  admitOrWait(r: ReservationRecord): void {
    if (r.kind === 'deckard' && r.targetHost && this.startDeckard(r, r.targetHost)) return;
    if (r.kind === 'background' && this.othersWaiting.has(r.pool)) {
      this.wait(r, 'background-yields', `background CI yields: other work waits in pool ${r.pool}`);
      return;
    }
    const need = hostsNeeded(r.topology);
    const candidates = r.targetHost
      ? this.targetCandidates(r, r.targetHost, need)
      : this.poolCandidates(r, need);
    if (!candidates) return;
    if (candidates.length < need) {
      this.holdForPair(r, need, candidates);
      return;
    }
    const gpus = this.budgets.gpusOf(candidates.map((h) => h.id));
    const slot = budgetSlot(r);
    const refusal = this.budgets.refusal(slot, gpus);
    if (refusal) {
      this.wait(r, refusal.code, refusal.reason);
      return;
    }
    this.grant(r, candidates, slot, gpus);
  }

  /**
   * Rule 5, restoring Deckard: an explicit Deckard start is met at once when its host already
   * serves; on an idle host with a home service it drives the restore path now (model-ready health
   * check) instead of taking a lease. False when neither applies: the request is admitted as any
   * targeted one (it drains its busy target and runs next after active work).
   */
  private startDeckard(r: ReservationRecord, targetId: string): boolean {
    const { standing } = this.fleet;
    const target = this.fleet.hostsById.get(targetId);
    const b = standing.get(targetId);
    if (b?.kind === 'free' && !this.held.has(targetId) && target?.homeService) {
      if (b.state === 'service') {
        this.plan.satisfied.push(r.id);
        return true;
      }
      this.plan.restores.push({ hostId: target.id, reservationId: r.id });
      removeFree(this.fleet.freeByPool, target);
      standing.set(target.id, {
        kind: 'busy',
        state: 'restoring',
        why: `${target.id} restoring ${target.homeService}`,
      });
      this.poolBusyReason.delete(target.pool);
      this.wait(
        r,
        'restoring',
        `${target.id} restoring ${target.homeService}: waiting for its model-ready health check`,
      );
      return true;
    }
    if (b?.kind === 'busy' && b.state === 'restoring') {
      this.wait(r, 'restoring', `waiting for ${b.why}: model-ready health check`);
      return true;
    }
    return false;
  }

  /**
   * A request for one host: the target, plus for a pair the best other free host of its pool.
   * Null when the request waits (its target is out, busy or held).
   */
  private targetCandidates(r: ReservationRecord, targetId: string, need: number): HostRecord[] | null {
    const pool = r.pool;
    const target = this.fleet.hostsById.get(targetId);
    const b = target ? this.fleet.standing.get(target.id)! : undefined;
    if (!target || !b || target.pool !== pool) {
      this.wait(r, 'target-unavailable', `${targetId} is not a host of pool ${pool}`);
      return null;
    }
    // a development lease is used through its dstack dev environment (ADR 0176): the operator
    // API refuses such a request at once; this holds if the host's backend changed since (a host
    // without facts is out below: its GPU state is unknown)
    if (r.kind === 'development' && !r.drill && target.facts && !servesDevelopment(target)) {
      this.wait(
        r,
        'target-unavailable',
        `${executorPhrase(target)}: a development lease needs the dstack executor`,
      );
      return null;
    }
    if (b.kind === 'out') {
      this.wait(r, 'target-unavailable', `waiting for ${b.why}`);
      return null;
    }
    if (b.kind === 'busy' || this.held.has(target.id)) {
      this.drainTarget(r, target, b);
      return null;
    }
    if (need <= 1) return [target];
    const others = (this.fleet.freeByPool.get(pool) ?? []).filter((h) => h.id !== target.id);
    return [target].concat(others.slice(0, need - 1));
  }

  /**
   * Rule 4, draining: a development request (or an explicit Deckard start, which runs next after
   * active work) marks its busy target `draining` — its active job finishes, nothing new starts
   * there. Never preempted (rule 1). A target held for a pair stays held (rule 3).
   */
  private drainTarget(r: ReservationRecord, target: HostRecord, b: Standing): void {
    if (
      b.kind === 'busy' &&
      (r.kind === 'development' || r.kind === 'deckard') &&
      !this.draining.has(target.id)
    ) {
      this.draining.set(target.id, r.id);
      this.claimChangesText(r.pool);
    }
    const by = this.held.get(target.id);
    this.wait(
      r,
      by ? 'held-for-pair' : 'hosts-busy',
      by
        ? `${target.id} held for ${by}`
        : `${target.id} draining: ${b.kind === 'busy' ? b.why : ''}; active job finishing`,
    );
  }

  /** A request for any host of its pool: the best free ones. Null when the request waits. */
  private poolCandidates(r: ReservationRecord, need: number): HostRecord[] | null {
    if (r.kind === 'development') return this.developmentCandidates(r, need);
    const pool = r.pool;
    const free = this.fleet.freeByPool.get(pool);
    const schedulable = this.fleet.schedulableByPool.get(pool) ?? 0;
    if ((!free || free.length === 0) && need <= schedulable) {
      // hot path for a long queue behind a busy pool: nothing to take or hold; the first
      // requests claim the busy hosts they are next in line for
      this.claimBusy(pool, need, r.id);
      this.wait(r, 'hosts-busy', this.describePool(pool));
      return null;
    }
    if (schedulable < need) {
      this.wait(
        r,
        'pool-too-small',
        `needs ${need} host${need > 1 ? 's' : ''} in pool ${pool}; ${schedulable} schedulable now`,
      );
      return null;
    }
    return (free ?? []).slice(0, need);
  }

  /**
   * An untargeted development request: only hosts whose backend gives a development lease its
   * environment (the dstack executor, ADR 0176). A shortage holds what is free and, rule 4, drains
   * the best busy hosts that can serve it; rare, so it scans the pool instead of keeping a cursor.
   */
  private developmentCandidates(r: ReservationRecord, need: number): HostRecord[] | null {
    const pool = r.pool;
    const schedulable = this.fleet.devSchedulableByPool.get(pool) ?? 0;
    if (schedulable < need) {
      this.wait(
        r,
        'pool-too-small',
        `needs ${need} host${need > 1 ? 's' : ''} in pool ${pool} running the dstack executor (development); ${schedulable} schedulable now`,
      );
      return null;
    }
    const candidates: HostRecord[] = [];
    for (const h of this.fleet.freeByPool.get(pool) ?? []) {
      if (candidates.length >= need) break;
      if (servesDevelopment(h)) candidates.push(h);
    }
    if (candidates.length >= need) return candidates;
    for (const h of candidates) {
      this.held.set(h.id, r.id);
      this.plan.holds.push({ hostId: h.id, reservationId: r.id });
      removeFree(this.fleet.freeByPool, h);
    }
    if (candidates.length > 0) this.poolBusyReason.delete(pool);
    this.claimBusyServing(pool, need - candidates.length, r.id);
    this.wait(
      r,
      candidates.length > 0 ? 'held-for-pair' : 'hosts-busy',
      candidates.length > 0
        ? `holding ${candidates.map((h) => h.id).join(', ')}; waiting for a second host in pool ${pool} running the dstack executor`
        : `waiting for a host in pool ${pool} running the dstack executor: ${this.describePool(pool).replace(/^waiting for a host in pool [^:]*: /, '')}`,
    );
    return null;
  }

  /**
   * {@link claimBusy} over the hosts that can serve a development lease only, with a cursor of its
   * own: it is called only once every free host of the pool that can serve one is held, so from
   * then on none of those can become busy in this pass (no host is freed, held hosts stay held)
   * and every host before the cursor stays not busy, draining or unable to serve one.
   */
  private claimBusyServing(pool: string, want: number, forId: string): void {
    const order = this.fleet.drainOrder.get(pool)!;
    let claimed = 0;
    let i = this.drainServingFrom.get(pool) ?? 0;
    for (; i < order.length && claimed < want; i++) {
      const h = order[i]!;
      if (this.fleet.standing.get(h.id)!.kind !== 'busy' || this.draining.has(h.id) || !servesDevelopment(h))
        continue;
      this.draining.set(h.id, forId);
      claimed++;
    }
    this.drainServingFrom.set(pool, i);
    if (claimed > 0) this.claimChangesText(pool);
  }

  /**
   * Rule 3, atomic pair reservation: both hosts or neither. A blocked pair keeps what is free now
   * so smaller work cannot take it, and the best busy hosts no earlier request claimed drain for
   * it, next in line (an untargeted development request claims its own, rule 4). `candidates` is
   * never empty: a pool with no free host waits in poolCandidates, and a target is its own first
   * candidate.
   */
  private holdForPair(r: ReservationRecord, need: number, candidates: HostRecord[]): void {
    const pool = r.pool;
    for (const h of candidates) {
      this.held.set(h.id, r.id);
      this.plan.holds.push({ hostId: h.id, reservationId: r.id });
      removeFree(this.fleet.freeByPool, h);
    }
    this.poolBusyReason.delete(pool);
    this.claimBusy(pool, need - candidates.length, r.id);
    this.wait(
      r,
      'held-for-pair',
      `holding ${candidates.map((h) => h.id).join(', ')}; ${this.describePool(pool).replace(/^waiting for a host in/, 'waiting for a second host in')}`,
    );
  }

  /**
   * Grants the hosts, charged to the budgets from this moment (rule 6). A host serving its home
   * service is lent (rule 5): drained, stopped and GPU-verified before the work starts.
   */
  private grant(r: ReservationRecord, hosts: HostRecord[], slot: string | null, gpus: number): void {
    const { freeByPool, standing } = this.fleet;
    for (const h of hosts) removeFree(freeByPool, h);
    this.poolBusyReason.delete(r.pool);
    this.budgets.charge(slot, gpus);
    const lend = hosts.filter((h) => {
      const b = standing.get(h.id)!;
      return b.kind === 'free' && b.state === 'service';
    });
    this.plan.grants.push({
      reservationId: r.id,
      hostIds: hosts.map((h) => h.id),
      lend: lend.map((h) => h.id),
      gpus,
    });
    for (const h of hosts)
      standing.set(h.id, { kind: 'busy', state: 'allocated', why: `${h.id} allocated to ${r.id}` });
  }

  private wait(r: ReservationRecord, code: WaitCode, reason: string): void {
    if (r.kind !== 'background') this.othersWaiting.add(r.pool);
    this.position++;
    this.plan.waits.push({ reservationId: r.id, position: this.position, code, reason });
  }

  /**
   * Draining, next in line: a request waiting because every host is busy is next in line for the
   * best busy hosts no earlier request claimed; each is `draining` for it (its active job
   * finishes, it accepts nothing new), so the request's check can say so. One claim per host.
   * Busy includes hosts granted earlier in this pass. Once a pool's busy hosts are all claimed its
   * cursor stays at the end and a call costs nothing.
   */
  private claimBusy(pool: string, want: number, forId: string): void {
    const order = this.fleet.drainOrder.get(pool)!;
    let claimed = 0;
    let i = this.drainFrom.get(pool) ?? 0;
    for (; i < order.length && claimed < want; i++) {
      const h = order[i]!;
      if (this.fleet.standing.get(h.id)!.kind !== 'busy' || this.draining.has(h.id)) continue;
      this.draining.set(h.id, forId);
      claimed++;
    }
    this.drainFrom.set(pool, i);
    if (claimed > 0) this.claimChangesText(pool);
  }

  /**
   * A drain claim shows only in a pool text that lists its hosts one by one; a larger pool's text
   * counts busy, held and unavailable hosts, which a claim does not change. Recomputing that count
   * after every claim made a long queue behind a 256-host pool O(queue × hosts).
   */
  private claimChangesText(pool: string): void {
    if (this.fleet.poolHosts.get(pool)!.length <= LIST_HOSTS_UP_TO) this.poolBusyReason.delete(pool);
  }

  /** Why nothing in `pool` can be granted now, computed once until the pool changes. */
  private describePool(pool: string): string {
    const cached = this.poolBusyReason.get(pool);
    if (cached) return cached;
    const hosts = this.fleet.poolHosts.get(pool) ?? [];
    const text = `waiting for a host in pool ${pool}: ${hosts.length <= LIST_HOSTS_UP_TO ? this.listHosts(hosts) : this.countHosts(hosts)}`;
    this.poolBusyReason.set(pool, text);
    return text;
  }

  private listHosts(hosts: HostRecord[]): string {
    return hosts
      .map((h) => {
        const hr = this.held.get(h.id);
        if (hr) return `${h.id} held for ${hr}`;
        const dr = this.draining.get(h.id);
        const b = this.fleet.standing.get(h.id)!;
        if (dr) return `${h.id} draining for ${dr}`;
        return b.kind === 'free' ? `${h.id} free` : b.why;
      })
      .join('; ');
  }

  private countHosts(hosts: HostRecord[]): string {
    let busy = 0;
    let out = 0;
    let kept = 0;
    for (const h of hosts) {
      const b = this.fleet.standing.get(h.id)!;
      if (b.kind === 'busy') busy++;
      else if (b.kind === 'out') out++;
      else if (this.held.has(h.id)) kept++;
    }
    // held hosts of this pool only: a pair waiting in another pool keeps nothing here
    return `${busy} busy, ${kept} held, ${out} unavailable of ${hosts.length} hosts`;
  }

  /** What the pass leaves: the drain claims, and each host's public state (held, draining, …). */
  finish(hosts: readonly HostRecord[]): void {
    for (const [hostId, reservationId] of this.draining) this.plan.draining.push({ hostId, reservationId });
    for (const h of hosts) {
      const b = this.fleet.standing.get(h.id)!;
      let s: HostState = b.state;
      if (this.held.has(h.id)) s = 'held';
      else if (this.draining.has(h.id) && b.state === 'allocated') s = 'draining';
      this.plan.hostStates[h.id] = s;
    }
  }
}
