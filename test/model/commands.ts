import fc from 'fast-check';
import type { AdmissionPlan } from '../../core/admission.ts';
import { parseConfig, type SparkConfig } from '../../core/config.ts';
import type { HostFacts, ReservationKind } from '../../core/model.ts';
import { applyPlan, canonical, fromPlan } from './apply.ts';
import { checkPass, checkState } from './invariants.ts';
import { predict } from './reference.ts';
import * as M from './world.ts';

/**
 * The command vocabulary both model tests share (fast-check `commands`): requests of every kind,
 * cancel, pushes, heartbeats with any facts, time passing (hosts going offline, leases expiring,
 * queue timeouts), agent progress and release reports, stale fencing tokens, Deckard restores,
 * operator adopt / unadopt / quarantine clear. Each command changes the model world by the design,
 * tells the system under test, compares answers, then runs one admission pass whose plan must be
 * the model's prediction and obey every rule.
 */

/** What a model test drives. Optional operations are ones the pure engine test has no system for. */
export interface Sut {
  request?(q: M.NewRequest): Promise<string | null>;
  cancel?(id: string): Promise<boolean>;
  supersede?(repo: string, pr: number, sha: string): Promise<string[]>;
  heartbeat?(hostId: string, facts: HostFacts): Promise<void>;
  setManaged?(hostId: string, managed: boolean): Promise<void>;
  advance?(id: string, to: 'preparing' | 'running'): Promise<boolean>;
  beginRelease?(id: string, outcome: string): Promise<boolean>;
  confirmReleased?(hostId: string, token: number, processesRemain: boolean): Promise<boolean>;
  /** A preflight's lease check: is `token` the host's current lease? */
  verifyLease?(hostId: string, token: number): Promise<boolean>;
  /** The agent's `restored` report (Deckard's model-ready health, or its failure). */
  recordRestore?(hostId: string, ok: boolean, token: number): Promise<boolean>;
  /** The agent's `cleaned` / `processes_remain` report through the agent-report command. */
  report?(hostId: string, token: number, type: 'cleaned' | 'processes_remain'): Promise<boolean>;
  clearQuarantine?(hostId: string): Promise<boolean>;
  /** Runs `fn` (a command that must be refused) and checks the system changed nothing at all. */
  unchanged?<T>(fn: () => Promise<T>): Promise<T>;
  tick(ms: number): void;
  /** One admission pass; `tokens` are the fencing tokens the system issued, by reservation and host. */
  pass(w: M.World): Promise<{ plan: AdmissionPlan; tokenFor?: (resId: string, hostId: string) => number }>;
  /** Compares everything the system holds with the world; throws on any difference. */
  check(w: M.World): Promise<void>;
}

export type Cmd = fc.AsyncCommand<M.World, Sut>;

function same(what: string, actual: unknown, expected: unknown) {
  if (JSON.stringify(actual) !== JSON.stringify(expected)) {
    throw new Error(`${what}: system ${JSON.stringify(actual)}, model ${JSON.stringify(expected)}`);
  }
}

/** How often each rule-relevant event happened across a run: proves the generators reach them. */
export const reached = new Map<string, number>();
function count(what: string, n = 1) {
  if (n > 0) reached.set(what, (reached.get(what) ?? 0) + n);
}

/** Events every model test run must produce at least once (counted by `admit`). */
const MUST_REACH = [
  'grant',
  'grant:pair',
  'grant:lend',
  'hold',
  'draining',
  'expiry:release',
  'expiry:release-required',
  'queue-timeout',
  'deckard-satisfied',
  'host-noted',
  ...['budget-prs', 'budget-pr-gpus', 'budget-gpus', 'held-for-pair', 'hosts-busy'].map((c) => `wait:${c}`),
  ...['target-unavailable', 'pool-too-small'].map((c) => `wait:${c}`),
  ...['offline', 'unknown', 'restoring', 'release-required', 'cleaning', 'held', 'draining'].map(
    (s) => `host:${s}`,
  ),
];

