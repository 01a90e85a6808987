import { deliverySeen as seen } from '../../ledger/queries.ts';
import type { GitHubService } from '../service.ts';
import { type Delivery, type IntakeResult, noOp } from './delivery.ts';
import { onIssueComment } from './issue-comment.ts';
import { onPullRequest } from './pull-request.ts';
import { onPush } from './push.ts';
import { onWorkflowJob } from './workflow-job.ts';

/**
 * Turns verified webhook deliveries into ledger commands (DESIGN.md "GitHub integration"). Each
 * event has its own file; the refusal decision is the pure `policy.ts`; `withDelivery` claims a
 * delivery id and records its result once. GitHub calls (permission, PR lookup) happen before
 * the write, so a redelivery changes nothing and a failure half-way writes nothing.
 */

export type { Delivery, IntakeResult } from './delivery.ts';

export const intakeHandlers: Record<
  string,
  (svc: GitHubService, d: Delivery, raw: unknown) => Promise<IntakeResult>
> = {
  pull_request: onPullRequest,
  issue_comment: onIssueComment,
  push: onPush,
  workflow_job: onWorkflowJob,
};

/** Events with no handler still count as delivered (2xx, no change). */
export function ignoreDelivery(
  svc: GitHubService,
  d: Delivery,
  action: string | null,
): Promise<IntakeResult> {
  return noOp(svc, d, action, `ignored: ${d.event}`);
}

/** True when the delivery id was already recorded (a redelivery answers at once). */
export function deliverySeen(svc: GitHubService, id: string): Promise<boolean> {
  return seen(svc.ledger, id);
}
