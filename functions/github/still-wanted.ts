import type { ReservationRow } from '../ledger/ledger.ts';
import type { GitHubMeta } from './meta.ts';
import { PullRequestResource } from './payloads.ts';
import type { GitHubService } from './service.ts';

/**
 * Re-checks that the work is still wanted (docs/architecture.md "Timings": PR open, label present, SHA
 * current) and returns why not, or null. Webhook-cached facts answer first; the API confirms.
 */
export async function whyNotWanted(
  svc: GitHubService,
  r: ReservationRow,
  meta: GitHubMeta,
): Promise<string | null> {
  if (r.pr == null) return null;
  if (meta.prOpen === false) return `PR #${r.pr} was closed`;
  if (meta.currentHeadSha && meta.currentHeadSha !== r.headSha)
    return `PR #${r.pr} head moved to ${meta.currentHeadSha.slice(0, 7)}`;
  const res = await svc.client.request('GET', `/repos/${r.repo}/pulls/${r.pr}`, {
    installationId: meta.installationId,
  });
  const pr = PullRequestResource.parse(res.data);
  if (pr.state !== 'open') return `PR #${r.pr} is ${pr.state}`;
  if (pr.head.sha !== r.headSha) return `PR #${r.pr} head moved to ${pr.head.sha.slice(0, 7)}`;
  if (meta.trigger === 'label' && meta.label && !pr.labels.some((l) => l.name === meta.label))
    return `label "${meta.label}" was removed from PR #${r.pr}`;
  return null;
}
