import type { Tx } from '../../ledger/db.ts';
import type { GitHubService } from '../service.ts';

/** One verified webhook delivery (`X-GitHub-Event`, `X-GitHub-Delivery`), taken from the inbox. */
export interface Delivery {
  id: string;
  event: string;
}

export type IntakeResult = { result: string; duplicate?: boolean };

const DUPLICATE: IntakeResult = { result: 'duplicate delivery', duplicate: true };

/**
 * Runs `apply` for a delivery exactly once: one ledger transaction completes the inbox row
 * (pending → done), applies everything and records the result in words, so a second processor
 * or a retry changes nothing and a failure half-way writes nothing (GitHub look-ups happen
 * before, outside the transaction).
 */
export function withDelivery(
  svc: GitHubService,
  d: Delivery,
  _action: string | null,
  apply: (tx: Tx, now: number, changed: Set<string>) => Promise<string>,
): Promise<IntakeResult> {
  return svc.ledger.inbox.apply(d.id, apply).then((result) => (result == null ? DUPLICATE : { result }));
}

/** Records a delivery that needs nothing (unknown event/action, repository not enabled). */
export async function noOp(
  svc: GitHubService,
  d: Delivery,
  _action: string | null,
  result: string,
): Promise<IntakeResult> {
  const fresh = await svc.ledger.inbox.finish(d.id, result);
  return fresh ? { result } : DUPLICATE;
}
