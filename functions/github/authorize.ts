import type { SparkConfig } from '../../core/config.ts';
import { type GitHubClient, GitHubError } from './client.ts';

export type Role = 'admin' | 'maintain' | 'write' | 'triage' | 'read' | 'none';

export interface AuthorizationResult {
  allowed: boolean;
  role: Role;
  /** In words for the check run / history: who, what they hold, what is needed. */
  reason: string;
}

/**
 * Decides whether a webhook sender may start work on private hardware: their repository role
 * (`role_name` from the collaborator-permission API, never `author_association`, which a PR
 * author from outside can satisfy) must be one of `github.requiredPermission`.
 * Answers are cached for `github.permissionCacheS` so a burst of events costs one call.
 */
export class Authorizer {
  private readonly cache = new Map<string, { role: Role; at: number }>();

  constructor(
    private readonly client: GitHubClient,
    private readonly config: SparkConfig['github'],
    private readonly clock: () => number,
  ) {}

  async roleOf(repo: string, user: string, installationId: number | null): Promise<Role> {
    const key = `${repo.toLowerCase()}:${user.toLowerCase()}`;
    const hit = this.cache.get(key);
    const now = this.clock();
    if (hit && now - hit.at < this.config.permissionCacheS * 1000) return hit.role;
    let role: Role;
    try {
      const res = await this.client.request<{ role_name?: string; permission?: string }>(
        'GET',
        `/repos/${repo}/collaborators/${encodeURIComponent(user)}/permission`,
        { installationId },
      );
      role = normalizeRole(res.data.role_name ?? res.data.permission);
    } catch (e) {
      // not a collaborator: GitHub answers 404 for users without access
      if (e instanceof GitHubError && e.status === 404) role = 'none';
      else throw e;
    }
    this.cache.set(key, { role, at: now });
    return role;
  }

  async authorize(repo: string, user: string, installationId: number | null): Promise<AuthorizationResult> {
    const role = await this.roleOf(repo, user, installationId);
    const needed = this.config.requiredPermission;
    const allowed = role !== 'none' && (needed as readonly string[]).includes(role);
    return {
      allowed,
      role,
      reason: allowed
        ? `@${user} holds ${role} on ${repo}`
        : `@${user} holds ${role === 'none' ? 'no role' : role} on ${repo}; starting Spark work needs ${needed.join(' or ')}`,
    };
  }

  /** Forget cached roles (an operator changed permissions and does not want to wait). */
  clear(): void {
    this.cache.clear();
  }
}

function normalizeRole(r: string | undefined): Role {
  switch (r) {
    case 'admin':
    case 'maintain':
    case 'write':
    case 'triage':
    case 'read':
      return r;
    // the legacy `permission` field folds maintain into write and triage into read
    default:
      return 'none';
  }
}