/** The generators must reach every rule, or a passing run proves little. */
export function assertReachedEveryRule(): void {
  const missing = MUST_REACH.filter((what) => !reached.get(what));
  if (missing.length) throw new Error(`sequences never reached: ${missing.join(', ')}`);
}

/** One admission pass: prediction == plan, every rule holds, then both apply it. */
export async function admit(w: M.World, sut: Sut): Promise<void> {
  const expected = canonical(predict(w));
  count('pass');
  count('grant', expected.grants.length);
  count('grant:pair', expected.grants.filter((g) => g.hosts.length === 2).length);
  count('grant:lend', expected.grants.filter((g) => g.lend.length > 0).length);
  for (const x of expected.waits) count(`wait:${x.code}`);
  count('hold', expected.holds.length);
  count('draining', expected.draining.length);
  for (const e of expected.expiries) count(`expiry:${e.outcome}`);
  count('queue-timeout', expected.timeouts.length);
  count('deckard-satisfied', expected.satisfied.length);
  for (const s of new Set(Object.values(expected.hostStates))) count(`host:${s}`);
  count('host-noted', expected.noted.length);
  const { plan, tokenFor } = await sut.pass(w);
  const actual = canonical(fromPlan(plan));
  checkPass(w, actual);
  for (const k of Object.keys(expected) as (keyof typeof expected)[])
    same(`admission plan .${k} at ${new Date(w.now).toISOString()}`, actual[k], expected[k]);
  applyPlan(w, expected, tokenFor ?? ((_, hostId) => Math.max(0, ...w.hosts.get(hostId)!.tokens) + 1));
  checkState(w);
  await sut.check(w);
}

abstract class Base implements Cmd {
  check(_w: Readonly<M.World>): boolean {
    return true;
  }
  async run(w: M.World, sut: Sut): Promise<void> {
    await this.act(w, sut);
    await sut.check(w);
    await admit(w, sut);
  }
  abstract act(w: M.World, sut: Sut): Promise<void>;
  abstract toString(): string;
}

const REPO = 'acme/iron';
const shaOf = (n: number) => n.toString(16).padStart(40, '0');

/** A request of any kind, as the webhook, schedule, operator and sparkctl paths make them. */
export class RequestCmd extends Base {
  constructor(
    readonly kind: ReservationKind,
    readonly pair: boolean,
    readonly pr: number,
    readonly target: number,
    readonly ttlS: number | null,
  ) {
    super();
  }
  async act(w: M.World, sut: Sut) {
    const hosts = w.cfg.hosts;
    const ci = M.CI_KINDS.includes(this.kind);
    let target: string | null = null;
    if (this.kind === 'deckard') {
      // an explicit Deckard start names a host with the service (or, refused-by-fleet, any host)
      target = (hosts.find((h) => h.homeService) ?? hosts[this.target % hosts.length]!).id;
    } else if (this.kind === 'development' && this.target < hosts.length) target = hosts[this.target]!.id;
    // scheduled benchmarks have no PR; PR work carries its head SHA
    const pr = ci && !(this.kind === 'benchmark' && this.pr === 0) ? this.pr : null;
    const q: M.NewRequest = {
      kind: this.kind,
      topology: this.pair && this.kind !== 'deckard' ? 'pair' : 'single',
      target,
      repo: pr != null || this.kind === 'benchmark' ? REPO : null,
      pr,
      sha: pr != null ? shaOf(headOf(w, pr)) : null,
      ttlS: this.kind === 'development' ? this.ttlS : null,
    };
    const r = M.request(w, q);
    const id = await sut.request?.(q);
    if (id !== undefined) same('request', id, r?.id ?? null);
  }
  toString() {
    return `request(${this.kind},${this.pair ? 'pair' : 'single'},pr${this.pr},t${this.target},ttl${this.ttlS})`;
  }
}

const heads = new WeakMap<M.World, Map<number, number>>();
function headOf(w: M.World, pr: number) {
  return heads.get(w)?.get(pr) ?? 1;
}

