import { mergeCiForRepo } from '../../../core/config.ts';
import { PushEvent } from '../payloads.ts';
import type { GitHubService } from '../service.ts';
import { type Delivery, type IntakeResult, noOp, withDelivery } from './delivery.ts';
import { mergePushRefusal } from './policy.ts';
import { refusalOf } from './shared.ts';

/**
 * `push` to the default branch: merge correctness CI for the new tip, when the repository's
 * `mergeCi` switch is on (the default) and the pusher holds the configured permission (ADR 0003).
 * Queued merge work for an older tip is superseded (the same supersede command PR pushes use), in
 * one ledger command, `pushToDefaultBranch` (docs/adr/0220-one-ledger-front-door.md).
 */
export async function onPush(svc: GitHubService, d: Delivery, raw: unknown): Promise<IntakeResult> {
  const p = PushEvent.parse(raw);
  const repoName = p.repository.full_name;
  const repo = await svc.ledger.enabledRepository(repoName);
  if (!repo) return noOp(svc, d, null, `ignored: ${repoName} is not enabled`);
  const branch = p.repository.default_branch ?? repo.defaultBranch;
  if (p.ref !== `refs/heads/${branch}`) return noOp(svc, d, null, `ignored: push to ${p.ref}`);
  if (p.deleted || /^0+$/.test(p.after)) return noOp(svc, d, null, 'ignored: branch deleted');
  // the per-repository switch (on by default): off, the push writes nothing but the delivery's
  // result, before any look-up on GitHub
  if (!mergeCiForRepo(svc.config, repo.fullName))
    return noOp(
      svc,
      d,
      null,
      `ignored: merge CI is off for ${repo.fullName} (repositories."${repo.fullName}".mergeCi is false)`,
    );
  const installationId = p.installation?.id ?? repo.installationId;
  const auth = await svc.authorizer.authorize(repo.fullName, p.sender.login, installationId);
  const reason = mergePushRefusal({ auth, sender: p.sender.login, sha: p.after });
  const sender = p.sender.login;
  const refusal = reason ? refusalOf(d, { installationId, sender, reason }) : null;
  return withDelivery(svc, d, null, (tx, now) =>
    svc.ledger.pushToDefaultBranch(tx, now, {
      repo,
      branch,
      sha: p.after,
      sender,
      installationId,
      deliveryId: d.id,
      workflow: svc.gh.workflow,
      refusal,
    }),
  );
}
