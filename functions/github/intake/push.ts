import { mergeCiForRepo } from '../../../core/config.ts';
import { enabledRepository } from '../../ledger/queries.ts';
import { createReservation, queuedOfKind, supersedeQueued } from '../../ledger/reservations.ts';
import type { GitHubMeta } from '../meta.ts';
import { PushEvent } from '../payloads.ts';
import type { GitHubService } from '../service.ts';
import { type Delivery, type IntakeResult, noOp, withDelivery } from './delivery.ts';
import { mergePushRefusal } from './policy.ts';
import { refuse } from './shared.ts';

/**
 * `push` to the default branch: merge correctness CI for the new tip, when the repository's
 * `mergeCi` switch is on (the default) and the pusher holds the configured permission (ADR 0003).
 * Queued merge work for an older tip is superseded (the same supersede command PR pushes use).
 */
export async function onPush(svc: GitHubService, d: Delivery, raw: unknown): Promise<IntakeResult> {
  const p = PushEvent.parse(raw);
  const repoName = p.repository.full_name;
  const repo = await enabledRepository(svc.ledger, repoName);
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
  const actor = `github:${p.sender.login}`;
  const installationId = p.installation?.id ?? repo.installationId;
  const auth = await svc.authorizer.authorize(repo.fullName, p.sender.login, installationId);
  const refusal = mergePushRefusal({ auth, sender: p.sender.login, sha: p.after });
  if (refusal) {
    return withDelivery(svc, d, null, (tx, now) =>
      refuse(svc, tx, now, d, {
        repo: repo.fullName,
        pr: null,
        headSha: p.after,
        installationId,
        sender: p.sender.login,
        reason: refusal,
      }),
    );
  }
  return withDelivery(svc, d, null, async (tx) => {
    const out: string[] = [];
    const superseded = await supersedeQueued(
      svc.ledger,
      { repo: repo.fullName, kind: 'merge' },
      p.after,
      actor,
      `${branch} moved to ${p.after.slice(0, 7)}`,
      tx,
    );
    for (const r of superseded) out.push(`superseded ${r.id}`);
    const stillQueued = await queuedOfKind(svc.ledger, tx, repo.fullName, 'merge');
    const same = stillQueued.find((r) => r.headSha === p.after);
    // a redelivered or repeated push of a tip already queued says so (docs/github-app.md: every
    // delivery's result is in words), instead of an empty result
    if (same) out.push(`already queued as ${same.id}`);
    else {
      const meta: GitHubMeta = {
        installationId,
        trigger: 'push',
        deliveryId: d.id,
        defaultBranch: branch,
        workflow: repo.workflow ?? svc.gh.workflow,
      };
      const r = await createReservation(
        svc.ledger,
        {
          kind: 'merge',
          topology: 'single',
          repo: repo.fullName,
          headSha: p.after,
          suite: 'smoke',
          requester: actor,
          meta: meta as unknown as Record<string, unknown>,
        },
        actor,
        tx,
      );
      out.push(`queued ${r.id}`);
    }
    return out.join(', ');
  });
}