export class CancelCmd extends Base {
  constructor(readonly pick: number) {
    super();
  }
  override check(w: Readonly<M.World>) {
    return w.res.size > 0;
  }
  async act(w: M.World, sut: Sut) {
    const ids = [...w.res.keys()];
    const id = ids[this.pick % ids.length]!;
    const ok = M.cancel(w, id);
    if (!sut.cancel) return;
    const got = ok ? await sut.cancel(id) : await refused(sut, () => sut.cancel!(id));
    same(`cancel ${id}`, got, ok);
  }
  toString() {
    return `cancel(#${this.pick})`;
  }
}

/** A refused command must change nothing (the system checks that itself when it can). */
async function refused<T>(sut: Sut, fn: () => Promise<T>): Promise<T> {
  return sut.unchanged ? sut.unchanged(fn) : fn();
}

/** A push to a PR: queued work for the old SHA is superseded; active work keeps its SHA. */
export class PushCmd extends Base {
  constructor(readonly pr: number) {
    super();
  }
  async act(w: M.World, sut: Sut) {
    const m = heads.get(w) ?? new Map<number, number>();
    heads.set(w, m);
    const next = (m.get(this.pr) ?? 1) + 1;
    m.set(this.pr, next);
    const ids = M.supersede(w, REPO, this.pr, shaOf(next));
    const got = await sut.supersede?.(REPO, this.pr, shaOf(next));
    if (got !== undefined) same(`push pr${this.pr}`, [...got].sort(), [...ids].sort());
  }
  toString() {
    return `push(pr${this.pr})`;
  }
}

export type Svc = HostFacts['serviceState'];

/** What an honest agent would report for a host as the world stands. */
export function naturalFacts(w: M.World, h: M.MHost): { procs: number; svc: Svc } {
  const leased = M.bindingLease(w, h.id);
  const svc: Svc = !h.home
    ? 'none'
    : h.phase === 'service'
      ? 'serving'
      : h.phase === 'restoring'
        ? 'starting'
        : leased
          ? 'stopped'
          : h.serviceState === 'serving'
            ? 'serving'
            : 'stopped';
  const procs = (leased && h.phase !== 'cleaning' ? 1 : 0) + (svc === 'serving' ? 1 : 0);
  // on a leased host the agent keeps seeing what it saw last (the job may have ended already)
  if (leased && h.phase === 'allocated' && h.reported && h.procs != null) return { procs: h.procs, svc };
  return { procs, svc };
}

/** A heartbeat; `odd` sends facts an agent may report but the world did not plan (fail closed). */
export class HeartbeatCmd extends Base {
  constructor(
    readonly host: number,
    readonly odd:
      | 'none'
      | 'foreign-process'
      | 'gpu-unknown'
      | 'service-failed'
      | 'service-serving'
      | 'job-gone',
  ) {
    super();
  }
  async act(w: M.World, sut: Sut) {
    const h = [...w.hosts.values()][this.host % w.hosts.size]!;
    let { procs, svc } = naturalFacts(w, h) as { procs: number | null; svc: Svc };
    if (this.odd === 'foreign-process') procs = (procs ?? 0) + 1;
    // the job's processes ended before anyone released the lease (a clean expiry later)
    if (this.odd === 'job-gone') procs = svc === 'serving' ? 1 : 0;
    if (this.odd === 'gpu-unknown') procs = null;
    if (this.odd === 'service-failed' && h.home) svc = 'failed';
    if (this.odd === 'service-serving' && h.home && h.phase === 'idle') {
      svc = 'serving';
      procs = (procs ?? 0) + 1;
    }
    M.heartbeat(w, h.id, procs, svc);
    await sut.heartbeat?.(h.id, M.factsOf(procs, svc));
  }
  toString() {
    return `heartbeat(#${this.host},${this.odd})`;
  }
}

