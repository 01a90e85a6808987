import { same } from './admit.ts';
import { Base, refused } from './command-base.ts';
import type { Sut } from './sut.ts';
import * as M from './world.ts';

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
