import type { HostFacts } from '../../core/model.ts';
import { same } from './admit.ts';
import { Base, refused } from './command-base.ts';
import type { Sut } from './sut.ts';
import * as M from './world.ts';

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
