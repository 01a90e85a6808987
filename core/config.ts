import * as z from 'zod';
import { CI_MODES, type CiMode, EXECUTOR_NAMES } from './model.ts';

/**
 * The controller's configuration file (`spark.config.json`), validated with zod.
 * Durations are whole seconds. Every field has a default so an empty object is the
 * two-Spark fleet from DESIGN.md.
 */

const hostId = z
  .string()
  .regex(/^[a-z0-9][a-z0-9-]{0,62}$/, 'host ids are lower-case letters, digits and dashes, e.g. "spark-2"');

export const HostConfigSchema = z
  .object({
    id: hostId,
    pool: z.string().min(1).default('spark').describe('Pool the host belongs to; pairs never span pools.'),
    gpus: z.number().int().positive().default(1).describe('GPUs on the host, counted against budgets.'),
    homeService: z
      .string()
      .min(1)
      .nullable()
      .default(null)
      .describe('Long-running service this host serves when not lent (e.g. "deckard" on spark-1).'),
  })
  .strict();

/**
 * Per-repository settings (issue 15 item 1). `executor` chooses the backend that runs the
 * repository's CI leases, overriding each host's own `executor` (its agent.json); the host's agent
 * must have that backend's settings, or preparation fails naming what is missing.
 */
export { CI_MODES, type CiMode };

/** The repository's test entry point a CI task runs (the spark-test action's default `script`). */
export const CI_TASK_SCRIPT = 'scripts/ci/spark-test.sh';

export const RepositoryConfigSchema = z
  .object({
    executor: z
      .enum(EXECUTOR_NAMES, { message: `executor is one of ${EXECUTOR_NAMES.join(', ')}` })
      .optional()
      .describe(
        "Backend for this repository's CI leases (jit-runner, slurm, dstack); unset: each host's own executor.",
      ),
    ci: z
      .enum(CI_MODES, { message: `ci is one of ${CI_MODES.join(', ')}` })
      .optional()
      .describe(
        'How CI runs: "runner" (default: a dispatched workflow job on a one-job JIT runner) or "task" (the agent runs scripts/ci/spark-test.sh at the exact SHA as a dstack task; needs executor "dstack").',
      ),
    distributedAssertion: z
      .string()
      .max(200)
      .regex(
        /^(?!.*(^|\/)\.\.?(\/|$))[A-Za-z0-9_.-]+(\/[A-Za-z0-9_.-]+)*$/,
        'distributedAssertion is a path inside the repository like "scripts/ci/assert-pair.sh"',
      )
      .optional()
      .describe(
        'ci "task" only: the script in the repository that proves both hosts of a pair computed together (the spark-test action\'s distributed_assertion); without one a pair task fails, as a pair job does.',
      ),
    mergeCi: z
      .boolean()
      .default(true)
      .describe(
        'Merge correctness CI (priority 70) for every push to the default branch: on by default; false: such a push queues nothing and its delivery says so.',
      ),
    cloneUrl: z
      .string()
      .regex(/^https?:\/\/[^\s@]+$/, 'cloneUrl is an http(s) URL without credentials')
      .optional()
      .describe(
        'Where a "task" checks the repository out from (git over HTTP, the App token as Basic password); default: <github.gitUrl>/<owner>/<name>.git.',
      ),
  })
  .strict();

export const PoolConfigSchema = z
  .object({
    runnerLabel: z
      .string()
      .min(1)
      .optional()
      .describe('Fleet label every JIT runner of this pool carries; defaults to github.fleetLabel.'),
  })
  .strict();

const prioritiesSchema = z
  .object({
    development: z.number().int().default(100),
    deckard: z.number().int().default(90),
    manual: z.number().int().default(80),
    merge: z.number().int().default(70),
    benchmark: z.number().int().default(50),
    background: z.number().int().default(20),
  })
  .strict();

