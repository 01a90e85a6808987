import * as z from 'zod';
import {
  budgetsSchema,
  githubSchema,
  HostConfigSchema,
  hostId,
  PoolConfigSchema,
  prioritiesSchema,
  RepositoryConfigSchema,
  scheduleSchema,
  serverSchema,
  timingsSchema,
  tokenLimitsSchema,
} from './config-sections.ts';

/**
 * The whole configuration file (`spark.config.json`), validated with zod. Durations are whole
 * seconds. Every field has a default so an empty object is the default two-Spark fleet (spark-1
 * homes Deckard). Its sections are in `config-sections.ts`; the checks across fields are below.
 */

/** Default `maxConcurrentLeases` when the config sets none: a pair and two singles. */
export const DEFAULT_MAX_CONCURRENT_LEASES = 4;

export const DEFAULT_HOSTS = [
  { id: 'spark-1', pool: 'spark', gpus: 1, homeService: 'deckard' },
  { id: 'spark-2', pool: 'spark', gpus: 1, homeService: null },
] as const;

const ConfigShape = z
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
  .strict();

type ConfigShapeOutput = z.output<typeof ConfigShape>;
type Ctx = z.core.$RefinementCtx<ConfigShapeOutput>;

export const ConfigSchema = ConfigShape.superRefine((cfg, ctx) => {
  const seen = checkHosts(cfg, ctx);
  checkPreferHosts(cfg, seen, ctx);
  checkTokenLimits(cfg, seen, ctx);
  checkRepositories(cfg, ctx);
  checkTimings(cfg, ctx);
});

export type SparkConfig = z.output<typeof ConfigSchema>;
export type SparkConfigInput = z.input<typeof ConfigSchema>;
export type HostConfig = z.output<typeof HostConfigSchema>;

/** Host ids are unique and each host's pool is defined; returns the ids. */
function checkHosts(cfg: ConfigShapeOutput, ctx: Ctx): Set<string> {
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
  return seen;
}

function checkPreferHosts(cfg: ConfigShapeOutput, seen: ReadonlySet<string>, ctx: Ctx): void {
  cfg.preferHosts.forEach((id, i) => {
    if (!seen.has(id)) {
      ctx.addIssue({
        code: 'custom',
        path: ['preferHosts', i],
        message: `preferHosts names unknown host "${id}"`,
      });
    }
  });
}

/** Each token limit names known hosts and stays within the global development lease bound. */
function checkTokenLimits(cfg: ConfigShapeOutput, seen: ReadonlySet<string>, ctx: Ctx): void {
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
}

/** Keys are `owner/name`; the task-only settings come with `ci: "task"`, which needs dstack. */
function checkRepositories(cfg: ConfigShapeOutput, ctx: Ctx): void {
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
}

function checkTimings(cfg: ConfigShapeOutput, ctx: Ctx): void {
  if (cfg.timings.offlineAfterS <= cfg.timings.heartbeatIntervalS) {
    ctx.addIssue({
      code: 'custom',
      path: ['timings', 'offlineAfterS'],
      message: 'offlineAfterS must be longer than heartbeatIntervalS, or every host flaps offline',
    });
  }
}
