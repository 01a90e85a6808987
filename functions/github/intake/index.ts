import type { GitHubService } from '../service.ts';
import { type Delivery, type IntakeResult, noOp } from './delivery.ts';
import { onIssueComment } from './issue-comment.ts';
import { onPullRequest } from './pull-request.ts';
import { onPush } from './push.ts';
import { onWorkflowJob } from './workflow-job.ts';

/**
 * Turns deliveries taken from the webhook inbox (`../inbox.ts`) into ledger commands (docs/architecture.md
 * "GitHub integration"). Each event has its own file; the refusal decision is the pure
 * `policy.ts`; `withDelivery` completes a delivery and records its result once, in the
 * transaction of its effects. GitHub calls (permission, PR lookup) happen before the write, so a
 * retry changes nothing twice and a failure half-way writes nothing.
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