const budgetsSchema = z
  .object({
    maxPrs: z.number().int().positive().default(2).describe('Distinct PRs with admitted work at once.'),
    maxGpusPerPr: z.number().int().positive().default(4).describe('GPUs one PR may hold at once.'),
    maxGpus: z.number().int().positive().default(8).describe('GPUs held by all admitted work at once.'),
  })
  .strict();

const timingsSchema = z
  .object({
    heartbeatIntervalS: z.number().int().positive().default(10),
    offlineAfterS: z.number().int().positive().default(40),
    runnerPickupTimeoutS: z.number().int().positive().default(600),
    runnerRetries: z.number().int().min(0).default(3),
    taskStartTimeoutS: z
      .number()
      .int()
      .positive()
      .max(3600, {
        message:
          "at most 3600 s: a CI task's clone token lives one hour from the grant, so a task dstack starts later cannot fetch its commit",
      })
      .default(1200)
      .describe(
        'A CI task (ci "task") dstack has not started within this many seconds of its hand-over ends the work as task_not_started, without a retry (ADR 0120).',
      ),
    queueTimeoutS: z
      .number()
      .int()
      .positive()
      .default(6 * 3600),
    ciLeaseTtlS: z.number().int().positive().default(300).describe('CI lease TTL, renewed by heartbeats.'),
    devLeaseDefaultTtlS: z
      .number()
      .int()
      .positive()
      .default(4 * 3600),
    devLeaseMaxTtlS: z
      .number()
      .int()
      .positive()
      .default(24 * 3600),
    restoreRetries: z.number().int().min(0).default(3),
    restoreBackoffS: z.number().int().positive().default(30),
    restoreHealthTimeoutS: z.number().int().positive().default(600),
  })
  .strict();

const githubSchema = z
  .object({
    apiUrl: z
      .url()
      .default('https://api.github.com')
      .describe('GitHub REST base URL (GHES: https://HOST/api/v3).'),
    gitUrl: z
      .url()
      .default('https://github.com')
      .describe(
        'Git-over-HTTPS base a CI task fetches from: <gitUrl>/<owner>/<name>.git (GHES: https://HOST).',
      ),
    appId: z
      .union([z.number().int().positive(), z.string().regex(/^\d+$/)])
      .nullable()
      .default(null),
    workflow: z.string().min(1).default('spark-pr-test.yml'),
    labels: z
      .object({
        test: z.string().min(1).default('spark-test'),
        long: z.string().min(1).default('spark-test-long'),
        pair: z.string().min(1).default('spark-pair-test'),
      })
      .strict()
      .prefault({}),
    requiredPermission: z
      .array(z.enum(['admin', 'maintain', 'write', 'triage', 'read']))
      .min(1)
      .default(['maintain', 'admin'])
      .describe('Roles (role_name) a sender needs for labels and commands.'),
    permissionCacheS: z.number().int().min(0).default(60),
    runnerScope: z
      .enum(['org', 'repo'])
      .default('org')
      .describe(
        'Where JIT runners are registered: "org" (an organization runner group restricted to the enabled repositories; needs github.runnerGroupId and the App permission Organization → Self-hosted runners) or "repo" (repository runners; needs the App permission Repository → Administration: write). docs/github-app.md.',
      ),
    fleetLabel: z
      .string()
      .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/, 'a runner label is letters, digits, ".", "_" and "-"')
      .default('waffuru-spark')
      .describe(
        'Fleet label on every JIT runner (DESIGN.md "Binding"); must equal the workflow templates\' runs-on label.',
      ),
    runnerGroupId: z
      .number()
      .int()
      .positive()
      .optional()
      .describe(
        'The organization runner group the JIT runners join (runnerScope "org"): create it for the Spark runners and restrict its repository access to the enabled repositories. Unused with runnerScope "repo".',
      ),
    checkName: z.string().min(1).default('Spark test'),
  })
  .strict();

