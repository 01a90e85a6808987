import type { InArgs, InStatement, ResultSet } from '@libsql/client';
import { type AdmissionPlan, budgetSlot } from '../../core/admission.ts';
import type { RawSql, Tx } from './db.ts';
import {
  activeReservations,
  allHosts,
  bindingLeaseRows,
  buildKeyOf,
  buildsHadGrant,
  openReservations,
  queuedBuildsHadGrant,
  queuedKeptLanes,
  queuedTimedOut,
  queueHead,
} from './raw-rows.ts';
import type { HostRow, LeaseRow, ReservationRow } from './rows.ts';
import type { LedgerStore } from './store.ts';

/** The fields `budgetSlot` reads, with the row's kind as the engine's (a row's kind is one of them). */
type SlotFields = Parameters<typeof budgetSlot>[0];

/** What an admission pass reads: every host, the binding leases, the open reservations, kept slots. */
export interface AdmissionRows {
  hostRows: HostRow[];
  leaseRows: LeaseRow[];
  resvRows: ReservationRow[];
  keptSlots: string[];
  /**
   * Null when `resvRows` holds every open reservation. Otherwise the queue was read to its head
   * only ({@link readQueueHead}): the ids of that head, in admission order.
   */
  head: ReadonlySet<string> | null;
}

/** How many queued reservations get their position/reason/wait code written per pass. */
export const PERSISTED_WAITS_PER_PASS = 200;

/**
 * The ledger mark every admission pass that writes on a remote ledger moves forward, in the same
 * transaction as its writes. A pass sent as one write batch checks it first: a pass that committed
 * in between makes the whole batch fail and the pass plans again
 * (docs/adr/0185-admission-pass-in-two-round-trips.md).
 */
export const PASS_VERSION_KEY = 'admission.version';

const READ_VERSION = `SELECT value FROM meta WHERE key = '${PASS_VERSION_KEY}'`;

/** Every open reservation (the read models' input, and a pass's when the head cannot decide). */
export async function loadAdmissionInput(s: LedgerStore, tx: Tx | undefined): Promise<AdmissionRows> {
  const q = s.store.raw(tx);
  // one connection per transaction: the reads run one after the other anyway
  const hostRows = await allHosts(q);
  const leaseRows = await bindingLeaseRows(q);
  const resvRows = await openReservations(q);
  return {
    hostRows,
    leaseRows,
    resvRows,
    keptSlots: await keptSlotsOf(resvRows, s.config.budgets.maxPrs, (keys) => buildsHadGrant(q, keys)),
    head: null,
  };
}

/**
 * A pass's input with the queue read to its head (docs/adr/0187-scheduler-pass-measured-whole.md):
 * every host, binding lease and granted reservation, the first queued requests in admission order,
 * every queued request past its deadline, and one queued lane of each build that keeps its slot.
 * Whether the plan made from it is the plan of the whole queue is {@link headDecides}.
 */
export async function readQueueHead(s: LedgerStore, tx: Tx | undefined, now: number): Promise<AdmissionRows> {
  const q = s.store.raw(tx);
  const hostRows = await allHosts(q);
  const leaseRows = await bindingLeaseRows(q);
  // enough requests for every host that could be free to take one and still leave a full page of
  // persisted waits behind them
  const bound = new Set(leaseRows.map((l) => l.hostId));
  let mayBeFree = 0;
  for (const h of hostRows)
    if (h.managed && !bound.has(h.id) && (h.phase === 'idle' || h.phase === 'service')) mayBeFree++;
  const limit = PERSISTED_WAITS_PER_PASS + mayBeFree;
  const active = await activeReservations(q);
  const head = await queueHead(q, limit + 1);
  if (head.length <= limit) {
    // the whole queue fit: every open reservation is read, as loadAdmissionInput reads them, and
    // the kept-slot look-up may be skipped where it cannot change the plan (keptSlotsOf)
    const resvRows = [...active, ...head];
    return {
      hostRows,
      leaseRows,
      resvRows,
      keptSlots: await keptSlotsOf(resvRows, s.config.budgets.maxPrs, (keys) => buildsHadGrant(q, keys)),
      head: null,
    };
  }
  const rows = headRows(limit, active, head, await queuedTimedOut(q, now), await queuedKeptLanes(q));
  return { hostRows, leaseRows, ...rows };
}

