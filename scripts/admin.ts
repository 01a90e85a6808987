/**
 * Controller-side admin commands, run on the controller's machine with the same settings as
 * `npm start` (SPARK_CONFIG or ./spark.config.json, SPARK_LEDGER_URL or --ledger, the App's
 * SPARK_GITHUB_APP_ID / SPARK_GITHUB_PRIVATE_KEY). `sparkctl admin` runs this script as a process
 * from the controller checkout.
 *
 * - `token create`: the very first operate token, straight in the ledger, before any
 *   token exists to call the API with;
 * - `create-app`: the GitHub App through the manifest flow, with its own options and exit codes
 *   (scripts/create-app/main.ts);
 * - `check [OWNER/NAME]`: the rollout readiness checks `enable` runs (docs/adr/0165-enable-is-a-gate.md),
 *   read-only, without the controller's API: the same function as `sparkctl doctor github`.
 *
 *   npm run admin -- token create --name NAME --scopes operate[,emergency] [--expires 30d] [--ledger URL] [--json]
 *   npm run admin -- create-app (--org ORG | --user) --public-url URL [...]   (scripts/create-app/main.ts)
 *   npm run admin -- check [OWNER/NAME] [--ledger URL] [--json]
 *
 * Exit codes: 0 created / every check passed · 1 a check failed (check), or a bug (printed as an
 * internal error) · 2 usage or configuration error · 3 the ledger cannot be opened.
 */
import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { parseDuration } from '../cli/format.ts';
import { printDoctor } from '../cli/readiness.ts';
import { ConfigError } from '../core/config.ts';
import { EXIT, ExitError } from '../core/errors.ts';
import type { DoctorResponse } from '../core/protocol/readiness.ts';
import { createApiToken, SCOPES, type Scope } from '../functions/auth/tokens.ts';
import { ApiError } from '../functions/errors.ts';
import { createGitHubClient } from '../functions/github/client.ts';
import { doctorReport } from '../functions/github/readiness.ts';
import { silentLogger } from '../functions/log.ts';
import { openNodeLedger } from '../functions/node-server.ts';
import { type Settings, settingsFromEnv } from '../functions/settings.ts';
import { scriptEnv } from './settings.ts';

const USAGE =
  'usage: sparkctl admin token create --name NAME --scopes operate[,emergency] [--expires 30d] [--ledger file:./data/spark.db] | sparkctl admin check [OWNER/NAME] [--ledger URL] [--json]';

/** A failure the operator can fix: one line on stderr and an exit code. */
export class AdminError extends ExitError {
  override name = 'AdminError';
}

export interface CreatedToken {
  id: string;
  token: string;
  name: string;
  scopes: Scope[];
  expiresAt: string | null;
  ledgerUrl: string;
}

/** The controller's settings (as `npm start` reads them) and its ledger. */
async function openLedger(opts: { ledger: string | undefined; env: Record<string, string | undefined> }) {
  const env: Record<string, string | undefined> = {
    ...opts.env,
    ...(opts.ledger ? { SPARK_LEDGER_URL: opts.ledger } : {}),
  };
  const configPath = env.SPARK_CONFIG ?? (existsSync('spark.config.json') ? 'spark.config.json' : null);
  let settings: Settings;
  try {
    const configText = configPath
      ? { text: readFileSync(resolve(configPath), 'utf8'), source: configPath }
      : null;
    settings = settingsFromEnv(env, configText);
  } catch (e) {
    if (e instanceof ConfigError) throw new AdminError(EXIT.usage, e.message.replace(/\n\s*/g, ' '));
    if ((e as NodeJS.ErrnoException).code === 'ENOENT')
      throw new AdminError(EXIT.usage, `config file ${configPath} not found (SPARK_CONFIG)`);
    throw e;
  }
  let ledger: Awaited<ReturnType<typeof openNodeLedger>>;
  try {
    ledger = await openNodeLedger(settings, { log: silentLogger });
  } catch (e) {
    throw new AdminError(
      EXIT.unreachable,
      `cannot open the ledger ${settings.ledgerUrl}: ${(e as Error).message}`,
    );
  }
  return { settings, ledger };
}

/**
 * `check [OWNER/NAME]`: the doctor's report (functions/github/readiness.ts `doctorReport`) with
 * the App's credentials from the controller's settings; reads only.
 */
export async function checkReadiness(opts: {
  repo: string | undefined;
  ledger: string | undefined;
  env: Record<string, string | undefined>;
}): Promise<DoctorResponse> {
  if (opts.repo != null && !/^[A-Za-z0-9_.-]{1,100}\/[A-Za-z0-9_.-]{1,100}$/.test(opts.repo))
    throw new AdminError(EXIT.usage, `invalid repository '${opts.repo}': expected OWNER/NAME`);
  const { settings, ledger } = await openLedger(opts);
  try {
    const client = createGitHubClient({
      apiUrl: ledger.config.github.apiUrl,
      appId: settings.githubAppId,
      privateKey: settings.githubPrivateKey,
      fetch,
      clock: ledger.clock,
    });
    return await doctorReport({ ledger, config: ledger.config, client }, opts.repo);
  } finally {
    ledger.store.close();
  }
}

