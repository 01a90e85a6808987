import type { ReservationKind } from '../../core/model.ts';
import { same } from './admit.ts';
import { Base, refused } from './command-base.ts';
import type { Sut } from './sut.ts';
import * as M from './world.ts';

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