const scheduleSchema = z
  .object({
    repo: z.string().regex(/^[^/\s]+\/[^/\s]+$/, 'expected "owner/name"'),
    cron: z.string().min(1).describe('Cron expression (5 or 6 fields), evaluated in UTC.'),
    kind: z.enum(['benchmark', 'background']).default('benchmark'),
    suite: z.enum(['smoke', 'performance']).default('performance'),
    topology: z.enum(['single', 'pair']).default('single'),
  })
  .strict();

/**
 * Node server limits (issue 11 item 4). The defaults keep a 10 s agent heartbeat on one
 * keep-alive connection (15 s > 10 s) and leave file descriptors for the ledger and GitHub under
 * a `LimitNOFILE` of 4096 (docs/operations in SECURITY.md).
 */
const serverSchema = z
  .object({
    maxConnections: z.number().int().min(16).default(1024).describe('Open connections at most.'),
    headersTimeoutS: z.number().int().min(1).max(120).default(10).describe('Time to send the headers.'),
    requestTimeoutS: z
      .number()
      .int()
      .min(1)
      .max(600)
      .default(30)
      .describe('Time to send the whole request (headers and body); answers may take longer (long-poll).'),
    keepAliveTimeoutS: z
      .number()
      .int()
      .min(1)
      .max(120)
      .default(15)
      .describe('Idle keep-alive connections are closed after this; above the agent heartbeat.'),
    sseMaxClients: z.number().int().min(1).default(200).describe('Dashboard change streams in all.'),
    sseMaxPerAddress: z
      .number()
      .int()
      .min(1)
      .default(4)
      .describe('Dashboard change streams per client address.'),
    publicViewCacheMs: z
      .number()
      .int()
      .min(0)
      .max(60_000)
      .default(1000)
      .describe('Anonymous views are reused this long unless the ledger changes first.'),
  })
  .strict();

/** One token's allowance for development work; unset fields fall back to `tokenLimits.default`. */
const tokenLimitSchema = z
  .object({
    maxConcurrentLeases: z
      .number()
      .int()
      .min(0)
      .optional()
      .describe('Hosts the token may hold or wait for at once (a pair counts 2). Default 4.'),
    maxTtlS: z
      .number()
      .int()
      .min(60)
      .optional()
      .describe(
        'Longest development lease, from grant, including renewals. Default timings.devLeaseMaxTtlS.',
      ),
    hosts: z
      .array(hostId)
      .min(1)
      .optional()
      .describe('Hosts the token may reserve; a request must then name one with --host. Default: all.'),
  })
  .strict();

const tokenLimitsSchema = z
  .object({
    default: tokenLimitSchema.prefault({}),
    byName: z
      .record(z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/), tokenLimitSchema)
      .default({})
      .describe('Per API token name; each field overrides the default.'),
  })
  .strict()
  .describe('Development work one API token may hold (issue 11 item 9): one token cannot take the fleet.');

/** Default `maxConcurrentLeases` when the config sets none: a pair and two singles. */
export const DEFAULT_MAX_CONCURRENT_LEASES = 4;

export const DEFAULT_HOSTS = [
  { id: 'spark-1', pool: 'spark', gpus: 1, homeService: 'deckard' },
  { id: 'spark-2', pool: 'spark', gpus: 1, homeService: null },
] as const;

