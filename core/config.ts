import type { SparkConfig } from './config-schema.ts';
import { ConfigSchema } from './config-schema.ts';

/**
 * The controller's configuration file (`spark.config.json`): the one front door. The schema is
 * in `config-schema.ts` (its sections in `config-sections.ts`), what it says for a repository,
 * pool or token in `config-lookups.ts`; this module parses and re-exports them.
 */

export {
  ciModeForRepo,
  cloneUrlForRepo,
  executorForRepo,
  fleetLabelOf,
  githubConfigProblems,
  mergeCiForRepo,
  revokeUrlFor,
  runnerGroupIdOf,
  type TokenLimit,
  tokenLimitFor,
} from './config-lookups.ts';
export {
  ConfigSchema,
  DEFAULT_HOSTS,
  DEFAULT_MAX_CONCURRENT_LEASES,
  type HostConfig,
  type SparkConfig,
  type SparkConfigInput,
} from './config-schema.ts';
export {
  CI_TASK_SCRIPT,
  HostConfigSchema,
  PoolConfigSchema,
  RepositoryConfigSchema,
} from './config-sections.ts';
export { CI_MODES, type CiMode } from './model.ts';

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
 * A URL fit for logs and error messages: userinfo and the query string (where
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
