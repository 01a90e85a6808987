import { type ChildProcess, spawn } from 'node:child_process';
import { createHmac, createPrivateKey, createPublicKey } from 'node:crypto';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseEnv } from 'node:util';
import { type BrowserContext, chromium } from 'playwright-core';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { freePort, REPO_ROOT, waitFor } from '../../scripts/sim/doubles/index.ts';
import { type FakeGitHubWeb, startFakeGitHubWeb } from '../../scripts/sim/fake-github/app-manifest-flow.ts';
import { type FakeGitHub, startFakeGitHub } from '../../scripts/sim/fake-github/server.ts';
import { tempDir } from '../../scripts/sim/ledger.ts';
import { firstForm } from '../helpers/html-form.ts';

/**
 * Creating the App is one command (docs/github-app.md "Create the App"): `sparkctl admin
 * create-app` as a child process, a browser (Debian Chromium, or fetch playing one) through GitHub's
 * new-App form on the fake GitHub, the code back on the loopback page and exchanged once; then
 * `npm start`'s entry reads the secrets file and GitHub accepts the controller's JWT, and its
 * webhook endpoint verifies deliveries with the App's secret. Nothing secret is ever printed.
 */

const SHIPPED = (file: string) =>
  JSON.parse(readFileSync(join(REPO_ROOT, 'docs', file), 'utf8')) as {
    default_permissions: Record<string, string>;
    default_events: string[];
  };
const PUBLIC_URL = 'https://spark.example.org';
/** tsx of the checkout (the processes run in a folder of their own, as an operator's would). */
const TSX = pathToFileURL(createRequire(join(REPO_ROOT, 'package.json')).resolve('tsx')).href;

interface Run {
  proc: ChildProcess;
  lines: string[];
  stderr: () => string;
  stdout: () => string;
  exited: Promise<number | null>;
}

const running: ChildProcess[] = [];

