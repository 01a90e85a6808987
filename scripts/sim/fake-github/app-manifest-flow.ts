import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FakeApp } from './model.ts';
import type { GitHubWorld } from './world.ts';

/**
 * GitHub's side of the App manifest flow, for the fake GitHub: the web page that takes a manifest
 * and creates the App (github.com, served here by {@link FakeGitHubWeb} on its own loopback
 * origin, as github.com is not api.github.com), and the REST step that turns the temporary code
 * into the App's credentials (`POST /app-manifests/{code}/conversions`, served by server.ts
 * through {@link convertManifestCode}). Each behaviour cites the page it plays (`FLOW` below).
 *
 * Not modelled: signing in (the browser is {@link FakeGitHubWeb.user}, who may create Apps for any
 * organization), GitHub's CSRF tokens on its own form, and installing the App from the browser
 * (a test installs it with `FakeGitHub.install`).
 */
export const FLOW = {
  manifest:
    'https://docs.github.com/en/apps/sharing-github-apps/registering-a-github-app-from-a-manifest (POST the JSON `manifest` parameter, with an optional `state`, to https://github.com/settings/apps/new or https://github.com/organizations/ORGANIZATION/settings/apps/new; the person can edit the name; "Create GitHub App" redirects to redirect_url?code=…&state=…; `url` and `hook_attributes.url` are required; all three steps within one hour)',
  registering:
    "https://docs.github.com/en/apps/creating-github-apps/registering-a-github-app/registering-a-github-app (the name cannot be longer than 34 characters, must be unique across GitHub; it is shown lowercased with spaces replaced by '-' and accents ignored)",
  conversion:
    "https://docs.github.com/en/rest/apps/apps#create-a-github-app-from-a-manifest (201 with the App, its client_id, client_secret, webhook_secret and pem; the description's example `pem` is a PKCS#1 'BEGIN RSA PRIVATE KEY'; 404 for a code it does not know)",
  oauthCode:
    'https://docs.github.com/en/apps/oauth-apps/building-oauth-apps/authorizing-oauth-apps (the manifest flow is "a handshaking process similar to the OAuth flow", whose temporary codes are used once)',
} as const;

/** How long a manifest code can be exchanged (FLOW.manifest: the whole flow within one hour). */
export const CODE_LIFETIME_MS = 3600_000;

/** What the manifest flow reads from a manifest (FLOW.manifest, "GitHub App Manifest parameters"). */
interface Manifest {
  name?: string;
  url?: string;
  description?: string;
  hook_attributes?: { url?: string; active?: boolean };
  redirect_url?: string;
  setup_url?: string;
  public?: boolean;
  default_permissions?: Record<string, string>;
  default_events?: string[];
}

const NAME_MAX = 34;

/** The problems GitHub's form would show for a manifest; empty when it can be used. */
export function manifestProblems(m: unknown): string[] {
  if (typeof m !== 'object' || m === null || Array.isArray(m)) return ['manifest is not a JSON object'];
  const x = m as Manifest;
  const problems: string[] = [];
  const isUrl = (v: unknown) =>
    typeof v === 'string' && URL.canParse(v) && /^https?:$/.test(new URL(v).protocol);
  if (!isUrl(x.url)) problems.push('url is required (the homepage of the App)');
  if (x.hook_attributes !== undefined && !isUrl(x.hook_attributes?.url))
    problems.push('hook_attributes.url is required');
  // where GitHub goes without a redirect_url is not documented: a fake cannot play it
  if (!isUrl(x.redirect_url)) problems.push('redirect_url: the fake plays the flow only with one');
  if (x.setup_url !== undefined && !isUrl(x.setup_url)) problems.push('setup_url is not a URL');
  if (x.name !== undefined && (typeof x.name !== 'string' || x.name.length > NAME_MAX))
    problems.push(`name is too long (maximum is ${NAME_MAX} characters)`);
  for (const [k, v] of Object.entries(x.default_permissions ?? {}))
    if (!['read', 'write', 'admin'].includes(v))
      problems.push(`default_permissions.${k}: ${v} is not an access level`);
  if (x.default_events !== undefined && !Array.isArray(x.default_events))
    problems.push('default_events is not a list');
  return problems;
}

/** The App's slug from its name (FLOW.registering: lowercase, spaces → "-", accents ignored). */
export function slugOf(name: string): string {
  return name
    .normalize('NFD')
    .replace(/\p{M}/gu, '')
    .toLowerCase()
    .replace(/\s+/g, '-')
    .replace(/[^a-z0-9-]/g, '')
    .replace(/-+/g, '-')
    .replace(/^-|-$/g, '');
}

