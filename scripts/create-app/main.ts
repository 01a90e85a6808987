/**
 * `npm run admin -- create-app` (or `sparkctl admin create-app`): creates the controller's GitHub
 * App through GitHub's App manifest flow, as Probot's setup does (probot/probot
 * src/manifest-creation.ts, src/apps/setup.ts), and stores its id, private key and webhook secret
 * in the secrets file `npm start` reads (docs/adr/0170-create-the-app-from-its-manifest.md).
 *
 *   1. a local page on 127.0.0.1 posts the shipped manifest, with this controller's URLs and a
 *      random `state`, to GitHub's new-App form for the organization (or the user);
 *   2. the person checks the name and creates the App; GitHub redirects the browser back to the
 *      local page with a temporary code and the `state`;
 *   3. the code is exchanged once, within the hour, with `POST /app-manifests/{code}/conversions`.
 * https://docs.github.com/en/apps/sharing-github-apps/registering-a-github-app-from-a-manifest
 *
 * Nothing secret is printed: the key and the webhook secret go to the file (mode 0600) only.
 * Exit codes: 0 created · 2 usage (nothing created) · 3 GitHub refused or did not answer the code ·
 * 8 no App created in time · 130 interrupted · 1 bug.
 */
import { randomBytes } from 'node:crypto';
import { relative } from 'node:path';
import { humanDuration } from '../../cli/format.ts';
import { convertCode, toPkcs8 } from './conversion.ts';
import { buildManifest, manifestPathFor, newAppFormUrl } from './manifest.ts';
import { CreateAppError, type CreateAppOptions, EXIT, parseCreateAppOptions } from './options.ts';
import { checkSecretsFile, writeSecrets } from './secrets.ts';
import { type Created, startSetupServer } from './setup-server.ts';

export interface CreateAppIo {
  out(text: string): void;
  err(text: string): void;
}

/** Runs `create-app ARGS…`; returns the exit code. */
export async function runCreateApp(
  argv: string[],
  io: CreateAppIo,
  env: Record<string, string | undefined>,
): Promise<number> {
  try {
    const opts = parseCreateAppOptions(argv, env);
    checkSecretsFile(opts.secretsFile, opts.force);
    return await createApp(opts, io);
  } catch (e) {
    if (e instanceof CreateAppError) {
      io.err(`create-app: ${e.message}`);
      return e.exitCode;
    }
    io.err(`create-app: internal error: ${(e as Error)?.stack ?? e}`);
    return EXIT.failed;
  }
}

async function createApp(opts: CreateAppOptions, io: CreateAppIo): Promise<number> {
  const state = randomBytes(20).toString('hex');
  const formUrl = newAppFormUrl(opts, state);
  const accountText =
    opts.account.kind === 'org' ? `the organization ${opts.account.org}` : 'your user account';
  let manifestPermissions: Record<string, string> = {};
  const server = await startSetupServer({
    port: opts.port,
    formUrl,
    accountText,
    state,
    manifest: (callbackUrl) => {
      const m = buildManifest(opts, callbackUrl);
      manifestPermissions = m.default_permissions;
      return m;
    },
    onCode: (code) => store(opts, code, manifestPermissions, io),
  });
  const stop = new AbortController();
  const interrupt = () => stop.abort();
  process.once('SIGINT', interrupt);
  process.once('SIGTERM', interrupt);
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    io.out(
      `create-app: a GitHub App "${opts.name}" for ${accountText}, from ${manifestPathFor(opts.runnerScope)}`,
    );
    io.out(`  webhook URL   ${opts.publicUrl}/github/webhooks`);
    io.out(`  secrets file  ${opts.secretsFile}`);
    io.out(
      `Open ${server.url} in a browser signed in to GitHub${opts.account.kind === 'org' ? ` as an owner of ${opts.account.org}` : ''}:`,
    );
    io.out(
      "  it sends the manifest to GitHub's new-App form; create the App there and GitHub sends you back.",
    );
    io.out(
      `  (from another machine: ssh -L ${new URL(server.url).port}:127.0.0.1:${new URL(server.url).port} <this host>, then open the same URL there)`,
    );
    io.out(`Waiting for GitHub (up to ${humanDuration(opts.timeoutMs / 1000)}; Ctrl-C to stop)…`);
    const timedOut = new Promise<'timeout'>((r) => {
      timer = setTimeout(() => r('timeout'), opts.timeoutMs);
    });
    const interrupted = new Promise<'interrupted'>((r) =>
      stop.signal.addEventListener('abort', () => r('interrupted')),
    );
    const outcome = await Promise.race([server.done, timedOut, interrupted]);
    if (outcome === 'timeout') {
      io.err(
        `create-app: no App was created within ${humanDuration(opts.timeoutMs / 1000)} (GitHub's code lives one hour); run create-app again`,
      );
      return EXIT.timeout;
    }
    if (outcome === 'interrupted') {
      io.err('create-app: interrupted; nothing was stored');
      return EXIT.interrupted;
    }
    nextSteps(opts, outcome, io);
    return EXIT.ok;
  } finally {
    clearTimeout(timer);
    process.off('SIGINT', interrupt);
    process.off('SIGTERM', interrupt);
    await server.close();
  }
}

