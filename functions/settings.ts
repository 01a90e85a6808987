import * as z from 'zod';
import {
  ConfigError,
  githubConfigProblems,
  parseConfig,
  parseConfigText,
  redactUrl,
  type SparkConfig,
} from '../core/config.ts';

/**
 * The controller's boundary: the only place that reads environment variables / Worker bindings.
 * Secrets come from the environment (never the config file); everything else from the config.
 */

const ledgerUrl = z.string().superRefine((u, ctx) => {
  if (!/^(file:|libsql:|https?:|wss?:)/.test(u)) {
    ctx.addIssue({
      code: 'custom',
      message: `Invalid SPARK_LEDGER_URL '${redactUrl(u)}': expected file:, libsql:, http(s): or ws(s):`,
    });
  }
});

export const EnvSchema = z.object({
  SPARK_CONFIG: z.string().optional().describe('Path to spark.config.json (Node).'),
  SPARK_CONFIG_JSON: z.string().optional().describe('The config itself as JSON (Workers var).'),
  SPARK_SECRETS_FILE: z
    .string()
    .optional()
    .describe(
      'Node: the secrets file read under the environment (default ./spark.secrets.env when present).',
    ),
  SPARK_LEDGER_URL: ledgerUrl.optional(),
  SPARK_LEDGER_AUTH_TOKEN: z.string().optional(),
  SPARK_HOST: z.string().optional(),
  SPARK_PORT: z.string().regex(/^\d+$/, 'SPARK_PORT must be a port number').optional(),
  SPARK_WEBHOOK_SECRET: z.string().optional(),
  SPARK_GITHUB_APP_ID: z.string().optional(),
  SPARK_GITHUB_PRIVATE_KEY: z.string().optional(),
  SPARK_GITHUB_API_URL: z.url().optional(),
  SPARK_PUBLIC_URL: z.url().optional(),
  SPARK_LOG_LEVEL: z.enum(['debug', 'info', 'warn', 'error']).optional(),
  SPARK_AGENT_LONG_POLL_S: z
    .string()
    .regex(/^\d+$/, 'SPARK_AGENT_LONG_POLL_S must be whole seconds, e.g. 25')
    .optional()
    .describe('Longest an agent poll is held open on Node (default 25).'),
  SPARK_AGENT_RATE_LIMIT: z
    .string()
    .regex(/^\d+$/, 'SPARK_AGENT_RATE_LIMIT must be requests per minute per agent token, e.g. 600')
    .optional(),
  SPARK_TICK_MS: z
    .string()
    .regex(/^[1-9]\d*$/, 'SPARK_TICK_MS must be a positive whole number of milliseconds, e.g. 1000')
    .optional()
    .describe('Period of the background tick on Node: inbox retries, sweeps, outbox (default 1000).'),
  SPARK_ADMISSION_INTERVAL_MS: z
    .string()
    .regex(
      /^[1-9]\d*$/,
      'SPARK_ADMISSION_INTERVAL_MS must be a positive whole number of milliseconds, e.g. 2000',
    )
    .optional()
    .describe('Period of the admission pass on Node, besides the passes changes kick (default 2000).'),
});

export interface Settings {
  config: SparkConfig;
  ledgerUrl: string;
  ledgerAuthToken: string | undefined;
  webhookSecret: string | undefined;
  githubAppId: string | undefined;
  githubPrivateKey: string | undefined;
  /** URL agents and runners use to reach this controller. */
  publicUrl: string | undefined;
  logLevel: 'debug' | 'info' | 'warn' | 'error';
  /** Longest an agent long-poll is held on Node, seconds (Workers answer at once). */
  agentLongPollS: number;
  /** Agent API requests per minute per agent token before 429. */
  agentRateLimitPerMin: number;
  /** Period of the background tick on Node (inbox retries, sweeps, outbox), ms. */
  tickMs: number;
  /** Period of the admission pass on Node (changes also kick one), ms. */
  admissionIntervalMs: number;
}

/** Where a Node process looks for its config when `SPARK_CONFIG` names no file. */
export const DEFAULT_CONFIG_FILE = 'spark.config.json';

/**
 * The config file a Node process reads (`npm start`, `npm run agent-token`): `SPARK_CONFIG`, else
 * ./spark.config.json when it exists, else none (the built-in defaults). `exists` is passed in
 * because this module also runs in the Worker, which has no files (its config is
 * `SPARK_CONFIG_JSON`).
 */
export function nodeConfigPath(
  env: Record<string, string | undefined>,
  exists: (path: string) => boolean,
): string | null {
  return env.SPARK_CONFIG ?? (exists(DEFAULT_CONFIG_FILE) ? DEFAULT_CONFIG_FILE : null);
}

/** Builds settings from env-like key/values plus config text (already read by the caller). */
export function settingsFromEnv(
  env: Record<string, string | undefined>,
  configText: { text: string; source: string } | null,
): Settings {
  const parsed = EnvSchema.safeParse(env);
  if (!parsed.success) {
    throw new ConfigError(
      'environment',
      parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`),
    );
  }
  const e = parsed.data;
  let config = configText
    ? parseConfigText(configText.text, configText.source)
    : e.SPARK_CONFIG_JSON
      ? parseConfigText(e.SPARK_CONFIG_JSON, 'SPARK_CONFIG_JSON')
      : parseConfig({}, 'defaults');
  const overrides: Record<string, unknown> = {};
  if (e.SPARK_HOST || e.SPARK_PORT) {
    overrides.listen = {
      host: e.SPARK_HOST ?? config.listen.host,
      port: e.SPARK_PORT ? Number(e.SPARK_PORT) : config.listen.port,
    };
  }
  if (e.SPARK_GITHUB_API_URL) overrides.github = { ...config.github, apiUrl: e.SPARK_GITHUB_API_URL };
  if (Object.keys(overrides).length)
    config = parseConfig({ ...config, ...overrides }, 'environment overrides');
  const githubAppId =
    e.SPARK_GITHUB_APP_ID ?? (config.github.appId != null ? String(config.github.appId) : undefined);
  // the App is configured: its part of the config must be complete before anything is registered
  if (githubAppId && e.SPARK_GITHUB_PRIVATE_KEY) {
    const problems = githubConfigProblems(config);
    if (problems.length) throw new ConfigError(configText?.source ?? 'config', problems);
  }
  return {
    config,
    ledgerUrl: e.SPARK_LEDGER_URL ?? config.ledgerUrl,
    ledgerAuthToken: e.SPARK_LEDGER_AUTH_TOKEN,
    webhookSecret: e.SPARK_WEBHOOK_SECRET,
    githubAppId,
    githubPrivateKey: e.SPARK_GITHUB_PRIVATE_KEY,
    publicUrl: e.SPARK_PUBLIC_URL,
    logLevel: e.SPARK_LOG_LEVEL ?? 'info',
    agentLongPollS: e.SPARK_AGENT_LONG_POLL_S ? Number(e.SPARK_AGENT_LONG_POLL_S) : 25,
    agentRateLimitPerMin: e.SPARK_AGENT_RATE_LIMIT ? Number(e.SPARK_AGENT_RATE_LIMIT) : 600,
    tickMs: e.SPARK_TICK_MS ? Number(e.SPARK_TICK_MS) : 1000,
    admissionIntervalMs: e.SPARK_ADMISSION_INTERVAL_MS ? Number(e.SPARK_ADMISSION_INTERVAL_MS) : 2000,
  };
}
