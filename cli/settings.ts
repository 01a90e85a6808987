import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { CliError, EXIT } from './errors.ts';

/**
 * sparkctl's boundary: the only module that reads the environment or the config file.
 * Precedence: flags, then environment (`SPARK_URL`, `SPARK_TOKEN`), then the config file
 * (`$SPARKCTL_CONFIG`, else `$XDG_CONFIG_HOME/sparkctl/config.json`, else
 * `~/.config/sparkctl/config.json`), then the default URL.
 */

export const DEFAULT_URL = 'http://127.0.0.1:8787';

const urlSchema = z
  .string()
  .refine((u) => /^https?:\/\/[^\s/]+/.test(u), 'expected an http(s) URL such as http://127.0.0.1:8787');

export const ConfigFileSchema = z
  .object({
    url: urlSchema.optional(),
    token: z.string().min(1).optional(),
  })
  .strict();

export interface CliSettings {
  /** Controller base URL, without a trailing slash. */
  url: string;
  /** API bearer token (spk_api_…), if any. */
  token: string | undefined;
  /** Where the token came from, for error hints. */
  tokenSource: 'flag' | 'SPARK_TOKEN' | 'config file' | 'none';
  /** Path of the config file consulted (it may not exist). */
  configPath: string;
  /** Poll interval for --wait and release progress. */
  pollMs: number;
  /** Environment handed to `sparkctl admin` (controller settings: SPARK_CONFIG, SPARK_LEDGER_URL). */
  env: Record<string, string | undefined>;
}

export interface SettingsFlags {
  url?: string | undefined;
  token?: string | undefined;
  config?: string | undefined;
}

function configPathOf(env: Record<string, string | undefined>, flag: string | undefined): string {
  if (flag) return flag;
  if (env.SPARKCTL_CONFIG) return env.SPARKCTL_CONFIG;
  const base = env.XDG_CONFIG_HOME || join(env.HOME || homedir(), '.config');
  return join(base, 'sparkctl', 'config.json');
}

/** Resolves settings; a malformed value is a usage error naming what to fix. */
export function resolveSettings(flags: SettingsFlags, env: Record<string, string | undefined>): CliSettings {
  const configPath = configPathOf(env, flags.config);
  let file: z.infer<typeof ConfigFileSchema> = {};
  if (existsSync(configPath)) {
    let raw: unknown;
    try {
      raw = JSON.parse(readFileSync(configPath, 'utf8'));
    } catch (e) {
      throw new CliError(EXIT.usage, `config file ${configPath} is not valid JSON: ${(e as Error).message}`);
    }
    const parsed = ConfigFileSchema.safeParse(raw);
    if (!parsed.success) {
      throw new CliError(
        EXIT.usage,
        `config file ${configPath}: ${parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ')}`,
      );
    }
    file = parsed.data;
  } else if (flags.config) {
    throw new CliError(EXIT.usage, `config file ${configPath} not found (--config)`);
  }
  const url = flags.url ?? env.SPARK_URL ?? file.url ?? DEFAULT_URL;
  const from = flags.url ? '--url' : env.SPARK_URL ? 'SPARK_URL' : `config file ${configPath}`;
  const checked = urlSchema.safeParse(url);
  if (!checked.success) {
    throw new CliError(
      EXIT.usage,
      `invalid controller URL '${url}' (from ${from}): expected http(s)://HOST[:PORT]`,
    );
  }
  // sparkctl adds /api/v1 itself: a URL naming the API path would ask for /api/api/v1/…
  const parsedUrl = new URL(url);
  const path = parsedUrl.pathname.replace(/\/+$/, '');
  if (/\/api(\/v\d+)?$/.test(path)) {
    throw new CliError(
      EXIT.usage,
      `invalid controller URL '${url}' (from ${from}): it must be the controller's root URL, e.g. ${parsedUrl.origin}${path.replace(/\/api(\/v\d+)?$/, '')}, without ${/\/api(\/v\d+)?$/.exec(path)![0]} (sparkctl adds /api/v1 itself)`,
    );
  }
  const [token, tokenSource] = flags.token
    ? [flags.token, 'flag' as const]
    : env.SPARK_TOKEN
      ? [env.SPARK_TOKEN, 'SPARK_TOKEN' as const]
      : file.token
        ? [file.token, 'config file' as const]
        : [undefined, 'none' as const];
  const pollRaw = env.SPARKCTL_POLL_MS;
  const pollMs = pollRaw ? Number(pollRaw) : 1000;
  if (!Number.isInteger(pollMs) || pollMs < 50) {
    throw new CliError(EXIT.usage, `invalid SPARKCTL_POLL_MS '${pollRaw}': expected milliseconds ≥ 50`);
  }
  return { url: url.replace(/\/+$/, ''), token, tokenSource, configPath, pollMs, env };
}