/** Puts a head read together: its reservations (each once) and kept slots, or the whole queue when it all fit. */
function headRows(
  limit: number,
  active: ReservationRow[],
  head: ReservationRow[],
  timedOut: ReservationRow[],
  keptLanes: ReservationRow[],
): Pick<AdmissionRows, 'resvRows' | 'keptSlots' | 'head'> {
  const complete = head.length <= limit;
  const first = complete ? head : head.slice(0, limit);
  const ids = new Set(first.map((r) => r.id));
  const resvRows = [...active, ...first];
  // past their deadline (the pass ends them) and kept lanes beyond the head (their slots count)
  for (const r of [...timedOut, ...keptLanes]) {
    if (ids.has(r.id) || complete) continue;
    ids.add(r.id);
    resvRows.push(r);
  }
  const kept = new Set<string>();
  for (const r of keptLanes) {
    const slot = budgetSlot(r as SlotFields);
    if (slot) kept.add(slot);
  }
  return { resvRows, keptSlots: [...kept], head: complete ? null : new Set(first.map((r) => r.id)) };
}

/**
 * Whether a plan made from the head of the queue is the plan of the whole queue, in everything a
 * pass writes (grants, restores, met Deckard starts, queue timeouts, the first
 * {@link PERSISTED_WAITS_PER_PASS} waits). The engine walks the queue in admission order, and what
 * it decides for a request depends only on the requests before it, the hosts, the granted work and
 * the kept slots (all read in full). So the head's own decisions are the whole queue's; timeouts
 * were read in full. What remains:
 * - the rows read past the head (kept lanes, for their slots; timed-out requests) are walked after
 *   it, but in the whole queue other requests come between: a grant, hold, restore or met start of
 *   theirs may not be the whole queue's, so any of those must be the head's;
 * - a request past the head could take a host no request of the head took — impossible when no
 *   host is left free (each is granted, held, busy or unavailable);
 * - the waits the pass writes must all be the head's.
 * Holds and drain claims of requests past the head differ but are never written (the read models
 * plan the whole queue themselves).
 */
export function headDecides(plan: AdmissionPlan, rows: AdmissionRows): boolean {
  const head = rows.head;
  if (!head) return true;
  let headWaits = 0;
  for (const w of plan.waits) {
    if (!head.has(w.reservationId)) break;
    if (++headWaits >= PERSISTED_WAITS_PER_PASS) break;
  }
  if (headWaits < PERSISTED_WAITS_PER_PASS) return false;
  for (const g of plan.grants) if (!head.has(g.reservationId)) return false;
  for (const h of plan.holds) if (!head.has(h.reservationId)) return false;
  for (const r of plan.restores) if (!head.has(r.reservationId)) return false;
  for (const id of plan.satisfied) if (!head.has(id)) return false;
  // a free host nobody took stays `idle`/`service` without a note (a noted one is unavailable)
  for (const h of rows.hostRows) {
    const st = plan.hostStates[h.id];
    if ((st === 'idle' || st === 'service') && plan.hostNotes[h.id] === undefined) return false;
  }
  return true;
}

/**
 * {@link readQueueHead}, or with `whole` every open reservation, plus the pass version, as one
 * snapshot in one request (`readBatch`): for a remote ledger, where each statement is a round
 * trip. Nothing in a batch can wait for another read: the head's length is bounded by the fleet
 * instead of by the hosts that look free, and the whole queue's kept-slot look-up asks for every
 * queued build that had a lane granted (a superset of the keys {@link keptSlotsOf} asks for; it
 * keeps only those).
 */