export const ConfigSchema = z
  .object({
    $schema: z.string().optional(),
    listen: z
      .object({
        host: z.string().min(1).default('127.0.0.1'),
        port: z.number().int().min(0).max(65535).default(8787),
      })
      .strict()
      .prefault({}),
    ledgerUrl: z
      .string()
      .refine((u) => /^(file:|libsql:|https?:|wss?:)/.test(u), {
        message: 'expected a file:, libsql:, http(s): or ws(s): URL',
      })
      .default('file:./data/spark.db'),
    hosts: z
      .array(HostConfigSchema)
      .min(1)
      .default(DEFAULT_HOSTS.map((h) => ({ ...h }))),
    pools: z.record(z.string(), PoolConfigSchema).default({ spark: {} }),
    preferHosts: z
      .array(hostId)
      .default(['spark-2'])
      .describe('Hosts tried first for single work, so service hosts stay with their service.'),
    priorities: prioritiesSchema.prefault({}),
    budgets: budgetsSchema.prefault({}),
    timings: timingsSchema.prefault({}),
    github: githubSchema.prefault({}),
    schedules: z.array(scheduleSchema).default([]),
    server: serverSchema.prefault({}),
    tokenLimits: tokenLimitsSchema.prefault({}),
    publicViews: z
      .enum(['open', 'token'])
      .default('open')
      .describe(
        '"token": `/`, the dashboard, `/api/v1/queue`, `/api/v1/fleet` and `/metrics` need an API token (any scope).',
      ),
    repoAliases: z
      .record(z.string().regex(/^[^/\s]+\/[^/\s]+$/), z.string().min(1).max(60))
      .default({})
      .describe(
        'Public names for repositories (e.g. private ones): shown instead of the real name, without links.',
      ),
    repositories: z
      .record(z.string(), RepositoryConfigSchema)
      .default({})
      .describe('Per-repository settings, keyed "owner/name" (e.g. the executor of its CI work).'),
    publicRepos: z
      .enum(['all', 'aliased'])
      .default('all')
      .describe(
        '"aliased": public views show only repositories listed in repoAliases (under the alias); others not at all.',
      ),
  })
  .strict()
  .superRefine((cfg, ctx) => {
    const seen = new Set<string>();
    cfg.hosts.forEach((h, i) => {
      if (seen.has(h.id)) {
        ctx.addIssue({ code: 'custom', path: ['hosts', i, 'id'], message: `duplicate host id "${h.id}"` });
      }
      seen.add(h.id);
      if (!cfg.pools[h.pool]) {
        ctx.addIssue({
          code: 'custom',
          path: ['hosts', i, 'pool'],
          message: `pool "${h.pool}" is not defined under "pools" (defined: ${Object.keys(cfg.pools).join(', ') || 'none'})`,
        });
      }
    });
    cfg.preferHosts.forEach((id, i) => {
      if (!seen.has(id)) {
        ctx.addIssue({
          code: 'custom',
          path: ['preferHosts', i],
          message: `preferHosts names unknown host "${id}"`,
        });
      }
    });
    const limits = [
      ['default', cfg.tokenLimits.default],
      ...Object.entries(cfg.tokenLimits.byName).map(([n, l]) => [`byName.${n}`, l] as const),
    ] as const;
    for (const [at, l] of limits) {
      l.hosts?.forEach((id, i) => {
        if (!seen.has(id))
          ctx.addIssue({
            code: 'custom',
            path: ['tokenLimits', ...at.split('.'), 'hosts', i],
            message: `unknown host "${id}" (hosts: ${[...seen].join(', ')})`,
          });
      });
      if (l.maxTtlS != null && l.maxTtlS > cfg.timings.devLeaseMaxTtlS)
        ctx.addIssue({
          code: 'custom',
          path: ['tokenLimits', ...at.split('.'), 'maxTtlS'],
          message: `maxTtlS ${l.maxTtlS} exceeds timings.devLeaseMaxTtlS (${cfg.timings.devLeaseMaxTtlS}); lower it or raise the global bound`,
        });
    }
    for (const repo of Object.keys(cfg.repositories)) {
      // checked here, not as the record's key schema: zod reports a bad key only as "Invalid key"
      if (!/^[^/\s]+\/[^/\s]+$/.test(repo))
        ctx.addIssue({
          code: 'custom',
          path: ['repositories', repo],
          message: `"${repo.slice(0, 100)}" is not a repository: expected "owner/name"`,
        });
      const rc = cfg.repositories[repo];
      if (rc?.ci === 'task' && rc.executor !== 'dstack')
        ctx.addIssue({
          code: 'custom',
          path: ['repositories', repo, 'ci'],
          message: `ci "task" runs scripts/ci/spark-test.sh as a dstack task: set "executor": "dstack" for ${repo.slice(0, 100)} (it is ${rc.executor ? `"${rc.executor}"` : 'unset'}), or drop "ci"`,
        });
      if (rc?.distributedAssertion && rc.ci !== 'task')
        ctx.addIssue({
          code: 'custom',
          path: ['repositories', repo, 'distributedAssertion'],
          message: `distributedAssertion is used only by ci "task" (a runner job declares it in its workflow); set "ci": "task" for ${repo.slice(0, 100)} or drop it`,
        });
      if (rc?.cloneUrl && rc.ci !== 'task')
        ctx.addIssue({
          code: 'custom',
          path: ['repositories', repo, 'cloneUrl'],
          message: `cloneUrl is used only by ci "task"; set "ci": "task" for ${repo.slice(0, 100)} or drop cloneUrl`,
        });
    }
    if (cfg.timings.offlineAfterS <= cfg.timings.heartbeatIntervalS) {
      ctx.addIssue({
        code: 'custom',
        path: ['timings', 'offlineAfterS'],
        message: 'offlineAfterS must be longer than heartbeatIntervalS, or every host flaps offline',
      });
    }
  });