/**
 * Registers the App the person confirmed on the form: a new id and key pair, the manifest's
 * permissions and events, a webhook secret GitHub generates ("GitHub creates a webhook secret for
 * the app automatically", FLOW.manifest), and a temporary code that answers its conversion once.
 */
export function createAppFromManifest(
  gh: GitHubWorld,
  manifest: Manifest,
  name: string,
  owner: FakeApp['owner'],
): { app: FakeApp; code: string } {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', {
    modulusLength: 2048,
    privateKeyEncoding: { type: 'pkcs1', format: 'pem' },
    publicKeyEncoding: { type: 'spki', format: 'pem' },
  });
  const now = new Date(gh.clock()).toISOString();
  const app: FakeApp = {
    id: gh.newId(),
    slug: slugOf(name),
    name,
    owner,
    publicKey,
    permissions: { ...(manifest.default_permissions ?? {}) },
    events: [...(manifest.default_events ?? [])],
    description: manifest.description ?? null,
    externalUrl: manifest.url!,
    hookUrl: manifest.hook_attributes?.url ?? null,
    // the shape of the description's example: 40 hex digits
    webhookSecret: randomBytes(20).toString('hex'),
    clientId: `Iv23li${randomBytes(7).toString('hex')}`,
    createdAt: now,
  };
  gh.apps.set(app.id, app);
  const code = randomBytes(20).toString('hex');
  gh.manifestCodes.set(code, {
    appId: app.id,
    pem: privateKey,
    clientSecret: randomBytes(20).toString('hex'),
    expiresAt: gh.clock() + CODE_LIFETIME_MS,
  });
  return { app, code };
}

/**
 * `POST /app-manifests/{code}/conversions`: 201 with the App and its secrets, once per code and
 * within the hour; an unknown, used or expired code is 404 (FLOW.conversion, FLOW.oauthCode).
 */
export function convertManifestCode(gh: GitHubWorld, code: string): { status: 201 | 404; body: unknown } {
  const pending = gh.manifestCodes.get(code);
  gh.manifestCodes.delete(code);
  const app = pending ? gh.apps.get(pending.appId) : undefined;
  if (!pending || !app || pending.expiresAt <= gh.clock())
    return {
      status: 404,
      body: { message: 'Not Found', documentation_url: FLOW.conversion.split(' ')[0], status: '404' },
    };
  const ownerId = app.owner.login.length * 1000 + 7;
  return {
    status: 201,
    body: {
      id: app.id,
      slug: app.slug,
      node_id: Buffer.from(`App${app.id}`).toString('base64'),
      client_id: app.clientId,
      owner: {
        login: app.owner.login,
        id: ownerId,
        node_id: Buffer.from(`${app.owner.type}${ownerId}`).toString('base64'),
        avatar_url: `https://avatars.githubusercontent.com/u/${ownerId}?v=4`,
        gravatar_id: '',
        url: `${gh.url}/users/${app.owner.login}`,
        html_url: `https://github.com/${app.owner.login}`,
        followers_url: `${gh.url}/users/${app.owner.login}/followers`,
        following_url: `${gh.url}/users/${app.owner.login}/following{/other_user}`,
        gists_url: `${gh.url}/users/${app.owner.login}/gists{/gist_id}`,
        starred_url: `${gh.url}/users/${app.owner.login}/starred{/owner}{/repo}`,
        subscriptions_url: `${gh.url}/users/${app.owner.login}/subscriptions`,
        organizations_url: `${gh.url}/users/${app.owner.login}/orgs`,
        repos_url: `${gh.url}/users/${app.owner.login}/repos`,
        events_url: `${gh.url}/users/${app.owner.login}/events{/privacy}`,
        received_events_url: `${gh.url}/users/${app.owner.login}/received_events`,
        type: app.owner.type,
        site_admin: false,
      },
      name: app.name,
      description: app.description,
      external_url: app.externalUrl,
      html_url: `https://github.com/apps/${app.slug}`,
      created_at: app.createdAt,
      updated_at: app.createdAt,
      permissions: app.permissions,
      events: app.events,
      installations_count: 0,
      client_secret: pending.clientSecret,
      webhook_secret: app.webhookSecret,
      pem: pending.pem,
    },
  };
}

const html = (s: string) =>
  s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

/**
 * github.com's "new GitHub App" pages, on their own loopback origin: the manifest POST shows the
 * registration form with the name to edit, and its "Create GitHub App" registers the App and
 * redirects to the manifest's `redirect_url` with the code and the `state` (FLOW.manifest).
 * Anything else it is asked is a violation of the fake GitHub it belongs to.
 */