export async function readAdmissionSnapshot(
  s: LedgerStore,
  now: number,
  whole: boolean,
): Promise<AdmissionRows & { version: string }> {
  const batch = collectReads();
  const version = batch.q.execute(READ_VERSION);
  const hosts = allHosts(batch.q);
  const leases = bindingLeaseRows(batch.q);
  const limit = PERSISTED_WAITS_PER_PASS + s.config.hosts.length;
  const reservations: Promise<Pick<AdmissionRows, 'resvRows' | 'keptSlots' | 'head'>> = whole
    ? Promise.all([openReservations(batch.q), queuedBuildsHadGrant(batch.q)]).then(
        async ([resvRows, had]) => ({
          resvRows,
          keptSlots: await keptSlotsOf(resvRows, s.config.budgets.maxPrs, async () => had),
          head: null,
        }),
      )
    : Promise.all([
        activeReservations(batch.q),
        queueHead(batch.q, limit + 1),
        queuedTimedOut(batch.q, now),
        queuedKeptLanes(batch.q),
      ]).then(([active, head, timedOut, kept]) => headRows(limit, active, head, timedOut, kept));
  // awaited together: when the batch fails, every reader's rejection is handled here
  const [[versionRs, hostRows, leaseRows, rows]] = await Promise.all([
    Promise.all([version, hosts, leases, reservations]),
    batch.send((stmts) => s.store.readBatch(stmts)),
  ]);
  return { version: String(versionRs.rows[0]?.value ?? '0'), hostRows, leaseRows, ...rows };
}

/**
 * A {@link RawSql} that answers nothing until `send`: each `execute` is queued, and `send` runs
 * them all at once and hands each its result. The readers in `raw-rows.ts` call `execute` before
 * their first `await`, so several of them started together become one batch.
 */
function collectReads(): {
  q: RawSql;
  send(run: (stmts: InStatement[]) => Promise<ResultSet[]>): Promise<void>;
} {
  const queued: { stmt: InStatement; resolve(rs: ResultSet): void; reject(e: unknown): void }[] = [];
  return {
    q: {
      execute: (sql: string, args?: InArgs) =>
        new Promise<ResultSet>((resolve, reject) => {
          queued.push({ stmt: { sql, args: args ?? [] }, resolve, reject });
        }),
    },
    async send(run) {
      const items = queued.splice(0);
      try {
        const results = await run(items.map((i) => i.stmt));
        for (let i = 0; i < items.length; i++) items[i]!.resolve(results[i]!);
      } catch (e) {
        for (const item of items) item.reject(e);
        throw e;
      }
    },
  };
}

/**
 * Rule 6 between lanes: the budget slots of queued lanes whose build (same
 * slot, same head SHA) already had a lane granted. Such a build keeps its slot until its last
 * lane finishes, so a third PR cannot take the slot between a PR's two lanes. Every queued build
 * counts, as the head read's look-up counts them (`queuedKeptLanes`).
 *
 * A kept slot only ever matters against `maxPrs`: the engine refuses a slot when the slots taken
 * by others reach it, and those are slots of open reservations other than its own. When the open
 * reservations name at most `maxPrs` distinct slots that can never happen, kept or not, so the
 * look-up (one statement per pass) is skipped and the plan is the same.
 */
export async function keptSlotsOf(
  open: ReservationRow[],
  maxPrs: number,
  hadGrant: (keys: string[]) => Promise<Set<string>>,
): Promise<string[]> {
  const keys: string[] = [];
  const slotOfKey = new Map<string, string>();
  const openSlots = new Set<string>();
  for (const r of open) {
    const slot = budgetSlot(r as SlotFields);
    if (slot) openSlots.add(slot);
    if (!slot || r.status !== 'queued') continue;
    const key = buildKeyOf(r);
    if (key == null || slotOfKey.has(key)) continue;
    slotOfKey.set(key, slot);
    keys.push(key);
  }
  if (keys.length === 0 || openSlots.size <= maxPrs) return [];
  const had = await hadGrant(keys);
  const kept = new Set<string>();
  for (const k of had) {
    const slot = slotOfKey.get(k);
    if (slot) kept.add(slot);
  }
  return [...kept];
}
