import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { ConfigError } from '../core/config.ts';
import { createApiToken, SCOPES, type Scope } from '../functions/auth/tokens.ts';
import { ApiError } from '../functions/errors.ts';
import { silentLogger } from '../functions/log.ts';
import { openNodeLedger } from '../functions/node-server.ts';
import { settingsFromEnv } from '../functions/settings.ts';
import { CliError, EXIT, usageError } from './errors.ts';

/**
 * `sparkctl admin token create`: the bootstrap path for the very first operate token. It opens
 * the ledger file directly (same settings as `npm start`: SPARK_CONFIG / ./spark.config.json,
 * SPARK_LEDGER_URL, or --ledger), so it works before any token exists.
 */
export async function adminCreateToken(opts: {
  name: string | undefined;
  scopes: string | undefined;
  ledger: string | undefined;
  env: Record<string, string | undefined>;
}): Promise<{ id: string; token: string; name: string; scopes: Scope[]; ledgerUrl: string }> {
  if (!opts.name || !opts.scopes) {
    throw usageError(
      'usage: sparkctl admin token create --name NAME --scopes operate[,emergency] [--ledger file:./data/spark.db]',
    );
  }
  const scopes = opts.scopes
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  const bad = scopes.filter((s) => !(SCOPES as readonly string[]).includes(s));
  if (bad.length || scopes.length === 0) {
    throw usageError(`invalid --scopes '${opts.scopes}': use a comma list of ${SCOPES.join(', ')}`);
  }
  if (!/^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/.test(opts.name)) {
    throw usageError(`invalid --name '${opts.name}': letters, digits, "_", "." or "-"`);
  }
  const env: Record<string, string | undefined> = {
    ...opts.env,
    ...(opts.ledger ? { SPARK_LEDGER_URL: opts.ledger } : {}),
  };
  const configPath = env.SPARK_CONFIG ?? (existsSync('spark.config.json') ? 'spark.config.json' : null);
  let settings: ReturnType<typeof settingsFromEnv>;
  try {
    const configText = configPath
      ? { text: readFileSync(resolve(configPath), 'utf8'), source: configPath }
      : null;
    settings = settingsFromEnv(env, configText);
  } catch (e) {
    if (e instanceof ConfigError) throw new CliError(EXIT.usage, e.message.replace(/\n\s*/g, ' '));
    if ((e as NodeJS.ErrnoException).code === 'ENOENT')
      throw new CliError(EXIT.usage, `config file ${configPath} not found (SPARK_CONFIG)`);
    throw e;
  }
  let ledger: Awaited<ReturnType<typeof openNodeLedger>>;
  try {
    ledger = await openNodeLedger(settings, { log: silentLogger });
  } catch (e) {
    throw new CliError(
      EXIT.unreachable,
      `cannot open the ledger ${settings.ledgerUrl}: ${(e as Error).message}`,
    );
  }
  try {
    const created = await createApiToken(
      ledger,
      { name: opts.name, scopes: scopes as Scope[] },
      'admin:local',
    );
    return { ...created, ledgerUrl: settings.ledgerUrl };
  } catch (e) {
    if (e instanceof ApiError) throw new CliError(EXIT.usage, e.message);
    throw e;
  } finally {
    ledger.store.close();
  }
}
