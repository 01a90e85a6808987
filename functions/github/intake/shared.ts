import type { PrRefusal, RepositoryRow, TestRequest } from '../../ledger/ledger.ts';
import { renderRefusal } from '../check-run.ts';
import type { GitHubService } from '../service.ts';
import type { Delivery } from './delivery.ts';
import { REFUSAL_THROTTLE_MS } from './policy.ts';

export type { TestRequest } from '../../ledger/ledger.ts';

export function requestFromLabel(svc: GitHubService, label: string): TestRequest | null {
  const l = svc.gh.labels;
  if (label === l.test) return { topology: 'single', suite: 'smoke', label };
  if (label === l.long) return { topology: 'single', suite: 'performance', label };
  if (label === l.pair) return { topology: 'pair', suite: 'smoke', label };
  return null;
}

/**
 * A refusal the policy decided, as the ledger records it: a neutral check run named "Spark
 * request refused" on the commit (when known) plus an audited event — at most one per PR commit
 * per {@link REFUSAL_THROTTLE_MS}.
 */
export function refusalOf(
  d: Delivery,
  o: { installationId: number | null; sender: string; reason: string },
): PrRefusal {
  return {
    deliveryId: d.id,
    event: d.event,
    installationId: o.installationId,
    sender: o.sender,
    reason: o.reason,
    throttleMs: REFUSAL_THROTTLE_MS,
    view: { ...renderRefusal(o.reason, o.sender) },
  };
}

/** The pull request a delivery is about, as the ledger's pull-request commands take it. */
export function prSubject(
  svc: GitHubService,
  d: Delivery,
  o: { repo: RepositoryRow; pr: number; sender: string; installationId: number | null; labels: string[] },
) {
  return { ...o, deliveryId: d.id, workflow: svc.gh.workflow };
}