export type SparkConfig = z.output<typeof ConfigSchema>;
export type SparkConfigInput = z.input<typeof ConfigSchema>;
export type HostConfig = z.output<typeof HostConfigSchema>;

/**
 * The backend a repository's CI leases run on, or null to leave each host's own `executor`
 * (issue 15 item 1). Development leases carry no repository and always use the host's.
 */
export function executorForRepo(
  cfg: Pick<SparkConfig, 'repositories'>,
  repo: string | null,
): (typeof EXECUTOR_NAMES)[number] | null {
  if (!repo || !Object.hasOwn(cfg.repositories, repo)) return null;
  return cfg.repositories[repo]?.executor ?? null;
}

/** How `repo`'s CI work runs: `task` only when its config says so (issue 15), else `runner`. */
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

/** A config error whose message lists every problem as `path: what to fix`. */
export class ConfigError extends Error {
  override name = 'ConfigError';
  constructor(
    readonly source: string,
    readonly problems: string[],
  ) {
    super(`Invalid configuration in ${source}:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
  }
}

/** Validates a parsed config object; throws {@link ConfigError} naming each bad field. */
export function parseConfig(input: unknown, source = 'config'): SparkConfig {
  const result = ConfigSchema.safeParse(input ?? {});
  if (!result.success) {
    throw new ConfigError(
      source,
      result.error.issues.map((i) => `${i.path.length ? i.path.join('.') : '(root)'}: ${i.message}`),
    );
  }
  return result.data;
}

/** Parses config file text (JSON); a syntax error is a ConfigError too. */
export function parseConfigText(text: string, source: string): SparkConfig {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new ConfigError(source, [`not valid JSON: ${(e as Error).message}`]);
  }
  return parseConfig(raw, source);
}

/** The built-in default config: two Sparks, spark-1 homes Deckard. */
export function defaultConfig(): SparkConfig {
  return parseConfig({}, 'defaults');
}

/**
 * A URL fit for logs and error messages (issue 11 item 8): userinfo and the query string (where
 * libSQL URLs carry `?authToken=`) and the fragment are cut. Text that is not a URL loses
 * everything after the first `?` or `#` and any `user:pass@` part.
 */
export function redactUrl(raw: string): string {
  try {
    const u = new URL(raw);
    const hadSecrets = u.username || u.password || u.search || u.hash;
    u.username = '';
    u.password = '';
    u.search = '';
    u.hash = '';
    const out = u.href;
    // `new URL('file:data/x.db')` rewrites relative paths; keep the operator's spelling when safe
    return hadSecrets || !raw.startsWith(u.protocol) ? out : raw;
  } catch {
    return raw.replace(/[?#].*$/s, '').replace(/\/\/[^/@]*@/, '//');
  }
}