/** Exchanges the code and writes the secrets file; what the page and the terminal then show. */
async function store(
  opts: CreateAppOptions,
  code: string,
  asked: Record<string, string>,
  io: CreateAppIo,
): Promise<Created> {
  const app = await convertCode(opts.apiUrl, code);
  const values: Record<string, string> = {
    SPARK_GITHUB_APP_ID: String(app.id),
    SPARK_GITHUB_PRIVATE_KEY: toPkcs8(app.pem),
  };
  if (app.webhook_secret) values.SPARK_WEBHOOK_SECRET = app.webhook_secret;
  try {
    writeSecrets(opts.secretsFile, values, [
      `GitHub App "${app.name}" (id ${app.id}, ${app.html_url}), created by create-app ${new Date().toISOString()}`,
      'npm start reads this file; Workers: npx wrangler secret bulk <this file>. Keep it mode 0600, out of git.',
    ]);
  } catch (e) {
    // GitHub showed the key this once: the App is of no use now
    throw new CreateAppError(
      EXIT.failed,
      `the App "${app.name}" (id ${app.id}) was created but ${opts.secretsFile} could not be written (${(e as Error).message}): delete the App (${app.html_url}, Advanced → Delete) and run create-app again`,
    );
  }
  io.out(
    `Created the GitHub App "${app.name}" (id ${app.id}, ${app.html_url})${app.owner?.login ? `, owned by ${app.owner.login}` : ''}.`,
  );
  io.out(`Stored ${Object.keys(values).join(', ')} in ${opts.secretsFile} (mode 0600).`);
  const differs = Object.keys({ ...asked, ...app.permissions }).filter(
    (k) => asked[k] !== app.permissions[k],
  );
  if (differs.length)
    io.err(
      `create-app: warning: GitHub created the App with other permissions than the manifest asked for (${differs.map((k) => `${k}: ${app.permissions[k] ?? 'none'} instead of ${asked[k] ?? 'none'}`).join(', ')}); check them in the App's settings`,
    );
  if (!app.webhook_secret)
    throw new CreateAppError(
      EXIT.github,
      `GitHub created the App without a webhook secret: set one in the App's settings (Webhook secret) and add SPARK_WEBHOOK_SECRET to ${opts.secretsFile}`,
    );
  return {
    name: app.name,
    id: app.id,
    installUrl: `${app.html_url}/installations/new`,
    secretsFile: opts.secretsFile,
  };
}

function nextSteps(opts: CreateAppOptions, created: Created, io: CreateAppIo): void {
  const rel = relative(process.cwd(), opts.secretsFile);
  const isDefault = rel === 'spark.secrets.env';
  io.out('Next:');
  io.out(`  1. Install the App on the approved repositories only: ${created.installUrl}`);
  io.out(
    `  2. Start the controller: ${isDefault ? 'npm start (it reads ./spark.secrets.env)' : `SPARK_SECRETS_FILE=${opts.secretsFile} npm start`}`,
  );
  io.out(`     on Cloudflare Workers: npx wrangler secret bulk ${opts.secretsFile}`);
  io.out('  3. Enable each repository: npx sparkctl repo enable OWNER/NAME (docs/github-app.md)');
}