/**
 * Time passes; the hosts in `alive` keep sending honest heartbeats, the others fall silent and
 * go offline past `offlineAfterS`. Big steps reach lease TTLs and the queue timeout.
 */
export class TickCmd extends Base {
  constructor(
    readonly step: 'short' | 'offline' | 'ci-ttl' | 'dev-ttl' | 'half-queue-timeout',
    readonly alive: number,
  ) {
    super();
  }
  async act(w: M.World, sut: Sut) {
    const t = w.cfg.timings;
    const s = {
      short: t.heartbeatIntervalS,
      offline: t.offlineAfterS + 1,
      'ci-ttl': t.ciLeaseTtlS + 1,
      'dev-ttl': t.devLeaseDefaultTtlS + 1,
      'half-queue-timeout': Math.ceil(t.queueTimeoutS / 2) + 1,
    }[this.step];
    w.now += s * 1000;
    sut.tick(s * 1000);
    let i = 0;
    for (const h of w.hosts.values()) {
      if (((this.alive >> i++) & 1) === 0) continue;
      const f = naturalFacts(w, h);
      M.heartbeat(w, h.id, f.procs, f.svc);
      await sut.heartbeat?.(h.id, M.factsOf(f.procs, f.svc));
    }
  }
  toString() {
    return `tick(${this.step},alive=${this.alive.toString(2)})`;
  }
}

function activeIds(w: Readonly<M.World>, statuses: string[]) {
  return [...w.res.values()].filter((r) => statuses.includes(r.status)).map((r) => r.id);
}

/** The agent reports progress: prepared (→ preparing), runner started (→ running). */
export class ProgressCmd extends Base {
  constructor(
    readonly pick: number,
    readonly to: 'preparing' | 'running',
  ) {
    super();
  }
  override check(w: Readonly<M.World>) {
    return activeIds(w, ['allocated', 'preparing', 'running']).length > 0;
  }
  async act(w: M.World, sut: Sut) {
    const ids = activeIds(w, ['allocated', 'preparing', 'running']);
    const id = ids[this.pick % ids.length]!;
    const ok = M.advance(w, id, this.to);
    if (!sut.advance) return;
    const got = ok ? await sut.advance(id, this.to) : await refused(sut, () => sut.advance!(id, this.to));
    same(`advance ${id} → ${this.to}`, got, ok);
  }
  toString() {
    return `progress(#${this.pick},${this.to})`;
  }
}

/** Work ends (job result, operator release, runner exit): release begins, hosts clean. */
export class ReleaseCmd extends Base {
  constructor(
    readonly pick: number,
    readonly outcome: 'passed' | 'failed' | 'released',
  ) {
    super();
  }
  override check(w: Readonly<M.World>) {
    return activeIds(w, ['allocated', 'preparing', 'running', 'releasing']).length > 0;
  }
  async act(w: M.World, sut: Sut) {
    const ids = activeIds(w, ['allocated', 'preparing', 'running', 'releasing']);
    const id = ids[this.pick % ids.length]!;
    const ok = M.beginRelease(w, id, this.outcome);
    if (sut.beginRelease) same(`release ${id}`, await sut.beginRelease(id, this.outcome), ok);
  }
  toString() {
    return `release(#${this.pick},${this.outcome})`;
  }
}

/** The agent confirms termination on a host with its current token (or reports leftovers). */
export class ConfirmCmd extends Base {
  constructor(
    readonly pick: number,
    readonly processesRemain: boolean,
  ) {
    super();
  }
  override check(w: Readonly<M.World>) {
    return w.leases.some(M.isBinding);
  }
  async act(w: M.World, sut: Sut) {
    const bound = w.leases.filter(M.isBinding);
    const l = bound[this.pick % bound.length]!;
    const ok = M.confirmReleased(w, l.hostId, l.token, this.processesRemain);
    if (sut.confirmReleased)
      same(`confirm ${l.id}`, await sut.confirmReleased(l.hostId, l.token, this.processesRemain), ok);
    if (sut.verifyLease)
      same(`verify ${l.id} after confirm`, await sut.verifyLease(l.hostId, l.token), M.isBinding(l));
  }
  toString() {
    return `confirm(#${this.pick},remain=${this.processesRemain})`;
  }
}