/** A child process of the checkout, its output collected; killed after the test if still running. */
function start(args: string[], cwd: string, env: Record<string, string> = {}): Run {
  const proc = spawn(process.execPath, ['--import', TSX, ...args], {
    cwd,
    env: { PATH: process.env.PATH ?? '', HOME: cwd, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  running.push(proc);
  let out = '';
  let err = '';
  const lines: string[] = [];
  proc.stdout!.on('data', (b: Buffer) => {
    out += b.toString();
    lines.splice(0, lines.length, ...out.split('\n'));
  });
  proc.stderr!.on('data', (b: Buffer) => {
    err += b.toString();
  });
  const exited = new Promise<number | null>((r) => proc.once('close', (code) => r(code)));
  return { proc, lines, stderr: () => err, stdout: () => out, exited };
}

/** `sparkctl admin create-app …` from the checkout (what `npx sparkctl` runs there). */
function createApp(cwd: string, args: string[]): Run {
  return start([join(REPO_ROOT, 'cli', 'bundle-entry.ts'), 'admin', 'create-app', ...args], cwd);
}

/** The setup page the command says to open. */
async function pageUrl(run: Run): Promise<string> {
  const printed = waitFor(
    'the command to print its setup page',
    () => run.lines.map((l) => /^Open (http:\/\/127\.0\.0\.1:\d+\/) /.exec(l)?.[1]).find(Boolean),
    30_000,
  );
  const exited = run.exited.then((code) => {
    throw new Error(`create-app exited ${code} first: ${run.stdout()}${run.stderr()}`);
  });
  exited.catch(() => undefined);
  printed.catch(() => undefined);
  return Promise.race([printed, exited]);
}

function controllerConfig(dir: string, gh: FakeGitHub, over: Record<string, unknown> = {}) {
  writeFileSync(
    join(dir, 'spark.config.json'),
    JSON.stringify({
      ledgerUrl: `file:${join(dir, 'spark.db')}`,
      github: { apiUrl: gh.url, runnerGroupId: 2, ...over },
    }),
  );
}

let gh: FakeGitHub;
let web: FakeGitHubWeb;
let dir: { dir: string; cleanup: () => void };

beforeEach(async () => {
  gh = await startFakeGitHub();
  web = await startFakeGitHubWeb(gh);
  dir = tempDir('spark-create-app-');
});
afterEach(async () => {
  for (const p of running.splice(0)) if (p.exitCode == null && p.signalCode == null) p.kill('SIGKILL');
  await web.close();
  await gh.close();
  dir.cleanup();
});

/** Every secret the flow handled: none may appear in what the command printed. */
function secretsOf(app: { webhookSecret: string | null }, pem: string): string[] {
  const code = gh.requests
    .map((r) => /^\/app-manifests\/([^/]+)\/conversions$/.exec(r.path)?.[1])
    .filter((x): x is string => Boolean(x));
  expect(code).toHaveLength(1);
  const keyLines = pem.split('\n').filter((l) => l && !l.startsWith('-----'));
  return [app.webhookSecret!, ...code, ...keyLines, 'PRIVATE KEY'];
}

describe('create-app with a real browser (Chromium)', () => {
  let browser: BrowserContext;
  let profile: { dir: string; cleanup: () => void };
  beforeAll(async () => {
    profile = tempDir('spark-chromium-create-app-');
    browser = await chromium.launchPersistentContext(profile.dir, {
      executablePath: '/usr/bin/chromium',
      headless: true,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-background-networking',
        '--disable-gpu',
        '--no-first-run',
      ],
    });
  });
  afterAll(async () => {
    await browser?.close();
    profile?.cleanup();
  });

  it('organization App: form, redirect, conversion; secrets 0600; the controller starts with them and GitHub accepts its JWT', async () => {
    controllerConfig(dir.dir, gh);
    const run = createApp(dir.dir, ['--org', 'acme', '--public-url', PUBLIC_URL, '--github-url', web.url]);
    const url = await pageUrl(run);
    // the line arrived while the command still waits: sparkctl relays it as it comes
    expect(run.proc.exitCode).toBeNull();

    const page = await browser.newPage();
    await page.goto(url);
    // the page posted the manifest by itself: GitHub's form, the name to check
    await page.waitForURL(`${web.url}/organizations/acme/settings/apps/new?state=*`);
    expect(await page.inputValue('#name')).toBe('Spark Controller acme');
    expect(await page.textContent('#hook')).toBe(`${PUBLIC_URL}/github/webhooks`);
    await page.click('button[type=submit]');
    await page.waitForSelector('#install');
    expect(await page.textContent('h1')).toBe('Created the GitHub App “Spark Controller acme”');
    expect(await run.exited).toBe(0);

    const [received] = web.received;
    const app = [...gh.apps.values()].find((a) => a.name === 'Spark Controller acme')!;
    expect(received).toMatchObject({
      owner: 'acme',
      manifest: {
        name: 'Spark Controller acme',
        url: PUBLIC_URL,
        hook_attributes: { url: `${PUBLIC_URL}/github/webhooks`, active: true },
        setup_url: `${PUBLIC_URL}/`,
        public: false,
        default_permissions: SHIPPED('github-app-manifest.json').default_permissions,
        default_events: SHIPPED('github-app-manifest.json').default_events,
      },
    });
    // the redirect came back to the page with the state the command made up
    const redirect = (received!.manifest as { redirect_url: string }).redirect_url;
    expect(redirect).toBe(`${url}callback`);
    expect(received!.state).toMatch(/^[0-9a-f]{40}$/);

    // the secrets file: 0600, the App's id, its key (as PKCS#8) and its webhook secret
    const file = join(dir.dir, 'spark.secrets.env');
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const vars = parseEnv(readFileSync(file, 'utf8'));
    expect(Object.keys(vars).sort()).toEqual([
      'SPARK_GITHUB_APP_ID',
      'SPARK_GITHUB_PRIVATE_KEY',
      'SPARK_WEBHOOK_SECRET',
    ]);
    expect(vars.SPARK_GITHUB_APP_ID).toBe(String(app.id));
    expect(vars.SPARK_WEBHOOK_SECRET).toBe(app.webhookSecret);
    expect(vars.SPARK_GITHUB_PRIVATE_KEY).toMatch(/^-----BEGIN PRIVATE KEY-----\n/);
    expect(
      createPublicKey(createPrivateKey(vars.SPARK_GITHUB_PRIVATE_KEY!)).export({
        type: 'spki',
        format: 'pem',
      }),
    ).toBe(app.publicKey);

    // nothing secret printed; the terminal says what was made and what to do next
    const printed = run.stdout() + run.stderr();
    for (const secret of secretsOf(app, vars.SPARK_GITHUB_PRIVATE_KEY!))
      expect(printed).not.toContain(secret);
    expect(run.stdout()).toContain(
      `Created the GitHub App "Spark Controller acme" (id ${app.id}, https://github.com/apps/spark-controller-acme), owned by acme.`,
    );
    expect(run.stdout()).toContain('https://github.com/apps/spark-controller-acme/installations/new');
    expect(run.stdout()).toContain('npm start (it reads ./spark.secrets.env)');
    expect(run.stdout()).toContain(`npx wrangler secret bulk ${file}`);
    expect(run.stderr()).toBe('');

    // `npm start` in the same folder: the secrets file is all the App configuration it gets
    const port = await freePort();
    const ctl = start([join(REPO_ROOT, 'functions', 'node.ts')], dir.dir, { SPARK_PORT: String(port) });
    const base = `http://127.0.0.1:${port}`;
    await waitFor(
      'the controller to read its delivery log with the new App',
      () => {
        if (ctl.proc.exitCode != null) throw new Error(`controller exited: ${ctl.stderr()}`);
        return gh.requests.find((r) => r.path.startsWith('/app/hook/deliveries') && r.auth === 'app');
      },
      30_000,
    ).then((r) => expect(r.status).toBe(200));
    expect(gh.requests.filter((r) => r.status === 401)).toEqual([]);
    const ping = (secret: string) => {
      const body = JSON.stringify({ zen: 'Keep it logically awesome.', hook_id: 1 });
      return fetch(`${base}/github/webhooks`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-github-event': 'ping',
          'x-github-delivery': `d-${Date.now()}`,
          'x-hub-signature-256': `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`,
        },
        body,
      });
    };
    expect((await ping(app.webhookSecret!)).status).toBe(200);
    expect((await ping('not-the-secret')).status).toBe(401);
    ctl.proc.kill('SIGTERM');
    expect(await ctl.exited).toBe(0);
    expect(ctl.stderr()).not.toContain(app.webhookSecret!);
  });
});

