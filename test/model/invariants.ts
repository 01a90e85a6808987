import type { Prediction } from './reference.ts';
import { standing } from './reference.ts';
import { isActive, isFresh, type MRes, type World } from './world.ts';

/**
 * docs/architecture.md's admission rules as checks, phrased on their own (not through the prediction), so a
 * failure names the rule. `checkPass` judges one pass's plan against the world it was made from;
 * `checkState` judges what the ledger holds after any command.
 */

export class RuleViolation extends Error {
  override name = 'RuleViolation';
}

function must(ok: boolean, rule: string, what: () => string): asserts ok {
  if (!ok) throw new RuleViolation(`${rule}: ${what()}`);
}

const need = (r: MRes) => (r.topology === 'pair' ? 2 : 1);
// rule 6 slots: a PR, or a non-PR CI build of its own
const prOf = (r: Pick<MRes, 'repo' | 'pr' | 'kind' | 'sha' | 'id'>) =>
  r.repo && r.pr != null
    ? `${r.repo}#${r.pr}`
    : r.repo && ['merge', 'benchmark', 'background'].includes(r.kind)
      ? `${r.repo}@${r.sha ?? r.id}`
      : null;

/**
 * Rule 6 between lanes: a build whose lane was granted keeps its slot while
 * another lane of it (same slot, same SHA) waits, so no new slot may be granted over it.
 */
function withKeptSlots(w: World, u: Usage): Usage {
  const out: Usage = { gpus: u.gpus, prs: new Map(u.prs), kept: new Set() };
  const granted = (x: MRes) =>
    ['allocated', 'preparing', 'running', 'releasing', 'done'].includes(x.status) ||
    (x.status === 'failed' && x.outcome !== 'queue_timeout' && x.outcome !== 'restore_failed');
  const all = [...w.res.values()];
  for (const r of all) {
    const key = prOf(r);
    // a lane timing out in this pass keeps nothing
    if (r.status !== 'queued' || r.deadline <= w.now || !key || out.prs.has(key)) continue;
    if (all.some((x) => x.id !== r.id && prOf(x) === key && x.sha === r.sha && granted(x))) {
      out.prs.set(key, 0);
      out.kept!.add(key);
    }
  }
  return out;
}
const order = (a: MRes, b: MRes) => b.priority - a.priority || a.seq - b.seq;

interface Usage {
  gpus: number;
  prs: Map<string, number>;
  /** Slots held only by a build between its lanes (no active work of it now). */
  kept?: Set<string>;
}

/** GPUs and PRs held by work from grant until termination is confirmed (rule 6). */
export function usage(w: World): Usage {
  const u: Usage = { gpus: 0, prs: new Map() };
  for (const r of w.res.values()) {
    const key = prOf(r);
    if (key && isActive(r.status)) u.prs.set(key, u.prs.get(key) ?? 0);
  }
  for (const l of w.leases) {
    if (l.status === 'released') continue;
    const g = w.hosts.get(l.hostId)!.gpus;
    u.gpus += g;
    const key = prOf(w.res.get(l.resId)!);
    if (key && u.prs.has(key)) u.prs.set(key, u.prs.get(key)! + g);
  }
  return u;
}

function fits(w: World, u: Usage, r: MRes, gpus: number): boolean {
  const { maxPrs, maxGpusPerPr, maxGpus } = w.cfg.budgets;
  const key = prOf(r);
  const others = u.prs.size - (key && u.prs.has(key) ? 1 : 0);
  if (key && (!u.prs.has(key) || u.kept?.has(key)) && others >= maxPrs) return false;
  if (key && (u.prs.get(key) ?? 0) + gpus > maxGpusPerPr) return false;
  return u.gpus + gpus <= maxGpus;
}

