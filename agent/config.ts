import { readFileSync } from 'node:fs';
import { dirname, isAbsolute, resolve } from 'node:path';
import { z } from 'zod';
import { EXIT, ExitError } from '../core/errors.ts';
import { EXECUTOR_NAMES } from '../core/model.ts';

/**
 * The agent's boundary module: the only place that reads its configuration file, and the only
 * agent module that reads the environment ({@link hostEnv}). Relative paths in the file are
 * resolved against the file's directory. Messages name the field and what to fix.
 */

/**
 * The agent's own environment, captured once as the agent starts. The agent takes no setting from
 * it (settings come from the config file); it only hands parts of it to the commands it runs: PATH
 * to find host tools, and the variables `runner.passEnv` names. Read here so the agent's
 * environment has one reader (docs/architecture.md "Parts").
 */
export const hostEnv: Readonly<NodeJS.ProcessEnv> = Object.freeze({ ...process.env });

/** `https:` anywhere, `http:` only to loopback (a controller on the same machine, tests, the demo). */
export function isSafeControllerUrl(raw: string): boolean {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    return false;
  }
  if (u.username || u.password) return false;
  if (u.protocol === 'https:') return true;
  if (u.protocol !== 'http:') return false;
  const h = u.hostname;
  return h === 'localhost' || h === '[::1]' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/**
 * How the agent calls its lease sandbox helper on a host (docs/agent.md "Install"): through sudo,
 * never asking for a password (`-n`), keeping the descriptors below 5 open (`-C 5`: the helper
 * reports the job's pid and exit status on them; the sudoers rule's `closefrom_override` allows it).
 */
export const HELPER_THROUGH_SUDO = ['sudo', '-n', '-C', '5'] as const;

const argv = z
  .array(z.string().min(1))
  .min(1, 'give the command as an argv array, e.g. ["systemctl", "start", "deckard"]');

const serviceSchema = z
  .object({
    name: z.string().min(1).default('deckard').describe('Name used in reports and logs.'),
    drain: argv.describe('Stops new work on the service and lets in-flight requests finish.'),
    stop: argv.describe('Stops the service completely (a paused container is not stopped).'),
    start: argv.describe('Recreates the service; its model-ready health check gates the restore.'),
    healthUrl: z.url().describe('Model-ready health URL: 2xx means the model is loaded and serving.'),
    commandTimeoutS: z.number().int().positive().default(300),
    /** How long the GPU may take to show the service's processes gone after `stop`. */
    releaseVerifyTimeoutS: z.number().int().positive().default(60),
    healthPollMs: z.number().int().positive().default(1000),
    unhealthyAfterS: z
      .number()
      .int()
      .positive()
      .default(60)
      .describe(
        'Outside a lease, a service whose model-ready check has failed this long is reported down and restarted (ADR 0175); one whose port nothing listens on is reported at once.',
      ),
  })
  .strict();

