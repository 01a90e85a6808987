import type { Tx } from '../../ledger/db.ts';
import { claimDelivery, setDeliveryResult } from '../../ledger/github.ts';
import type { GitHubService } from '../service.ts';

/** One verified webhook delivery (`X-GitHub-Event`, `X-GitHub-Delivery`). */
export interface Delivery {
  id: string;
  event: string;
}

export type IntakeResult = { result: string; duplicate?: boolean };

const DUPLICATE: IntakeResult = { result: 'duplicate delivery', duplicate: true };

/**
 * Runs `apply` for a delivery exactly once: one ledger transaction claims the delivery id, applies
 * everything and records the result in words, so a redelivery changes nothing and a failure
 * half-way writes nothing (GitHub look-ups happen before, outside the transaction).
 */
export function withDelivery(
  svc: GitHubService,
  d: Delivery,
  action: string | null,
  apply: (tx: Tx, now: number, changed: Set<string>) => Promise<string>,
): Promise<IntakeResult> {
  return svc.ledger.write(async (tx, now, changed) => {
    if (!(await claimDelivery(tx, now, d, action, 'processing'))) return DUPLICATE;
    const result = await apply(tx, now, changed);
    await setDeliveryResult(tx, d.id, result);
    return { result };
  });
}

/** Records a delivery that needs nothing (unknown event/action, repository not enabled). */
export async function noOp(
  svc: GitHubService,
  d: Delivery,
  action: string | null,
  result: string,
): Promise<IntakeResult> {
  const fresh = await svc.ledger.write((tx, now) => claimDelivery(tx, now, d, action, result));
  return fresh ? { result } : DUPLICATE;
}
