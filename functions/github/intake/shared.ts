import type { Suite, Topology } from '../../../core/model.ts';
import type { Tx } from '../../ledger/db.ts';
import { recordRefusal } from '../../ledger/github.ts';
import type { RepositoryRow } from '../../ledger/ledger.ts';
import { enqueueCheckSync } from '../../ledger/outbox.ts';
import { createReservation, openReservationsOfPr } from '../../ledger/reservations.ts';
import { renderRefusal } from '../check-run.ts';
import type { GitHubMeta } from '../meta.ts';
import type { GitHubService } from '../service.ts';
import type { Delivery } from './delivery.ts';
import { REFUSAL_THROTTLE_MS } from './policy.ts';

/** What a label or `/spark test` asks for. */
export interface TestRequest {
  topology: Topology;
  suite: Suite;
  label: string | null;
}

export function requestFromLabel(svc: GitHubService, label: string): TestRequest | null {
  const l = svc.gh.labels;
  if (label === l.test) return { topology: 'single', suite: 'smoke', label };
  if (label === l.long) return { topology: 'single', suite: 'performance', label };
  if (label === l.pair) return { topology: 'pair', suite: 'smoke', label };
  return null;
}

/**
 * Visible refusal: a neutral check run named "Spark request refused" on the commit (when
 * known) plus an audited event — at most one per PR commit per {@link REFUSAL_THROTTLE_MS}.
 */
export async function refuse(
  svc: GitHubService,
  tx: Tx,
  now: number,
  d: Delivery,
  o: {
    repo: string;
    pr: number | null;
    headSha: string | null;
    installationId: number | null;
    sender: string;
    reason: string;
  },
): Promise<string> {
  const written = await recordRefusal(svc.ledger, tx, now, {
    deliveryId: d.id,
    event: d.event,
    ...o,
    throttleMs: REFUSAL_THROTTLE_MS,
    view: { ...renderRefusal(o.reason, o.sender) },
  });
  return written ? `refused: ${o.reason}` : `refused (throttled, nothing written): ${o.reason}`;
}

/** Queues a PR test unless the same commit/topology/suite is already queued or running. */
export async function queuePrTest(
  svc: GitHubService,
  tx: Tx,
  now: number,
  o: {
    repo: RepositoryRow;
    pr: number;
    headSha: string;
    sender: string;
    installationId: number | null;
    req: TestRequest;
    trigger: 'label' | 'comment';
    deliveryId: string;
    labels: string[];
  },
): Promise<string> {
  const existing = (await openReservationsOfPr(svc.ledger, tx, o.repo.fullName, o.pr)).find(
    (r) => r.headSha === o.headSha && r.topology === o.req.topology && r.suite === o.req.suite,
  );
  if (existing) {
    await enqueueCheckSync(tx, now, existing.id);
    return `already ${existing.status} as ${existing.id}`;
  }
  const meta: GitHubMeta = {
    installationId: o.installationId ?? o.repo.installationId,
    trigger: o.trigger,
    label: o.req.label,
    deliveryId: o.deliveryId,
    defaultBranch: o.repo.defaultBranch,
    workflow: o.repo.workflow ?? svc.gh.workflow,
    currentHeadSha: o.headSha,
    prOpen: true,
    labels: o.labels,
  };
  const r = await createReservation(
    svc.ledger,
    {
      kind: 'manual',
      topology: o.req.topology,
      repo: o.repo.fullName,
      pr: o.pr,
      headSha: o.headSha,
      suite: o.req.suite,
      requester: `github:${o.sender}`,
      meta: meta as unknown as Record<string, unknown>,
    },
    `github:${o.sender}`,
    tx,
  );
  return `queued ${r.id}`;
}