export class FakeGitHubWeb {
  server!: Server;
  url = '';
  /** The person signed in to GitHub in the browser. */
  user = 'octocat';
  /** Every manifest the form received, with the account and `state` it came with. */
  received: { owner: string; state: string | null; manifest: unknown }[] = [];

  constructor(readonly gh: GitHubWorld) {}

  async start(): Promise<this> {
    this.server = createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const url = new URL(req.url ?? '/', this.url);
    const form = new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
    const page = (status: number, title: string, body: string, headers: Record<string, string> = {}) => {
      res.writeHead(status, { 'content-type': 'text/html; charset=utf-8', ...headers });
      res.end(`<!doctype html><html><head><title>${html(title)}</title></head><body>${body}</body></html>`);
    };
    // a browser asks every origin for its icon by itself: not a request of the code under test
    if (req.method === 'GET' && url.pathname === '/favicon.ico') return page(404, 'Not Found', '');
    const m = /^(?:\/organizations\/([A-Za-z0-9-]+))?\/settings\/apps(\/new)?$/.exec(url.pathname);
    if (req.method !== 'POST' || !m) {
      this.gh.violations.push(`web: ${req.method} ${url.pathname} is not a page the fake GitHub plays`);
      return page(404, 'Not Found', '<h1>404</h1>');
    }
    const owner: FakeApp['owner'] = m[1]
      ? { login: m[1], type: 'Organization' }
      : { login: this.user, type: 'User' };
    const base = m[1] ? `/organizations/${m[1]}/settings/apps` : '/settings/apps';
    if (m[2]) {
      // step 1: the manifest arrives from the operator's page
      const state = url.searchParams.get('state');
      let manifest: unknown;
      try {
        manifest = JSON.parse(form.get('manifest') ?? '');
      } catch {
        manifest = undefined;
      }
      this.received.push({ owner: owner.login, state, manifest });
      const problems = manifestProblems(manifest);
      if (problems.length) {
        // a manifest GitHub would not take is the sender's bug
        this.gh.violations.push(
          `web: the manifest POSTed to ${url.pathname} is refused: ${problems.join('; ')}`,
        );
        return page(
          422,
          'Invalid manifest',
          `<ul>${problems.map((p) => `<li>${html(p)}</li>`).join('')}</ul>`,
        );
      }
      return this.form(page, base, manifest as Manifest, state, (manifest as Manifest).name ?? '', null);
    }
    // step 2: "Create GitHub App"
    let manifest: Manifest;
    try {
      manifest = JSON.parse(form.get('manifest') ?? '') as Manifest;
    } catch {
      return page(400, 'Bad request', '<h1>400</h1>');
    }
    const state = form.get('state') || null;
    const name = (form.get('name') ?? '').trim();
    const taken = [...this.gh.apps.values()].some((a) => a.name.toLowerCase() === name.toLowerCase());
    const problem = !name
      ? "Name can't be blank"
      : name.length > NAME_MAX
        ? `Name is too long (maximum is ${NAME_MAX} characters)`
        : taken
          ? 'Name has already been taken'
          : null;
    if (problem) return this.form(page, base, manifest, state, name, problem);
    const { code } = createAppFromManifest(this.gh, manifest, name, owner);
    const back = new URL(manifest.redirect_url!);
    back.searchParams.set('code', code);
    if (state != null) back.searchParams.set('state', state);
    res.writeHead(302, { location: back.toString() });
    res.end();
  }

  /** The registration form: the name to edit, the manifest and `state` carried along. */
  private form(
    page: (status: number, title: string, body: string) => void,
    base: string,
    manifest: Manifest,
    state: string | null,
    name: string,
    problem: string | null,
  ): void {
    const perms = Object.entries(manifest.default_permissions ?? {})
      .map(([k, v]) => `<li>${html(k)}: ${html(v)}</li>`)
      .join('');
    page(
      problem ? 422 : 200,
      'Create GitHub App',
      `<h1>Create GitHub App</h1>${problem ? `<p id="error" role="alert">${html(problem)}</p>` : ''}
<form method="post" action="${html(base)}">
<label for="name">GitHub App name</label> <input id="name" name="name" value="${html(name)}">
<input type="hidden" name="manifest" value="${html(JSON.stringify(manifest))}">
${state != null ? `<input type="hidden" name="state" value="${html(state)}">` : ''}
<p>Webhook URL: <code id="hook">${html(manifest.hook_attributes?.url ?? '')}</code></p>
<ul id="permissions">${perms}</ul>
<button type="submit">Create GitHub App</button>
</form>`,
    );
  }
}

/** Starts GitHub's web side of the manifest flow for `gh`. */
export function startFakeGitHubWeb(gh: GitHubWorld): Promise<FakeGitHubWeb> {
  return new FakeGitHubWeb(gh).start();
}