export const AgentConfigSchema = z
  .object({
    controllerUrl: z
      .url()
      .refine(isSafeControllerUrl, {
        message:
          'use https:// (plain http:// only to a loopback address such as 127.0.0.1); anyone on the path of an http:// URL could command this host',
      })
      .describe('Base URL of the controller (outbound HTTPS only).'),
    hostId: z.string().regex(/^[a-z0-9][a-z0-9-]{0,62}$/, 'host ids look like "spark-2"'),
    tokenFile: z.string().min(1).describe("File holding this host's agent token (mode 0600)."),
    stateFile: z.string().min(1).describe('Local progress file, written by atomic rename.'),
    workRoot: z.string().min(1).describe('Volume under which each lease gets a fresh work dir.'),
    modelCacheDir: z.string().min(1).describe('Managed model cache passed to jobs as SPARK_MODEL_CACHE.'),
    runner: z
      .object({
        dir: z.string().min(1).describe('Directory of the GitHub Actions runner.'),
        command: z.array(z.string().min(1)).min(1).default(['./run.sh']).describe('Relative to runner.dir.'),
        stopGraceS: z.number().positive().default(10),
        user: z
          .string()
          .regex(/^[a-z_][a-z0-9_-]{0,31}$/, 'a user name, e.g. "spark-runner"')
          .nullable()
          .default('spark-runner')
          .describe(
            'Unprivileged user the runner and the job run as; null runs them as the agent (development only).',
          ),
        path: z
          .string()
          .regex(/^\/[^:]*(:\/[^:]*)*$/, 'absolute directories separated by ":"')
          .default('/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin')
          .describe('PATH of the runner (its environment starts fresh; passEnv may override it).'),
        passEnv: z
          .array(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'environment variable names only'))
          .default([])
          .describe(
            'Extra variables of the agent passed to the runner (besides PATH, HOME, locale); the job runs PR code.',
          ),
        helper: z
          .array(z.string().min(1))
          .min(2, 'give the helper as an argv prefix ending with its configuration file')
          .default([
            ...HELPER_THROUGH_SUDO,
            '/usr/local/libexec/spark-lease-sandbox',
            '/etc/spark-lease-sandbox.conf',
          ])
          .describe(
            'The privileged helper (ADR 0155) that makes and removes lease dirs, runs the job in its namespace and acts as the runner user: an argv prefix ending with its root-owned configuration file.',
          ),
      })
      .strict(),
    executor: z
      .enum(EXECUTOR_NAMES, { message: `executor is one of ${EXECUTOR_NAMES.join(', ')}` })
      .default('jit-runner')
      .describe(
        'How a lease runs its workload: a one-job JIT runner, a Slurm batch job, or a dstack task (and a dstack dev environment for development leases).',
      ),
    slurm: z
      .object({
        /** Directory of sbatch/squeue/sacct/scancel; empty: PATH. */
        bin: z.string().default(''),
        /** Generic resource the job asks for (the lease's GPUs), e.g. "gpu:1". */
        gres: z
          .string()
          .regex(/^[a-z][a-z0-9_]*(:[a-z0-9_]+)?(:[0-9]+)?$/, 'a gres like "gpu:1"')
          .default('gpu:1'),
        partition: z
          .string()
          .regex(/^[A-Za-z0-9_-]+$/)
          .nullable()
          .default(null),
        /** SLURM_CONF for the commands; null: Slurm's default. */
        conf: z.string().nullable().default(null),
      })
      .strict()
      .prefault({}),
    dstack: z
      .object({
        url: z
          .url()
          .refine(isSafeControllerUrl, {
            message:
              'use https:// (plain http:// only to a loopback address): the run spec carries job secrets',
          })
          .describe("Base URL of the dstack server (its REST API, e.g. 'https://dstack.internal:3000')."),
        project: z
          .string()
          .regex(/^[A-Za-z0-9_-]{1,50}$/, 'a dstack project name, e.g. "main"')
          .default('main'),
        tokenFile: z.string().min(1).describe('File holding the dstack user token (mode 0600).'),
        fleet: z
          .string()
          .regex(/^[a-z][a-z0-9-]{1,40}$/, 'a dstack fleet name, e.g. "spark-2"')
          .nullable()
          .default(null)
          .describe('On-prem SSH fleet holding exactly this host; null: a fleet named like the host id.'),
        // dstack's default image (no `image`) is built for linux/amd64 only and makes the run
        // require an x86 CPU, so on a DGX Spark (aarch64) it never starts (docs/executors.md,
        // ADR 0140): every run names its image
        image: z
          .string({
            error: (i) =>
              i.input === undefined || i.input === null
                ? "set the image of dstack runs: one with a linux/arm64 build (the DGX Spark is aarch64; dstack's default image is amd64-only, so a run without an image never starts) holding git, bash, coreutils and curl or GNU wget"
                : undefined,
          })
          .min(1)
          .describe(
            'Container image of every dstack run; it needs a linux/arm64 build (DGX Spark) and git, bash, coreutils, curl or GNU wget.',
          ),
        ide: z
          .enum(['vscode', 'cursor', 'windsurf', 'zed'])
          .nullable()
          .default(null)
          .describe('IDE pre-installed in development environments; null: SSH only (`dstack attach`).'),
        requestTimeoutS: z.number().positive().max(300).default(20),
      })
      .strict()
      .nullable()
      .default(null)
      .describe('dstack server for executor "dstack": CI tasks and development environments.'),
    nvidiaSmi: z.string().min(1).default('nvidia-smi').describe('nvidia-smi binary (PATH lookup if bare).'),
    service: serviceSchema.nullable().default(null).describe('Home service (Deckard on spark-1), or null.'),
    interconnectCheck: z
      .array(z.string().min(1))
      .min(1)
      .nullable()
      .default(null)
      .describe('Command that exits 0 when the pair interconnect is up.'),
    timeouts: z
      .object({
        requestS: z.number().positive().default(10),
        gpuQueryS: z.number().positive().default(15),
        backoffMaxS: z.number().positive().default(30),
        /** Longest a poll is held by the controller (it caps this too). */
        longPollS: z.number().int().min(0).max(55).default(25),
        /**
         * How long a failing cleanup (a tree that will not go, a process that will not die) is
         * retried before the host is quarantined with the reason (ADR 0156).
         */
        cleanupS: z.number().positive().max(86_400).default(300),
      })
      .strict()
      .prefault({}),
    buildCache: z
      .object({
        /** One shared build dir per repository, kept across its leases (SPARK_BUILD_CACHE_DIR). */
        perRepository: z.boolean().default(true),
        /** Past this size the repository's cache is emptied after a lease. */
        maxGiB: z.number().positive().default(100),
      })
      .strict()
      .prefault({})
      .describe('The per-repository build cache a job gets in SPARK_BUILD_CACHE_DIR (ADR 0157).'),
    logLevel: z.enum(['debug', 'info', 'warn', 'error']).default('info'),
  })
  .strict()
  .refine((c) => c.executor !== 'dstack' || c.dstack != null, {
    path: ['dstack'],
    message: 'executor "dstack" needs a "dstack" section: { "url", "project", "tokenFile", "image" }',
  });

