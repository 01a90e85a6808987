import type { Book } from './admission-leases.ts';
import type { AdmissionConfig, WaitCode } from './admission-plan.ts';
import { type HostRecord, prKey, type ReservationRecord } from './model.ts';

/**
 * Rule 6, budgets: at most `maxPrs` distinct budget slots with admitted work, `maxGpusPerPr` GPUs
 * per slot, `maxGpus` GPUs in all; a reservation counts from its grant until its termination is
 * confirmed. Rules: docs/adr/0206-admission-as-named-steps.md.
 */

/**
 * The budget slot a reservation takes (counted against `maxPrs`): its PR, or for CI not tied to a
 * PR (merge CI, scheduled benchmark, background) its own build `repo@sha` — such work consumes a
 * slot and the same GPU budgets as a PR. Development and Deckard work take no slot: they are not CI.
 */
export function budgetSlot(
  r: Pick<ReservationRecord, 'repo' | 'pr' | 'kind' | 'headSha' | 'id'>,
): string | null {
  const pr = prKey(r);
  if (pr) return pr;
  if (r.repo && (r.kind === 'merge' || r.kind === 'benchmark' || r.kind === 'background'))
    return `${r.repo}@${r.headSha ?? r.id}`;
  return null;
}

/** Why a grant would break a budget. */
export interface BudgetRefusal {
  code: Extract<WaitCode, 'budget-prs' | 'budget-pr-gpus' | 'budget-gpus'>;
  reason: string;
}

/** GPUs of these hosts (a host of unknown size counts one). */
function gpusOf(hostsById: ReadonlyMap<string, HostRecord>, hostIds: Iterable<string>): number {
  let g = 0;
  for (const id of hostIds) g += hostsById.get(id)?.gpus ?? 1;
  return g;
}

/** What the budgets hold during one pass; each grant in the pass is charged to it. */
export class Budgets {
  constructor(
    private readonly limits: AdmissionConfig['budgets'],
    private readonly hostsById: ReadonlyMap<string, HostRecord>,
    /** GPUs held per budget slot; a slot kept between a build's lanes holds 0. */
    private readonly slotGpus: Map<string, number>,
    private totalGpus: number,
    /** Slots held only because a build is between its lanes: each still needs a free slot. */
    private readonly keptOnly: Set<string>,
  ) {}

  /** GPUs of these hosts (a host of unknown size counts one). */
  gpusOf(hostIds: Iterable<string>): number {
    return gpusOf(this.hostsById, hostIds);
  }

  /** Null when `gpus` more GPUs for `slot` fit every budget; else the first budget it breaks. */
  refusal(slot: string | null, gpus: number): BudgetRefusal | null {
    const { maxPrs, maxGpusPerPr, maxGpus } = this.limits;
    if (slot) {
      const mine = this.slotGpus.get(slot);
      const others = this.slotGpus.size - (mine === undefined ? 0 : 1);
      if ((mine === undefined || this.keptOnly.has(slot)) && others >= maxPrs) {
        return { code: 'budget-prs', reason: `budget: ${others} PRs admitted (limit ${maxPrs})` };
      }
      if ((mine ?? 0) + gpus > maxGpusPerPr) {
        return {
          code: 'budget-pr-gpus',
          reason: `budget: ${slot} holds ${mine ?? 0} of ${maxGpusPerPr} GPUs per PR`,
        };
      }
    }
    if (this.totalGpus + gpus > maxGpus) {
      return { code: 'budget-gpus', reason: `budget: ${this.totalGpus} of ${maxGpus} GPUs in use` };
    }
    return null;
  }

  /** Counts a grant from this moment on. */
  charge(slot: string | null, gpus: number): void {
    this.totalGpus += gpus;
    if (slot) {
      this.slotGpus.set(slot, (this.slotGpus.get(slot) ?? 0) + gpus);
      this.keptOnly.delete(slot);
    }
  }
}

/** What active work holds now, plus the slots builds keep between their lanes. */
export function countBudgets(
  input: { reservations: readonly ReservationRecord[]; keptSlots?: readonly string[] },
  book: Book,
  limits: AdmissionConfig['budgets'],
  hostsById: ReadonlyMap<string, HostRecord>,
): Budgets {
  const slotGpus = new Map<string, number>();
  let totalGpus = 0;
  for (const r of book.active) {
    const g = gpusOf(hostsById, book.leasesByReservation.get(r.id) ?? []);
    totalGpus += g;
    const key = budgetSlot(r);
    if (key) slotGpus.set(key, (slotGpus.get(key) ?? 0) + g);
  }
  // leases whose reservation is not in the input still hold GPUs (a lease of an active
  // reservation is the rule; only a rare other one costs a walk over the input)
  for (const [rid, hostIds] of book.leasesByReservation) {
    if (!book.activeById.has(rid) && !input.reservations.some((r) => r.id === rid))
      totalGpus += gpusOf(hostsById, hostIds);
  }
  return new Budgets(limits, hostsById, slotGpus, totalGpus, keptSlotsOnly(input.keptSlots, book, slotGpus));
}

/**
 * A build between its lanes keeps its slot (0 GPUs now, but the slot is taken); it still needs a
 * free slot itself if others took every one while it had no lane queued. Adds those slots to
 * `slotGpus` and returns them.
 */
function keptSlotsOnly(
  keptSlots: readonly string[] | undefined,
  book: Book,
  slotGpus: Map<string, number>,
): Set<string> {
  const keptOnly = new Set<string>();
  if (!keptSlots?.length) return keptOnly;
  const kept = new Set(keptSlots);
  for (const r of book.queued) {
    const key = budgetSlot(r);
    if (key && kept.has(key) && !slotGpus.has(key)) {
      slotGpus.set(key, 0);
      keptOnly.add(key);
    }
  }
  return keptOnly;
}