/** The agent reports a host cleaned, or processes left over, through the agent-report command. */
export class ReportCmd extends Base {
  constructor(
    readonly pick: number,
    readonly type: 'cleaned' | 'processes_remain',
  ) {
    super();
  }
  override check(w: Readonly<M.World>) {
    return w.leases.some(M.isBinding);
  }
  async act(w: M.World, sut: Sut) {
    const bound = w.leases.filter(M.isBinding);
    const l = bound[this.pick % bound.length]!;
    const ok = M.report(w, l.hostId, l.token, this.type);
    if (!sut.report) return;
    const got = ok
      ? await sut.report(l.hostId, l.token, this.type)
      : await refused(sut, () => sut.report!(l.hostId, l.token, this.type));
    same(`report ${this.type} on ${l.id}`, got, ok);
  }
  toString() {
    return `report(#${this.pick},${this.type})`;
  }
}

/**
 * A stale fencing token (an old lease of the host, one never issued, or another host's) is
 * refused by every lease-bound call and changes nothing.
 */
export class StaleTokenCmd extends Base {
  constructor(
    readonly host: number,
    readonly which: 'previous' | 'future' | 'other-host',
    readonly call: 'confirm' | 'leftovers' | 'verify',
  ) {
    super();
  }
  async act(w: M.World, sut: Sut) {
    const hosts = [...w.hosts.values()];
    const h = hosts[this.host % hosts.length]!;
    const current = M.bindingLease(w, h.id)?.token;
    const issued = h.tokens;
    let token: number;
    if (this.which === 'previous' && issued.some((x) => x !== current))
      token = issued.find((x) => x !== current)!;
    else if (this.which === 'other-host') {
      const other = w.leases.find((l) => l.hostId !== h.id && l.token !== current);
      token = other ? other.token : Math.max(0, ...issued) + 5;
    } else token = Math.max(0, ...issued) + 1 + this.host;
    if (token === current) return;
    const ok = this.call === 'verify' ? false : M.confirmReleased(w, h.id, token, this.call === 'leftovers');
    if (ok) throw new Error(`model accepted stale token ${token} on ${h.id}`);
    if (this.call === 'verify' && sut.verifyLease)
      same('verify stale', await refused(sut, () => sut.verifyLease!(h.id, token)), false);
    if (this.call !== 'verify' && sut.confirmReleased)
      same(
        'confirm stale',
        await refused(sut, () => sut.confirmReleased!(h.id, token, this.call === 'leftovers')),
        false,
      );
  }
  toString() {
    return `staleToken(#${this.host},${this.which},${this.call})`;
  }
}

/** The agent reports Deckard's model-ready health after a restore (or its failure). */
export class RestoreCmd extends Base {
  constructor(
    readonly host: number,
    readonly ok: boolean,
    readonly staleToken = false,
  ) {
    super();
  }
  async act(w: M.World, sut: Sut) {
    const hosts = [...w.hosts.values()];
    // mostly a host that is restoring; sometimes any host (refused unless restoring)
    const restoring = hosts.filter((h) => h.phase === 'restoring');
    const h =
      restoring.length > 0 && this.host % 3 !== 0
        ? restoring[this.host % restoring.length]!
        : hosts[this.host % hosts.length]!;
    const token = (h.tokens.at(-1) ?? 0) + (this.staleToken ? 1 : 0);
    const ok = M.recordRestore(w, h.id, this.ok, token);
    if (!sut.recordRestore) return;
    const got = ok
      ? await sut.recordRestore(h.id, this.ok, token)
      : await refused(sut, () => sut.recordRestore!(h.id, this.ok, token));
    same(`restore ${h.id}`, got, ok);
  }
  toString() {
    return `restore(#${this.host},${this.ok ? 'healthy' : 'failed'}${this.staleToken ? ',stale' : ''})`;
  }
}