/** Validates the request, opens the ledger with the controller's settings and creates the token. */
export async function createFirstToken(opts: {
  name: string | undefined;
  scopes: string | undefined;
  /** e.g. `30d`, `12h`; omitted = until revoked. */
  expires?: string | undefined;
  ledger: string | undefined;
  env: Record<string, string | undefined>;
}): Promise<CreatedToken> {
  if (!opts.name || !opts.scopes) throw new AdminError(EXIT.usage, USAGE);
  const expiresInS = opts.expires != null ? parseDuration(opts.expires) : undefined;
  if (expiresInS === null || (expiresInS != null && expiresInS < 60)) {
    throw new AdminError(
      EXIT.usage,
      `invalid --expires '${opts.expires}': use e.g. 30d, 12h or 1h30m (at least 60 seconds)`,
    );
  }
  const scopes = opts.scopes
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  const bad = scopes.filter((s) => !(SCOPES as readonly string[]).includes(s));
  if (bad.length || scopes.length === 0) {
    throw new AdminError(
      EXIT.usage,
      `invalid --scopes '${opts.scopes}': use a comma list of ${SCOPES.join(', ')}`,
    );
  }
  if (!/^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/.test(opts.name)) {
    throw new AdminError(EXIT.usage, `invalid --name '${opts.name}': letters, digits, "_", "." or "-"`);
  }
  const { settings, ledger } = await openLedger(opts);
  try {
    const created = await createApiToken(
      ledger,
      { name: opts.name, scopes: scopes as Scope[], expiresInS },
      'admin:local',
    );
    return { ...created, ledgerUrl: settings.ledgerUrl };
  } catch (e) {
    if (e instanceof ApiError) throw new AdminError(EXIT.usage, e.message);
    throw e;
  } finally {
    ledger.store.close();
  }
}

/** Runs one admin invocation with `argv` (after the script name); returns the exit code. */
export async function runAdmin(
  argv: string[],
  io: { out(text: string): void; err(text: string): void },
  env: Record<string, string | undefined>,
): Promise<number> {
  // the App manifest flow has its own options and exit codes (scripts/create-app/main.ts)
  if (argv[0] === 'create-app') {
    const { runCreateApp } = await import('./create-app/main.ts');
    return runCreateApp(argv.slice(1), io, env);
  }
  try {
    let parsed: ReturnType<typeof parse>;
    try {
      parsed = parse(argv);
    } catch (e) {
      throw new AdminError(EXIT.usage, `${(e as Error).message}; ${USAGE}`);
    }
    const { values, positionals } = parsed;
    if (positionals[0] === 'check' && positionals.length <= 2) {
      const report = await checkReadiness({ repo: positionals[1], ledger: values.ledger, env });
      if (values.json) io.out(JSON.stringify(report, null, 2));
      return printDoctor(values.json ? { out: () => undefined } : io, report, positionals[1]);
    }
    if (positionals[0] !== 'token' || positionals[1] !== 'create' || positionals.length > 2) {
      throw new AdminError(EXIT.usage, USAGE);
    }
    const created = await createFirstToken({
      name: values.name,
      scopes: values.scopes,
      expires: values.expires,
      ledger: values.ledger,
      env,
    });
    if (values.json) io.out(JSON.stringify(created, null, 2));
    else {
      io.out(
        `created token ${created.id} "${created.name}" with scopes ${created.scopes.join(', ')}${created.expiresAt ? `, expiring ${created.expiresAt}` : ''}`,
      );
      io.out(`token (shown once, store it now): ${created.token}`);
      io.out(`use it with: export SPARK_TOKEN=${created.token}`);
      io.out(`(written to ${created.ledgerUrl})`);
    }
    return EXIT.ok;
  } catch (e) {
    if (e instanceof AdminError) {
      io.err(`sparkctl: ${e.message}`);
      return e.exitCode;
    }
    io.err(`sparkctl: internal error: ${(e as Error)?.stack ?? e}`);
    return EXIT.failed;
  }
}

function parse(argv: string[]) {
  return parseArgs({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      name: { type: 'string' },
      scopes: { type: 'string' },
      expires: { type: 'string' },
      ledger: { type: 'string' },
      json: { type: 'boolean' },
    },
  });
}

// run as a process (npm run admin, sparkctl admin); importing it (tests) runs nothing
if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const code = await runAdmin(
    process.argv.slice(2),
    { out: (t) => process.stdout.write(`${t}\n`), err: (t) => process.stderr.write(`${t}\n`) },
    scriptEnv(),
  );
  process.stdout.write('', () => process.exit(code));
}
