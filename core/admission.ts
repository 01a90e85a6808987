import { countBudgets } from './admission-budgets.ts';
import { classifyFleet } from './admission-fleet.ts';
import { expireLeases, failPairsWithADarkNode, inPriorityOrder, readBook } from './admission-leases.ts';
import { type AdmissionInput, type AdmissionPlan, emptyPlan } from './admission-plan.ts';
import { QueuePass } from './admission-queue.ts';

/**
 * The admission engine. Pure: given the fleet, the leases, the reservations and the time, it
 * decides what to grant, which hosts to hold or drain, which leases expired, which queued requests
 * timed out, and for every queued request why it waits. The ledger applies a plan in one write
 * transaction (docs/adr/0002-one-write-transaction-per-admission-pass.md). Each rule is one named
 * step below; docs/adr/0206-admission-as-named-steps.md lists the rules and where each lives.
 */

export { type BudgetRefusal, budgetSlot } from './admission-budgets.ts';
export { isHeartbeatFresh } from './admission-fleet.ts';
export type {
  AdmissionConfig,
  AdmissionInput,
  AdmissionPlan,
  Expiry,
  Grant,
  Wait,
  WaitCode,
} from './admission-plan.ts';

/** Runs one admission pass. Deterministic for a given input. */
export function planAdmission(input: AdmissionInput): AdmissionPlan {
  const { now, config } = input;
  const { offlineAfterS } = config.timings;
  const plan = emptyPlan();
  // what binds and what waits; a queued request past its deadline times out
  const book = readBook(input, plan);
  // rule 2: only a fresh, adopted, clean host is ever granted
  const fleet = classifyFleet(input.hosts, book.boundLease, now, config, plan);
  // active work ends only as a unit (a dark pair node) or by expiry that never frees a host silently
  const lostPairs = failPairsWithADarkNode(book, fleet.hostsById, now, offlineAfterS, plan);
  expireLeases(book, lostPairs, fleet.hostsById, now, offlineAfterS, plan);
  // rule 6: budgets count granted work until its termination is confirmed
  const budgets = countBudgets(input, book, config.budgets, fleet.hostsById);
  // rule 1: priority then FIFO, never preempting; rules 3–5 decide each request in turn
  const queue = new QueuePass(fleet, budgets, plan);
  for (const r of inPriorityOrder(book.queued)) queue.admitOrWait(r);
  queue.finish(input.hosts);
  return plan;
}