/** Operator: adopt or unadopt a host, or clear its quarantine. */
export class OperatorCmd extends Base {
  constructor(
    readonly host: number,
    readonly op: 'adopt' | 'unadopt' | 'clear-quarantine',
  ) {
    super();
  }
  async act(w: M.World, sut: Sut) {
    const hosts = [...w.hosts.values()];
    const quarantined = hosts.filter((h) => h.phase === 'quarantined');
    const h =
      this.op === 'clear-quarantine' && quarantined.length > 0 && this.host % 3 !== 0
        ? quarantined[this.host % quarantined.length]!
        : hosts[this.host % hosts.length]!;
    if (this.op === 'clear-quarantine') {
      const ok = M.clearQuarantine(w, h.id);
      if (!sut.clearQuarantine) return;
      const got = ok ? await sut.clearQuarantine(h.id) : await refused(sut, () => sut.clearQuarantine!(h.id));
      same(`clear quarantine ${h.id}`, got, ok);
      return;
    }
    M.setManaged(w, h.id, this.op === 'adopt');
    await sut.setManaged?.(h.id, this.op === 'adopt');
  }
  toString() {
    return `operator(#${this.host},${this.op})`;
  }
}

// ------------------------------------------------------------------ generators

const KINDS: ReservationKind[] = ['development', 'deckard', 'manual', 'merge', 'benchmark', 'background'];

/** The commands, weighted so sequences keep the fleet busy and reach every rule. */
export function commandArbs(): fc.Arbitrary<Cmd>[] {
  const host = fc.nat({ max: 11 });
  const request = fc
    .record({
      kind: fc.constantFrom(...KINDS, 'manual', 'merge', 'background'),
      pair: fc.boolean(),
      pr: fc.nat({ max: 4 }),
      target: fc.nat({ max: 7 }),
      ttl: fc.constantFrom(null, 120, 3600),
    })
    .map((x) => new RequestCmd(x.kind, x.pair, x.pr, x.target, x.ttl));
  return [
    request,
    request,
    request,
    fc.nat().map((n) => new CancelCmd(n)),
    fc.integer({ min: 1, max: 4 }).map((n) => new PushCmd(n)),
    fc
      .tuple(
        host,
        fc.constantFrom(
          'none',
          'none',
          'foreign-process',
          'gpu-unknown',
          'service-failed',
          'service-serving',
        ),
      )
      .map(([h, odd]) => new HeartbeatCmd(h, odd as HeartbeatCmd['odd'])),
    fc
      .tuple(
        fc.constantFrom('short', 'short', 'offline', 'ci-ttl', 'dev-ttl', 'half-queue-timeout'),
        fc.oneof(fc.constant(0xfff), fc.nat({ max: 0xfff })),
      )
      .map(([s, a]) => new TickCmd(s as TickCmd['step'], a)),
    fc
      .tuple(fc.nat(), fc.constantFrom('preparing', 'running'))
      .map(([n, to]) => new ProgressCmd(n, to as 'running')),
    fc
      .tuple(fc.nat(), fc.constantFrom('passed', 'failed', 'released'))
      .map(([n, o]) => new ReleaseCmd(n, o as 'passed')),
    fc.tuple(fc.nat(), fc.boolean()).map(([n, r]) => new ConfirmCmd(n, r)),
    fc.tuple(fc.nat(), fc.boolean()).map(([n]) => new ConfirmCmd(n, false)),
    fc
      .tuple(
        host,
        fc.constantFrom('previous', 'future', 'other-host'),
        fc.constantFrom('confirm', 'leftovers', 'verify'),
      )
      .map(([h, wh, c]) => new StaleTokenCmd(h, wh as 'future', c as 'verify')),
    fc
      .tuple(host, fc.boolean(), fc.constantFrom(false, false, false, true))
      .map(([h, ok, stale]) => new RestoreCmd(h, ok, stale)),
    fc
      .tuple(fc.nat(), fc.constantFrom('cleaned', 'cleaned', 'processes_remain'))
      .map(([n, type]) => new ReportCmd(n, type as 'cleaned')),
    fc
      .tuple(host, fc.constantFrom('adopt', 'unadopt', 'clear-quarantine', 'clear-quarantine'))
      .map(([h, op]) => new OperatorCmd(h, op as 'adopt')),
  ];
}

