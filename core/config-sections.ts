import * as z from 'zod';
import { CI_MODES, EXECUTOR_NAMES, TOPOLOGIES } from './model.ts';

/**
 * The sections of the configuration file (`spark.config.json`), one zod schema each; the whole
 * file's schema and its cross-field checks are in `config-schema.ts`.
 */

export const hostId = z
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

/** The repository's test entry point a CI task runs (the spark-test action's default `script`). */
export const CI_TASK_SCRIPT = 'scripts/ci/spark-test.sh';

/**
 * Per-repository settings (docs/adr/0085-executor-per-repository.md). `executor` chooses the
 * backend that runs the repository's CI leases, overriding each host's own `executor` (its
 * agent.json); the host's agent must have that backend's settings, or preparation fails naming
 * what is missing.
 */
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

export const prioritiesSchema = z
  .object({
    development: z.number().int().default(100),
    deckard: z.number().int().default(90),
    manual: z.number().int().default(80),
    merge: z.number().int().default(70),
    benchmark: z.number().int().default(50),
    background: z.number().int().default(20),
  })
  .strict();

export const budgetsSchema = z
  .object({
    maxPrs: z.number().int().positive().default(2).describe('Distinct PRs with admitted work at once.'),
    maxGpusPerPr: z.number().int().positive().default(4).describe('GPUs one PR may hold at once.'),
    maxGpus: z.number().int().positive().default(8).describe('GPUs held by all admitted work at once.'),
  })
  .strict();

export const timingsSchema = z
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

export const githubSchema = z
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
        'Fleet label on every JIT runner (docs/architecture.md "Binding"); must equal the workflow templates\' runs-on label.',
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

export const scheduleSchema = z
  .object({
    repo: z.string().regex(/^[^/\s]+\/[^/\s]+$/, 'expected "owner/name"'),
    cron: z.string().min(1).describe('Cron expression (5 or 6 fields), evaluated in UTC.'),
    kind: z.enum(['benchmark', 'background']).default('benchmark'),
    suite: z.enum(['smoke', 'performance']).default('performance'),
    topology: z.enum(TOPOLOGIES).default('single'),
  })
  .strict();

/**
 * Node server limits. The defaults keep a 10 s agent heartbeat on one
 * keep-alive connection (15 s > 10 s) and leave file descriptors for the ledger and GitHub under
 * a `LimitNOFILE` of 4096 (docs/operations in SECURITY.md).
 */
export const serverSchema = z
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

export const tokenLimitsSchema = z
  .object({
    default: tokenLimitSchema.prefault({}),
    byName: z
      .record(z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/), tokenLimitSchema)
      .default({})
      .describe('Per API token name; each field overrides the default.'),
  })
  .strict()
  .describe('Development work one API token may hold: one token cannot take the fleet.');