/** Checks one pass's plan (the system's) against the world it was planned from. */
export function checkPass(w: World, plan: Prediction): void {
  const hosts = [...w.hosts.values()];
  const st = new Map(hosts.map((h) => [h.id, standing(w, h)]));
  const grantedIds = new Set(plan.grants.map((g) => g.id));
  const ended = new Set([...plan.timeouts, ...plan.satisfied]);

  // rule 7 / queue timeout: exactly the queued work past its deadline ends, and only that
  const due = [...w.res.values()]
    .filter((r) => r.status === 'queued' && r.deadline <= w.now)
    .map((r) => r.id);
  must(
    JSON.stringify([...plan.timeouts].sort()) === JSON.stringify(due.sort()),
    'queue timeout',
    () => `timed out ${plan.timeouts} but due ${due}`,
  );
  // rule 1 non-preemption and rule 7: a pass ends no active work except by lease expiry, and an
  // expiry is only ever for a lease whose TTL has passed
  for (const e of plan.expiries) {
    const l = w.leases.find((x) => x.id === e.leaseId);
    must(
      l != null && l.status === 'active' && l.expiresAt <= w.now,
      'rule 7',
      () => `expiry of ${e.leaseId} before its TTL`,
    );
    const h = w.hosts.get(l.hostId)!;
    // released only when the host reports, now, a GPU with no processes; else release-required
    const clean = isFresh(w, h) && h.reported && h.procs === 0;
    must(
      e.outcome === (clean ? 'release' : 'release-required'),
      'rule 7',
      () => `${e.leaseId} on ${h.id}: ${e.outcome}`,
    );
  }

  // an explicit Deckard start takes its idle host to restore it: only an idle
  // host with a home service, targeted by that queued start
  const taken = new Set<string>();
  for (const x of plan.restores) {
    const h = w.hosts.get(x.host)!;
    const r = w.res.get(x.id)!;
    must(
      st.get(h.id)!.is === 'free' &&
        h.phase === 'idle' &&
        h.home != null &&
        r.kind === 'deckard' &&
        r.target === h.id,
      'Deckard start',
      () => `${x.id} restores ${x.host}, which is not its idle service host`,
    );
    taken.add(x.host);
  }
  const after = withKeptSlots(w, usage(w));
  for (const g of plan.grants) {
    const r = w.res.get(g.id);
    must(r?.status === 'queued' && r.deadline > w.now, 'rule 1', () => `${g.id} granted but not waiting`);
    // rule 3: atomic; both hosts or neither, in its pool
    must(
      g.hosts.length === need(r) && new Set(g.hosts).size === g.hosts.length,
      'rule 3',
      () => `${g.id} got ${g.hosts}`,
    );
    for (const id of g.hosts) {
      const h = w.hosts.get(id);
      must(h != null && h.pool === r.pool, 'rule 3', () => `${g.id} got ${id} outside pool ${r.pool}`);
      // rule 2: one lease per host; never an unknown/offline/restoring/… host; fail closed on the GPU
      must(!taken.has(id), 'rule 2', () => `${id} granted twice in one pass`);
      taken.add(id);
      must(st.get(id)!.is === 'free', 'rule 2', () => `${id} granted while ${JSON.stringify(st.get(id))}`);
    }
    if (r.target)
      must(g.hosts.includes(r.target), 'rule 4', () => `${g.id} targets ${r.target}, got ${g.hosts}`);
    const gpus = g.hosts.reduce((n, id) => n + w.hosts.get(id)!.gpus, 0);
    must(g.gpus === gpus, 'rule 6', () => `${g.id} counted ${g.gpus} GPUs, hosts have ${gpus}`);
    // rule 5: a serving host is only lent with its lending steps
    for (const id of g.hosts) {
      must(
        g.lend.includes(id) === (w.hosts.get(id)!.phase === 'service'),
        'rule 5',
        () => `${g.id}: ${id} lend=${g.lend.includes(id)} while ${w.hosts.get(id)!.phase}`,
      );
    }
    // rule 6: budgets hold with this grant
    must(
      fits(w, after, r, gpus),
      'rule 6',
      () => `${g.id} (+${gpus} GPUs) breaks the budget ${JSON.stringify(w.cfg.budgets)}`,
    );
    after.gpus += gpus;
    const key = prOf(r);
    if (key) {
      after.prs.set(key, (after.prs.get(key) ?? 0) + gpus);
      after.kept?.delete(key);
    }
  }

  const held = new Map(plan.holds.map((h) => [h.host, h.id]));
  for (const [host, id] of held) {
    const r = w.res.get(id)!;
    must(
      st.get(host)!.is === 'free' && !taken.has(host),
      'rule 3',
      () => `${host} held for ${id} but not free`,
    );
    must(
      need(r) === 2 && !grantedIds.has(id),
      'rule 3',
      () => `${host} held for ${id}, which is not a waiting pair`,
    );
  }
  const free = hosts.filter((h) => st.get(h.id)!.is === 'free' && !taken.has(h.id) && !held.has(h.id));
  const maxGpusIn = (pool: string) => Math.max(0, ...hosts.filter((h) => h.pool === pool).map((h) => h.gpus));
  const schedulable = (pool: string) =>
    hosts.filter((h) => h.pool === pool && st.get(h.id)!.is !== 'out').length;

  const waiting = [...w.res.values()]
    .filter((r) => r.status === 'queued' && !ended.has(r.id) && !grantedIds.has(r.id))
    .sort(order);
  for (const q of waiting) {
    // `after` holds the most any budget can be used in this pass: if q fits even then, with the
    // largest hosts of its pool, no budget can have been what kept it waiting
    const surelyFits = fits(w, after, q, need(q) * maxGpusIn(q.pool));
    const heldForQ = plan.holds.filter((h) => h.id === q.id).map((h) => h.host);
    for (const g of plan.grants) {
      const r = w.res.get(g.id)!;
      if (order(q, r) > 0 || !surelyFits) continue;
      // rule 1 (and the pair hold of rule 3): later work never gets a host an earlier waiting
      // request could have had
      if (q.target) {
        must(
          !g.hosts.includes(q.target),
          'rule 1',
          () => `${r.id} got ${q.target}, which earlier ${q.id} targets`,
        );
      } else if (r.pool === q.pool && need(q) <= schedulable(q.pool)) {
        throw new RuleViolation(`rule 1: ${r.id} granted ${g.hosts} while earlier ${q.id} waits`);
      }
    }
    const code = plan.waits.find((x) => x.id === q.id)?.code;
    if (code === 'background-yields') {
      // background CI yields only to other work waiting in its pool
      must(
        plan.waits.some((x) => {
          const o = w.res.get(x.id)!;
          return o.kind !== 'background' && o.pool === q.pool;
        }),
        'background yields',
        () => `${q.id} yields but no other class waits in pool ${q.pool}`,
      );
      continue;
    }
    // an explicit Deckard start waits on its host's restore
    if (code === 'restoring') continue;
    // work conservation: no schedulable host idles while a grantable request waits
    const pool = free.filter((h) => h.pool === q.pool);
    const mine = q.target ? pool.filter((h) => h.id === q.target) : [];
    const enough = q.target
      ? mine.length === 1 && pool.length >= need(q)
      : pool.length + heldForQ.length >= need(q);
    must(
      !(enough && surelyFits),
      'work conservation',
      () => `${q.id} waits while ${pool.map((h) => h.id)} idle`,
    );
    // rule 4: a development request marks its busy target draining (busy when the pass began;
    // a host a later request takes in this pass is marked on the next one)
    if (q.kind === 'development' && q.target) {
      const t = st.get(q.target);
      if (t?.is === 'busy') {
        must(
          plan.draining.some((d) => d.host === q.target),
          'rule 4',
          () => `${q.target} not draining for ${q.id}`,
        );
      }
    }
  }
}

