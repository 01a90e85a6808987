import { existsSync, readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { parseDuration } from '../../cli/format.ts';
import { ConfigError, parseConfigText } from '../../core/config.ts';
import { DEFAULT_SECRETS_FILE } from '../../functions/secrets-file.ts';

/** Exit codes of `create-app` (the admin script's, plus a timeout). */
export const EXIT = { ok: 0, failed: 1, usage: 2, github: 3, timeout: 8, interrupted: 130 } as const;

export const USAGE =
  'usage: npm run admin -- create-app (--org ORG | --user) --public-url https://CONTROLLER [--runner-scope org|repo] [--name NAME] [--secrets-file spark.secrets.env] [--port 0] [--github-url https://github.com] [--api-url https://api.github.com] [--timeout 60m] [--force]';

/** A failure the operator can fix before anything is created: one line and an exit code. */
export class CreateAppError extends Error {
  override name = 'CreateAppError';
  constructor(
    readonly exitCode: number,
    message: string,
  ) {
    super(message);
  }
}

export interface CreateAppOptions {
  /** Where the App is registered: an organization, or the signed-in user's own account. */
  account: { kind: 'org'; org: string } | { kind: 'user' };
  /** The controller's public URL (https, or http on loopback), without a trailing slash. */
  publicUrl: string;
  runnerScope: 'org' | 'repo';
  /** The App's name on GitHub's form (at most 34 characters, unique across GitHub). */
  name: string;
  /** Absolute path of the secrets file `npm start` reads. */
  secretsFile: string;
  /** Port of the local setup page on 127.0.0.1 (0: any free one). */
  port: number;
  /** GitHub's web origin (the new-App form), e.g. https://github.com or https://HOST for GHES. */
  githubUrl: string;
  /** GitHub's REST base URL (the code's conversion). */
  apiUrl: string;
  timeoutMs: number;
  /** Replace an App already in the secrets file. */
  force: boolean;
}

/** GitHub's limit on App names (docs.github.com "Registering a GitHub App"). */
export const APP_NAME_MAX = 34;

/** The App's name without --name: this, then the organization's name. */
export const DEFAULT_NAME = 'Spark Controller';

const LOOPBACK = new Set(['127.0.0.1', 'localhost', '[::1]']);

/**
 * The controller's public URL as the App's webhook and setup URL need it: https, or plain http
 * only on loopback (a controller GitHub cannot reach over the internet is only good for trying
 * the flow); no credentials, query or fragment. Returns it without a trailing slash.
 */
export function checkPublicUrl(raw: string): string {
  if (!URL.canParse(raw)) throw new CreateAppError(EXIT.usage, `invalid --public-url '${raw}': not a URL`);
  const u = new URL(raw);
  const loopback = LOOPBACK.has(u.hostname);
  if (u.protocol !== 'https:' && !(u.protocol === 'http:' && loopback))
    throw new CreateAppError(
      EXIT.usage,
      `invalid --public-url '${raw}': GitHub sends webhooks with the App's secret to it, so it must be https (plain http only on loopback)`,
    );
  if (u.username || u.password || u.search || u.hash)
    throw new CreateAppError(
      EXIT.usage,
      `invalid --public-url '${u.origin}${u.pathname}…': no credentials, query or fragment`,
    );
  return `${u.origin}${u.pathname}`.replace(/\/+$/, '');
}

/** GitHub's web origin for a REST base URL: api.github.com → github.com; GHES https://HOST/api/v3 → https://HOST. */
export function webUrlFor(apiUrl: string): string | null {
  const u = new URL(apiUrl);
  if (u.hostname === 'api.github.com') return 'https://github.com';
  if (/\/api\/v3\/?$/.test(u.pathname)) return `${u.origin}${u.pathname.replace(/\/api\/v3\/?$/, '')}`;
  return null;
}

interface ConfigView {
  runnerScope: 'org' | 'repo' | null;
  apiUrl: string | null;
  source: string | null;
}

/** What the controller's config says about the App (SPARK_CONFIG, else ./spark.config.json). */
function readConfig(env: Record<string, string | undefined>): ConfigView {
  const path = env.SPARK_CONFIG ?? (existsSync('spark.config.json') ? 'spark.config.json' : null);
  if (!path) return { runnerScope: null, apiUrl: null, source: null };
  if (!existsSync(path)) throw new CreateAppError(EXIT.usage, `config file ${path} not found (SPARK_CONFIG)`);
  try {
    const cfg = parseConfigText(readFileSync(resolve(path), 'utf8'), path);
    return { runnerScope: cfg.github.runnerScope, apiUrl: cfg.github.apiUrl, source: path };
  } catch (e) {
    if (e instanceof ConfigError) throw new CreateAppError(EXIT.usage, e.message.replace(/\n\s*/g, ' '));
    throw e;
  }
}

/** Reads and checks the arguments; nothing is created and no port is opened here. */
export function parseCreateAppOptions(
  argv: string[],
  env: Record<string, string | undefined>,
): CreateAppOptions {
  let values: ReturnType<typeof parse>['values'];
  try {
    const parsed = parse(argv);
    if (parsed.positionals.length) throw new Error(`unexpected argument '${parsed.positionals[0]}'`);
    values = parsed.values;
  } catch (e) {
    throw new CreateAppError(EXIT.usage, `${(e as Error).message}; ${USAGE}`);
  }
  if (Boolean(values.org) === Boolean(values.user))
    throw new CreateAppError(
      EXIT.usage,
      `name the account that will own the App: --org ORG (the organization whose runner group the Spark runners join) or --user; ${USAGE}`,
    );
  const org = values.org;
  if (org && !/^[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}$/.test(org))
    throw new CreateAppError(EXIT.usage, `invalid --org '${org}': not a GitHub organization name`);

  const rawPublic = values['public-url'] ?? env.SPARK_PUBLIC_URL;
  if (!rawPublic)
    throw new CreateAppError(
      EXIT.usage,
      `the App's webhook URL comes from the controller's public URL: give --public-url https://CONTROLLER (or set SPARK_PUBLIC_URL); ${USAGE}`,
    );
  const publicUrl = checkPublicUrl(rawPublic);

  const cfg = readConfig(env);
  const asked = values['runner-scope'];
  if (asked !== undefined && asked !== 'org' && asked !== 'repo')
    throw new CreateAppError(EXIT.usage, `invalid --runner-scope '${asked}': org or repo`);
  if (asked && cfg.runnerScope && asked !== cfg.runnerScope)
    throw new CreateAppError(
      EXIT.usage,
      `--runner-scope ${asked} does not match github.runnerScope "${cfg.runnerScope}" in ${cfg.source}: the controller could not use that App; change the config first (docs/github-app.md "Minimum permissions")`,
    );
  const runnerScope = (asked ?? cfg.runnerScope ?? 'org') as 'org' | 'repo';
  if (runnerScope === 'org' && !org)
    throw new CreateAppError(
      EXIT.usage,
      'organization runners (github.runnerScope "org", the default) need an organization: give --org ORG, or use --runner-scope repo for repository runners (docs/github-app.md)',
    );

  // App names are unique across GitHub: the organization's name makes the default one its own
  const name = (values.name ?? `${DEFAULT_NAME}${org ? ` ${org}` : ''}`.slice(0, APP_NAME_MAX)).trim();
  if (!name || name.length > APP_NAME_MAX)
    throw new CreateAppError(
      EXIT.usage,
      `invalid --name '${name}': GitHub takes 1 to ${APP_NAME_MAX} characters, unique across GitHub`,
    );

  const apiUrl = (
    values['api-url'] ??
    env.SPARK_GITHUB_API_URL ??
    cfg.apiUrl ??
    'https://api.github.com'
  ).replace(/\/+$/, '');
  if (!URL.canParse(apiUrl) || !/^https?:$/.test(new URL(apiUrl).protocol))
    throw new CreateAppError(EXIT.usage, `invalid --api-url '${apiUrl}': not an http(s) URL`);
  const githubUrl = (values['github-url'] ?? webUrlFor(apiUrl) ?? '').replace(/\/+$/, '');
  if (!githubUrl || !URL.canParse(githubUrl) || !/^https?:$/.test(new URL(githubUrl).protocol))
    throw new CreateAppError(
      EXIT.usage,
      `cannot tell GitHub's web address from the API URL ${apiUrl}: give --github-url https://HOST`,
    );

  const port = Number(values.port ?? 0);
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    throw new CreateAppError(EXIT.usage, `invalid --port '${values.port}': 0 to 65535 (0: any free port)`);
  const timeoutS = parseDuration(values.timeout ?? '60m');
  if (timeoutS == null || timeoutS < 1)
    throw new CreateAppError(EXIT.usage, `invalid --timeout '${values.timeout}': e.g. 60m or 90s`);

  const secretsFile = resolve(values['secrets-file'] ?? env.SPARK_SECRETS_FILE ?? DEFAULT_SECRETS_FILE);
  if (!existsSync(dirname(secretsFile)))
    throw new CreateAppError(EXIT.usage, `the folder of --secrets-file ${secretsFile} does not exist`);

  return {
    account: org ? { kind: 'org', org } : { kind: 'user' },
    publicUrl,
    runnerScope,
    name,
    secretsFile,
    port,
    githubUrl,
    apiUrl,
    timeoutMs: timeoutS * 1000,
    force: values.force ?? false,
  };
}

function parse(argv: string[]) {
  return parseArgs({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      org: { type: 'string' },
      user: { type: 'boolean' },
      'public-url': { type: 'string' },
      'runner-scope': { type: 'string' },
      name: { type: 'string' },
      'secrets-file': { type: 'string' },
      port: { type: 'string' },
      'github-url': { type: 'string' },
      'api-url': { type: 'string' },
      timeout: { type: 'string' },
      force: { type: 'boolean' },
    },
  });
}
