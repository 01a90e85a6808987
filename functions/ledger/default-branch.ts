import type { Tx } from './db.ts';
import type { GitHubMeta } from './github-meta.ts';
import { type PrRefusal, refuseGitHubRequest } from './pull-requests.ts';
import { createReservation, queuedOfKind, supersedeQueued } from './reservations.ts';
import type { RepositoryRow } from './rows.ts';
import type { LedgerStore } from './store.ts';

/** A push to a repository's default branch, as the GitHub part verified and judged it. */
export interface DefaultBranchPush {
  repo: RepositoryRow;
  /** The default branch as the delivery names it (or the repository row's). */
  branch: string;
  /** The new tip. */
  sha: string;
  sender: string;
  installationId: number | null;
  deliveryId: string;
  /** The workflow dispatched when the repository names none (the GitHub settings' default). */
  workflow: string;
  /** The policy's refusal (decided before the transaction), or null when the pusher may queue. */
  refusal: PrRefusal | null;
}

/**
 * A push to the default branch (ADR 0003, merge correctness CI), the whole effect of one `push`
 * delivery in its transaction (docs/adr/0220-one-ledger-front-door.md): the policy's refusal, or
 * queued merge work for an older tip superseded and the new tip queued once. Returns the
 * delivery's result in words.
 */
export async function pushToDefaultBranch(
  s: LedgerStore,
  tx: Tx,
  now: number,
  o: DefaultBranchPush,
): Promise<string> {
  const repo = o.repo.fullName;
  if (o.refusal) return refuseGitHubRequest(s, tx, now, { repo, pr: null, headSha: o.sha }, o.refusal);
  const actor = `github:${o.sender}`;
  const out: string[] = [];
  const superseded = await supersedeQueued(
    s,
    { repo, kind: 'merge' },
    o.sha,
    actor,
    `${o.branch} moved to ${o.sha.slice(0, 7)}`,
    tx,
  );
  for (const r of superseded) out.push(`superseded ${r.id}`);
  const same = (await queuedOfKind(s, tx, repo, 'merge')).find((r) => r.headSha === o.sha);
  // a redelivered or repeated push of a tip already queued says so (docs/github-app.md: every
  // delivery's result is in words), instead of an empty result
  if (same) out.push(`already queued as ${same.id}`);
  else {
    const meta: GitHubMeta = {
      installationId: o.installationId,
      trigger: 'push',
      deliveryId: o.deliveryId,
      defaultBranch: o.branch,
      workflow: o.repo.workflow ?? o.workflow,
    };
    const r = await createReservation(
      s,
      {
        kind: 'merge',
        topology: 'single',
        repo,
        headSha: o.sha,
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
}