/** Checks what the ledger holds (here: the world) after a command. */
export function checkState(w: World): void {
  const binding = w.leases.filter((l) => l.status !== 'released');
  const perHost = new Map<string, number>();
  for (const l of binding) perHost.set(l.hostId, (perHost.get(l.hostId) ?? 0) + 1);
  for (const [host, n] of perHost) must(n === 1, 'rule 2', () => `${host} is in ${n} binding leases`);
  for (const h of w.hosts.values()) {
    const bound = perHost.has(h.id);
    if (h.phase === 'allocated') must(bound, 'rule 7', () => `${h.id} allocated without a lease`);
    if (bound)
      must(
        ['allocated', 'cleaning', 'release-required'].includes(h.phase),
        'rule 7',
        () => `${h.id} is ${h.phase} while leased`,
      );
    // fencing tokens strictly increase per host in grant order
    for (let i = 1; i < h.tokens.length; i++)
      must(h.tokens[i]! > h.tokens[i - 1]!, 'fencing', () => `${h.id} tokens ${h.tokens}`);
  }
  for (const r of w.res.values()) {
    const mine = w.leases.filter((l) => l.resId === r.id);
    if (r.status === 'queued' || r.status === 'cancelled' || r.status === 'superseded')
      must(mine.length === 0, 'rule 7', () => `${r.id} is ${r.status} with leases`);
    if (isActive(r.status)) {
      must(mine.length === need(r), 'rule 3', () => `${r.id} (${r.topology}) has ${mine.length} leases`);
      must(new Set(mine.map((l) => l.grantedAt)).size === 1, 'rule 3', () => `${r.id} leases granted apart`);
    }
    for (const l of mine)
      if (l.status !== 'released')
        must(
          isActive(r.status),
          'rule 7',
          () => `${r.id} is ${r.status} but ${l.id} still binds ${l.hostId}`,
        );
  }
  const u = usage(w);
  const { maxPrs, maxGpusPerPr, maxGpus } = w.cfg.budgets;
  must(u.prs.size <= maxPrs, 'rule 6', () => `${u.prs.size} PRs admitted (limit ${maxPrs})`);
  must(u.gpus <= maxGpus, 'rule 6', () => `${u.gpus} GPUs in use (limit ${maxGpus})`);
  for (const [pr, g] of u.prs)
    must(g <= maxGpusPerPr, 'rule 6', () => `${pr} holds ${g} GPUs (limit ${maxGpusPerPr})`);
}