describe('create-app with fetch playing the browser', () => {
  /** Page → GitHub's form → "Create GitHub App": the redirect GitHub answers, not yet followed. */
  async function throughGitHub(url: string, name?: string): Promise<URL> {
    const setup = await fetch(url);
    expect(setup.headers.get('content-security-policy')).toContain(`form-action ${web.url}`);
    const toGitHub = firstForm(await setup.text(), url);
    const form = await fetch(toGitHub.action, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams(toGitHub.fields),
    });
    const create = firstForm(await form.text(), toGitHub.action);
    const created = await fetch(create.action, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ ...create.fields, ...(name ? { name } : {}) }),
      redirect: 'manual',
    });
    expect(created.status).toBe(302);
    return new URL(created.headers.get('location')!);
  }

  it("repository runners for a user account: the repo-scope manifest; a redirect with another state is refused; the file's other variables are kept", async () => {
    controllerConfig(dir.dir, gh, { runnerScope: 'repo', runnerGroupId: undefined });
    const file = join(dir.dir, 'secrets', 'app.env');
    const { mkdirSync } = await import('node:fs');
    mkdirSync(join(dir.dir, 'secrets'));
    writeFileSync(file, 'SPARK_LEDGER_AUTH_TOKEN="kept-token"\n', { mode: 0o644 });
    const run = start(
      [
        join(REPO_ROOT, 'scripts', 'admin.ts'),
        'create-app',
        '--user',
        '--public-url',
        'http://127.0.0.1:8787',
        '--github-url',
        web.url,
        '--secrets-file',
        file,
      ],
      dir.dir,
    );
    const url = await pageUrl(run);
    const back = await throughGitHub(url, 'Spark Controller octocat');
    expect(`${back.origin}${back.pathname}`).toBe(`${url}callback`);
    // GitHub's code with a state this run did not send: refused, nothing exchanged or written
    const forged = new URL(back);
    forged.searchParams.set('state', 'f'.repeat(40));
    const refused = await fetch(forged);
    expect(refused.status).toBe(400);
    expect(await refused.text()).toContain('This redirect is not for this run');
    // a page reached under another host name (DNS rebinding) is refused
    const { request } = await import('node:http');
    const status = await new Promise<number>((r) =>
      request(url, { headers: { host: `evil.example:${new URL(url).port}` } }, (res) =>
        r(res.statusCode!),
      ).end(),
    );
    expect(status).toBe(421);
    expect(gh.calls('POST', /conversions$/)).toEqual([]);
    expect(readFileSync(file, 'utf8')).toBe('SPARK_LEDGER_AUTH_TOKEN="kept-token"\n');

    const done = await fetch(back);
    expect(done.status).toBe(200);
    expect(done.headers.get('referrer-policy')).toBe('no-referrer');
    expect(await run.exited).toBe(0);
    const app = [...gh.apps.values()].find((a) => a.name === 'Spark Controller octocat')!;
    expect(app.owner).toEqual({ login: 'octocat', type: 'User' });
    expect(app.permissions).toEqual(SHIPPED('github-app-manifest.repo-scope.json').default_permissions);
    expect(app.hookUrl).toBe('http://127.0.0.1:8787/github/webhooks');
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const vars = parseEnv(readFileSync(file, 'utf8'));
    expect(vars).toMatchObject({
      SPARK_LEDGER_AUTH_TOKEN: 'kept-token',
      SPARK_GITHUB_APP_ID: String(app.id),
    });
    expect(run.stdout()).toContain(`SPARK_SECRETS_FILE=${file} npm start`);
  });

  it('a code GitHub no longer answers (used already): exit 3, the page says why, nothing is written', async () => {
    controllerConfig(dir.dir, gh);
    const run = createApp(dir.dir, ['--org', 'acme', '--public-url', PUBLIC_URL, '--github-url', web.url]);
    const url = await pageUrl(run);
    const back = await throughGitHub(url);
    // someone exchanged the code first: GitHub answers it once
    const stolen = await fetch(`${gh.url}/app-manifests/${back.searchParams.get('code')}/conversions`, {
      method: 'POST',
    });
    expect(stolen.status).toBe(201);
    const res = await fetch(back);
    expect(res.status).toBe(502);
    expect(await res.text()).toContain('unknown, already used, or older than an hour');
    expect(await run.exited).toBe(3);
    expect(run.stderr()).toMatch(
      /^create-app: GitHub answered 404 for the code: it is unknown, already used, or older than an hour/m,
    );
    expect(() => statSync(join(dir.dir, 'spark.secrets.env'))).toThrow();
  });
});