export type AgentConfig = z.output<typeof AgentConfigSchema>;
export type ServiceConfig = NonNullable<AgentConfig['service']>;

/** A user-fixable agent failure: printed as one line, exits with `exitCode`. */
export class AgentConfigError extends ExitError {
  override name = 'AgentConfigError';
  constructor(message: string) {
    super(EXIT.usage, message);
  }
}

function resolvePaths(cfg: AgentConfig, base: string): AgentConfig {
  const abs = (p: string) => (isAbsolute(p) ? p : resolve(base, p));
  const cmd = (c: string[], cwd: string) => {
    const [head, ...rest] = c;
    return [head!.includes('/') && !isAbsolute(head!) ? resolve(cwd, head!) : head!, ...rest];
  };
  const runnerDir = abs(cfg.runner.dir);
  return {
    ...cfg,
    tokenFile: abs(cfg.tokenFile),
    stateFile: abs(cfg.stateFile),
    workRoot: abs(cfg.workRoot),
    modelCacheDir: abs(cfg.modelCacheDir),
    runner: {
      ...cfg.runner,
      dir: runnerDir,
      command: cmd(cfg.runner.command, runnerDir),
      helper: cmd(cfg.runner.helper, base),
    },
    nvidiaSmi: cfg.nvidiaSmi.includes('/') ? abs(cfg.nvidiaSmi) : cfg.nvidiaSmi,
    service: cfg.service
      ? {
          ...cfg.service,
          drain: cmd(cfg.service.drain, base),
          stop: cmd(cfg.service.stop, base),
          start: cmd(cfg.service.start, base),
        }
      : null,
    interconnectCheck: cfg.interconnectCheck ? cmd(cfg.interconnectCheck, base) : null,
    dstack: cfg.dstack ? { ...cfg.dstack, tokenFile: abs(cfg.dstack.tokenFile) } : null,
  };
}

/** Validates a parsed config object; `base` resolves relative paths. */
export function parseAgentConfig(input: unknown, source: string, base: string): AgentConfig {
  const r = AgentConfigSchema.safeParse(input);
  if (!r.success) {
    throw new AgentConfigError(
      `invalid agent config ${source}: ${r.error.issues
        .map((i) => `${i.path.length ? i.path.join('.') : '(root)'}: ${i.message}`)
        .join('; ')}`,
    );
  }
  return resolvePaths(r.data, base);
}

/** Reads and validates the agent config file. */
export function loadAgentConfig(path: string): AgentConfig {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new AgentConfigError(`cannot read agent config ${path}: ${(e as Error).message}`);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new AgentConfigError(`agent config ${path} is not valid JSON: ${(e as Error).message}`);
  }
  return parseAgentConfig(raw, path, dirname(resolve(path)));
}

/** Reads the agent token; a missing or empty file is a configuration error. */
export function readAgentToken(cfg: AgentConfig): string {
  let token: string;
  try {
    token = readFileSync(cfg.tokenFile, 'utf8').trim();
  } catch (e) {
    throw new AgentConfigError(
      `cannot read the agent token file ${cfg.tokenFile} (${(e as Error).message}); create a token with \`npm run agent-token -- create ${cfg.hostId}\` and save it there`,
    );
  }
  if (!token) throw new AgentConfigError(`agent token file ${cfg.tokenFile} is empty`);
  return token;
}
