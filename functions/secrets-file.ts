import { existsSync, readFileSync, statSync } from 'node:fs';
import { parseEnv } from 'node:util';
import { ConfigError } from '../core/config.ts';

/**
 * The controller's secrets file on Node: `KEY="value"` lines (the dotenv format Node's
 * `util.parseEnv` and wrangler's `secret bulk` both read), written by `npm run admin -- create-app`
 * (docs/adr/0170-create-the-app-from-its-manifest.md) and read by `npm start` beside the
 * environment. Only the controller's own `SPARK_*` variables may stand in it, and only its owner
 * may read it.
 */

/** Where `npm start` looks when `SPARK_SECRETS_FILE` names no other file. */
export const DEFAULT_SECRETS_FILE = 'spark.secrets.env';

/**
 * The variables of the secrets file `path`, checked: readable by its owner only (mode 0600 or
 * stricter, where the platform has modes) and naming only `known` variables. A problem is a
 * {@link ConfigError} that says what to fix.
 */
export function readSecretsFile(path: string, known: readonly string[]): Record<string, string> {
  const st = statSync(path);
  if (process.platform !== 'win32' && (st.mode & 0o077) !== 0)
    throw new ConfigError(path, [
      `readable by others (mode ${(st.mode & 0o777).toString(8).padStart(4, '0')}): it holds the App's private key and the webhook secret; chmod 600 ${path}`,
    ]);
  const vars = parseEnv(readFileSync(path, 'utf8')) as Record<string, string>;
  const unknown = Object.keys(vars).filter((k) => !known.includes(k) || k === 'SPARK_SECRETS_FILE');
  if (unknown.length)
    throw new ConfigError(
      path,
      unknown.map(
        (k) => `${k}: not a variable the controller reads (README "Secrets and deployment settings")`,
      ),
    );
  return vars;
}

/**
 * The environment `npm start` runs with: the secrets file (`SPARK_SECRETS_FILE`, else
 * ./spark.secrets.env when present) under the process environment, which wins for any variable
 * set in both, as dotenv has it. `source` names the file read, or null.
 */
export function withSecretsFile(
  env: Record<string, string | undefined>,
  known: readonly string[],
): { env: Record<string, string | undefined>; source: string | null } {
  const named = env.SPARK_SECRETS_FILE;
  if (named && !existsSync(named))
    throw new ConfigError(named, [`file not found (SPARK_SECRETS_FILE=${named})`]);
  const path = named || (existsSync(DEFAULT_SECRETS_FILE) ? DEFAULT_SECRETS_FILE : null);
  if (!path) return { env, source: null };
  const fromFile = readSecretsFile(path, known);
  const merged: Record<string, string | undefined> = { ...fromFile };
  for (const [k, v] of Object.entries(env)) if (v !== undefined) merged[k] = v;
  return { env: merged, source: path };
}

/**
 * One `KEY="value"` line per entry, newlines written as `\n` inside double quotes (both
 * `util.parseEnv` and dotenv turn them back into newlines). Refuses a value the format cannot
 * carry back unchanged.
 */
export function formatSecretsFile(entries: Record<string, string>, header: string[] = []): string {
  const lines = header.map((h) => `# ${h}`);
  for (const [k, v] of Object.entries(entries)) {
    if (!/^[A-Z][A-Z0-9_]*$/.test(k)) throw new TypeError(`not a variable name: ${k}`);
    if (/["\\\r]/.test(v))
      throw new TypeError(`${k}: a value with quotes, backslashes or carriage returns cannot be kept`);
    lines.push(`${k}="${v.replace(/\n/g, '\\n')}"`);
  }
  return `${lines.join('\n')}\n`;
}
