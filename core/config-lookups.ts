import type { SparkConfig } from './config-schema.ts';
import { DEFAULT_MAX_CONCURRENT_LEASES } from './config-schema.ts';
import type { CiMode, ExecutorName } from './model.ts';

/**
 * What a validated configuration says for one repository, pool, API token or the GitHub part,
 * with its defaults filled in.
 */

/**
 * The backend a repository's CI leases run on, or null to leave each host's own `executor`
 * (docs/adr/0085-executor-per-repository.md). Development leases carry no repository and always
 * use the host's.
 */
export function executorForRepo(
  cfg: Pick<SparkConfig, 'repositories'>,
  repo: string | null,
): ExecutorName | null {
  if (!repo || !Object.hasOwn(cfg.repositories, repo)) return null;
  return cfg.repositories[repo]?.executor ?? null;
}

/**
 * How `repo`'s CI work runs: `task` only when its config says so
 * (docs/adr/0110-ci-as-a-dstack-task.md), else `runner`.
 */
export function ciModeForRepo(cfg: Pick<SparkConfig, 'repositories'>, repo: string | null): CiMode {
  if (!repo || !Object.hasOwn(cfg.repositories, repo)) return 'runner';
  return cfg.repositories[repo]?.ci ?? 'runner';
}

/**
 * Whether a push to `repo`'s default branch queues merge correctness CI: yes unless its
 * `repositories` entry says `"mergeCi": false` (docs/github-app.md "Webhook events").
 */
export function mergeCiForRepo(cfg: Pick<SparkConfig, 'repositories'>, repo: string): boolean {
  // GitHub compares owner and repository names case-insensitively: an "Acme/Butter" entry that
  // turns merge CI off must not be missed for a push GitHub names "acme/butter"
  const key = Object.hasOwn(cfg.repositories, repo)
    ? repo
    : Object.keys(cfg.repositories).find((k) => k.toLowerCase() === repo.toLowerCase());
  return key ? (cfg.repositories[key]?.mergeCi ?? true) : true;
}

/**
 * What the GitHub part's configuration still lacks once the App is configured (its id and key are
 * set), one line each naming the fix; empty when complete. The settings boundary refuses to start
 * with any (docs/github-app.md "Minimum permissions", docs/adr/0130-organization-runners-by-default.md).
 */
export function githubConfigProblems(cfg: Pick<SparkConfig, 'github'>): string[] {
  if (cfg.github.runnerScope === 'org' && cfg.github.runnerGroupId == null)
    return [
      'github.runnerGroupId: required with github.runnerScope "org" (the default): the id of the organization runner group for the Spark runners, restricted to the enabled repositories (Organization settings → Actions → Runner groups; docs/github-app.md); or set github.runnerScope to "repo" (repository runners, which need the App permission Administration: write)',
    ];
  return [];
}

/** The `runner_group_id` a JIT registration names: the configured group, or "Default" (1) for repository runners. */
export function runnerGroupIdOf(cfg: Pick<SparkConfig, 'github'>): number {
  return cfg.github.runnerGroupId ?? 1;
}

/**
 * Where a CI task revokes its clone token: GitHub's "Revoke an installation access token",
 * `DELETE <github.apiUrl>/installation/token` (ADR 0115; GHES: https://HOST/api/v3/installation/token).
 */
export function revokeUrlFor(cfg: Pick<SparkConfig, 'github'>): string {
  return `${cfg.github.apiUrl.replace(/\/+$/, '')}/installation/token`;
}

/** Where a CI task fetches `repo` from: its `cloneUrl`, else `<github.gitUrl>/<repo>.git`. */
export function cloneUrlForRepo(cfg: Pick<SparkConfig, 'repositories' | 'github'>, repo: string): string {
  const own = Object.hasOwn(cfg.repositories, repo) ? cfg.repositories[repo]?.cloneUrl : undefined;
  return own ?? `${cfg.github.gitUrl.replace(/\/+$/, '')}/${repo}.git`;
}

/** What one API token may hold for development work, with defaults filled in. */
export interface TokenLimit {
  maxConcurrentLeases: number;
  maxTtlS: number;
  /** null = every host. */
  hosts: string[] | null;
}

/** The limit that applies to the API token named `name`: its `byName` entry over the default. */
export function tokenLimitFor(cfg: Pick<SparkConfig, 'tokenLimits' | 'timings'>, name: string): TokenLimit {
  const d = cfg.tokenLimits.default;
  const own = Object.hasOwn(cfg.tokenLimits.byName, name) ? cfg.tokenLimits.byName[name] : undefined;
  return {
    maxConcurrentLeases: own?.maxConcurrentLeases ?? d.maxConcurrentLeases ?? DEFAULT_MAX_CONCURRENT_LEASES,
    maxTtlS: Math.min(own?.maxTtlS ?? d.maxTtlS ?? cfg.timings.devLeaseMaxTtlS, cfg.timings.devLeaseMaxTtlS),
    hosts: own?.hosts ?? d.hosts ?? null,
  };
}

/** The fleet label a pool's JIT runners carry: the pool's own, else `github.fleetLabel`. */
export function fleetLabelOf(cfg: Pick<SparkConfig, 'pools' | 'github'>, pool: string): string {
  return cfg.pools[pool]?.runnerLabel ?? cfg.github.fleetLabel;
}
