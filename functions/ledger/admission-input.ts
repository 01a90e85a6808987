import type { InArgs, InStatement, ResultSet } from '@libsql/client';
import { budgetSlot } from '../../core/admission.ts';
import type { ReservationKind } from '../../core/model.ts';
import type { RawSql, Tx } from './db.ts';
import {
  allHosts,
  bindingLeaseRows,
  buildKeyOf,
  buildsHadGrant,
  openReservations,
  queuedBuildsHadGrant,
} from './raw-rows.ts';
import type { HostRow, LeaseRow, ReservationRow } from './rows.ts';
import type { LedgerStore } from './store.ts';

/** What an admission pass reads: every host, the binding leases, the open reservations, kept slots. */
export interface AdmissionRows {
  hostRows: HostRow[];
  leaseRows: LeaseRow[];
  resvRows: ReservationRow[];
  keptSlots: string[];
}

/**
 * The ledger mark every admission pass that writes on a remote ledger moves forward, in the same
 * transaction as its writes. A pass sent as one write batch checks it first: a pass that committed
 * in between makes the whole batch fail and the pass plans again
 * (docs/adr/0185-admission-pass-in-two-round-trips.md).
 */
export const PASS_VERSION_KEY = 'admission.version';

const READ_VERSION = `SELECT value FROM meta WHERE key = '${PASS_VERSION_KEY}'`;

/** Loads everything the admission engine needs, inside the caller's transaction (raw SQL, kept statements). */
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
  };
}

/**
 * The same rows as {@link loadAdmissionInput} plus the pass version, as one snapshot in one request
 * (`readBatch`): for a remote ledger, where each statement is a round trip. The kept-slot look-up
 * cannot wait for the open reservations here, so it asks for every queued build that had a lane
 * granted (a superset of the keys {@link keptSlotsOf} asks for; it keeps only those).
 */
export async function readAdmissionSnapshot(s: LedgerStore): Promise<AdmissionRows & { version: string }> {
  const batch = collectReads();
  const version = batch.q.execute(READ_VERSION);
  const hosts = allHosts(batch.q);
  const leases = bindingLeaseRows(batch.q);
  const open = openReservations(batch.q);
  const had = queuedBuildsHadGrant(batch.q);
  // awaited together: when the batch fails, every reader's rejection is handled here
  const [[versionRs, hostRows, leaseRows, resvRows, hadKeys]] = await Promise.all([
    Promise.all([version, hosts, leases, open, had]),
    batch.send((stmts) => s.store.readBatch(stmts)),
  ]);
  return {
    version: String(versionRs.rows[0]?.value ?? '0'),
    hostRows,
    leaseRows,
    resvRows,
    keptSlots: await keptSlotsOf(resvRows, s.config.budgets.maxPrs, async () => hadKeys),
  };
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
 * Rule 6 between lanes (issue 14 item 6): the budget slots of queued lanes whose build (same
 * slot, same head SHA) already had a lane granted. Such a build keeps its slot until its last
 * lane finishes, so a third PR cannot take the slot between a PR's two lanes.
 *
 * A kept slot only ever matters against `maxPrs`: the engine refuses a slot when the slots taken
 * by others reach it, and those are slots of open reservations other than its own. When the open
 * reservations name at most `maxPrs` distinct slots that can never happen, kept or not, so the
 * look-up (one statement per pass, issue 13 item 2) is skipped and the plan is the same.
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
    const slot = budgetSlot({ ...r, kind: r.kind as ReservationKind });
    if (slot) openSlots.add(slot);
    if (!slot || r.status !== 'queued') continue;
    const key = buildKeyOf(r);
    // bounded like the SHA list it replaces: the head of the queue is what a pass can admit
    if (key == null || slotOfKey.has(key) || slotOfKey.size >= 500) continue;
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
