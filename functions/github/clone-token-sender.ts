import { isReleasableStatus } from '../../core/model.ts';
import { GitHubError } from './client.ts';
import { readMeta } from './meta.ts';
import type { Sender } from './outbox.ts';
import { runnerName } from './runner-senders.ts';
import { skipped } from './send-skipped.ts';
import type { GitHubService } from './service.ts';
import { whyNotWanted } from './still-wanted.ts';

/**
 * Mints a CI task's credential (ADR 0110): a GitHub App installation token scoped to the
 * reservation's one repository with `contents: read` only (REST "Create an installation access
 * token for an app": `repositories` names, `permissions`), asked outside any write transaction,
 * stored as the lease's one-time hand-over and never put in a result, an event or a log.
 */
export const sendMintCloneToken: Sender = async (svc, _row, payload) => {
  const rid = String(payload.reservationId);
  const leaseId = String(payload.leaseId);
  const r = await svc.ledger.getReservation(undefined, rid);
  if (!r?.repo) return skipped('reservation has no repository');
  if (!isReleasableStatus(r.status)) return skipped(`reservation is ${r.status}`);
  const lease = (await svc.ledger.leasesOf(undefined, rid)).find((l) => l.id === leaseId);
  if (lease?.status !== 'active') return skipped(`lease ${leaseId} is ${lease?.status ?? 'gone'}`);
  const meta = readMeta(r);
  if (!meta) return skipped('reservation was not created by GitHub');
  // the task's stand-in for the dispatch re-check (docs/architecture.md "Timings"): PR open, label, SHA current
  const why = await whyNotWanted(svc, r, meta);
  if (why)
    return {
      result: { skipped: why },
      effect: { kind: 'withdrawn', reservationId: rid, why },
    };
  const inst = meta.installationId ?? null;
  if (inst == null)
    throw new GitHubError(
      0,
      `${r.repo} has no App installation recorded; enable the repository again`,
      false,
    );
  const name = r.repo.split('/')[1]!;
  const res = await svc.client.request<{
    token: string;
    expires_at: string;
    permissions?: Record<string, string>;
    repository_selection?: string;
    repositories?: { full_name: string }[];
  }>('POST', `/app/installations/${inst}/access_tokens`, {
    as: 'app',
    body: { repositories: [name], permissions: { contents: 'read' } },
  });
  // fail closed (docs/github-app.md): the task runs the PR's code, so the token must be exactly
  // what was asked — `contents: read` (metadata: read is implied) on this one repository, as GitHub
  // answers it (REST "Create an installation access token for an app": permissions,
  // repository_selection, repositories). Anything broader or unstated is revoked and refused.
  const broader = cloneTokenBroaderThanAsked(res.data, r.repo);
  if (broader) {
    const revoked = await revokeToken(svc, res.data.token);
    throw new GitHubError(
      0,
      `the clone token GitHub minted for ${r.repo} is broader than contents: read on that repository (${broader}); ${revoked}; refusing to hand it out`,
      false,
    );
  }
  const taskName = runnerName(lease.hostId, rid, 0);
  const cloneToken = res.data.token;
  return {
    result: { taskName, expiresAt: res.data.expires_at },
    // released while GitHub answered: the ledger withholds the token, never handed out
    effect: {
      kind: 'clone-token-minted',
      taskName,
      leaseId,
      reservationId: rid,
      hostId: lease.hostId,
      cloneToken,
      repo: r.repo,
      expiresAt: res.data.expires_at ?? null,
    },
  };
};

/**
 * Why a clone token's answer is broader than `contents: read` on `repo`, or null when it is
 * exactly that. A missing field counts as broader: the answer must state what the token opens.
 */
export function cloneTokenBroaderThanAsked(
  answer: {
    permissions?: Record<string, string>;
    repository_selection?: string;
    repositories?: { full_name: string }[];
  },
  repo: string,
): string | null {
  const why: string[] = [];
  if (answer.repository_selection !== 'selected')
    why.push(`repository_selection ${JSON.stringify(answer.repository_selection ?? null)}`);
  const repos = (answer.repositories ?? []).map((x) => x.full_name.toLowerCase());
  if (repos.length !== 1 || repos[0] !== repo.toLowerCase())
    why.push(`repositories ${repos.length ? repos.join(', ') : 'not listed'}`);
  const perms = answer.permissions;
  const extra = Object.entries(perms ?? {}).filter(
    ([k, v]) => !((k === 'contents' || k === 'metadata') && v === 'read'),
  );
  if (perms?.contents !== 'read') why.push('no contents: read stated');
  if (extra.length) why.push(extra.map(([k, v]) => `${k}: ${v}`).join(', '));
  return why.length ? why.join('; ') : null;
}

/** Revokes an installation token with itself (REST "Revoke an installation access token"); says how it went. */
async function revokeToken(svc: GitHubService, token: string): Promise<string> {
  try {
    await svc.client.request('DELETE', '/installation/token', { token });
    return 'it was revoked';
  } catch (e) {
    svc.log.warn('revoking a refused clone token failed', {
      error: e instanceof GitHubError ? e.message : String(e),
    });
    return `revoking it failed (${e instanceof GitHubError ? e.status : 'error'}); it expires within the hour`;
  }
}