const HOST_NUMBERS = [1, 2, 3, 4, 9, 10, 12];

/**
 * Fleets and budgets where the rules bind: 2–5 hosts (spark-1 homes Deckard), listed in any
 * order, 1–4 GPUs each, sometimes a second pool, any preference order, budgets often below the
 * fleet's total, queue timeouts short enough for a sequence to reach.
 */
export const configArb: fc.Arbitrary<SparkConfig> = fc
  .record({
    numbers: fc.shuffledSubarray(HOST_NUMBERS, { minLength: 2, maxLength: 5 }),
    gpus: fc.array(fc.constantFrom(1, 1, 1, 2, 4), { minLength: 5, maxLength: 5 }),
    secondPool: fc.array(fc.boolean(), { minLength: 5, maxLength: 5 }),
    twoPools: fc.boolean(),
    prefer: fc.array(fc.nat({ max: 4 }), { maxLength: 3 }),
    maxPrs: fc.integer({ min: 1, max: 3 }),
    maxGpusPerPr: fc.integer({ min: 1, max: 5 }),
    maxGpusSlack: fc.integer({ min: -4, max: 2 }),
    queueTimeoutS: fc.constantFrom(300, 900, 3600, 6 * 3600),
    devTtlS: fc.constantFrom(600, 3600),
    restoreRetries: fc.integer({ min: 0, max: 2 }),
  })
  .map((x) => {
    const hosts = x.numbers.map((n, i) => ({
      id: `spark-${n}`,
      pool: x.twoPools && i > 0 && x.secondPool[i] ? 'gpu' : 'spark',
      gpus: x.gpus[i]!,
      homeService: n === 1 ? 'deckard' : null,
    }));
    const total = hosts.reduce((n, h) => n + h.gpus, 0);
    const prefer = [...new Set(x.prefer.filter((i) => i < hosts.length).map((i) => hosts[i]!.id))];
    return parseConfig(
      {
        hosts,
        pools: { spark: { runnerLabel: 'spark' }, gpu: { runnerLabel: 'gpu' } },
        preferHosts: prefer,
        budgets: {
          maxPrs: x.maxPrs,
          maxGpusPerPr: x.maxGpusPerPr,
          maxGpus: Math.max(1, total + x.maxGpusSlack),
        },
        timings: {
          heartbeatIntervalS: 10,
          offlineAfterS: 40,
          ciLeaseTtlS: 300,
          devLeaseDefaultTtlS: x.devTtlS,
          queueTimeoutS: x.queueTimeoutS,
          restoreRetries: x.restoreRetries,
        },
      },
      'model config',
    );
  });

/** Every host adopted and heard from once, as an operator brings a fleet up. */
export async function bringUp(w: M.World, sut: Sut): Promise<void> {
  for (const h of w.hosts.values()) {
    M.setManaged(w, h.id, true);
    await sut.setManaged?.(h.id, true);
    const svc: Svc = h.home ? 'serving' : 'none';
    const procs = h.home ? 1 : 0;
    M.heartbeat(w, h.id, procs, svc);
    await sut.heartbeat?.(h.id, M.factsOf(procs, svc));
  }
  await sut.check(w);
}

/** fast-check's report carries the seed and the shrunk command path; fail the test with it. */
export function report<T>(out: fc.RunDetails<T>): void {
  if (!out.failed) return;
  const cause = out.errorInstance instanceof Error ? out.errorInstance.message : String(out.errorInstance);
  throw new Error(`${fc.defaultReportMessage(out) ?? 'property failed'}\nFailure: ${cause}`);
}
