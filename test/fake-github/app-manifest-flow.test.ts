import { createPublicKey, createSign } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  CODE_LIFETIME_MS,
  type FakeGitHubWeb,
  slugOf,
  startFakeGitHubWeb,
} from '../../scripts/sim/fake-github/app-manifest-flow.ts';
import { type FakeGitHub, startFakeGitHub } from '../../scripts/sim/fake-github/server.ts';
import { firstForm } from '../helpers/html-form.ts';

/**
 * GitHub's App manifest flow as the fake plays it (app-manifest-flow.ts `FLOW`), over real HTTP:
 * the new-App form on the web origin, the redirect with the code and the state, and the REST
 * conversion, which answers each code once, within the hour, without authentication. The App it
 * creates signs its own JWTs and reaches only its own installations and delivery log.
 */

const SHIPPED = JSON.parse(
  readFileSync(join(import.meta.dirname, '..', '..', 'docs', 'github-app-manifest.json'), 'utf8'),
) as { default_permissions: Record<string, string>; default_events: string[] };

let gh: FakeGitHub;
let web: FakeGitHubWeb;
let offset = 0;

beforeEach(async () => {
  gh = await startFakeGitHub();
  offset = 0;
  gh.clock = () => Date.now() + offset;
  web = await startFakeGitHubWeb(gh);
});
afterEach(async () => {
  await web.close();
  expect(gh.violations).toEqual([]);
  await gh.close();
});

function manifest(over: Record<string, unknown> = {}) {
  return {
    name: 'Spark Controller acme',
    url: 'https://spark.example.org',
    hook_attributes: { url: 'https://spark.example.org/github/webhooks', active: true },
    redirect_url: 'http://127.0.0.1:9/callback',
    setup_url: 'https://spark.example.org/',
    public: false,
    default_permissions: SHIPPED.default_permissions,
    default_events: SHIPPED.default_events,
    ...over,
  };
}

/** The form POST a browser sends: `manifest` as a form field, `state` on the action URL. */
function postManifest(path: string, m: unknown, state: string | null = 'st-1') {
  return fetch(`${web.url}${path}${state ? `?state=${state}` : ''}`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ manifest: JSON.stringify(m) }),
    redirect: 'manual',
  });
}

/** "Create GitHub App" with the name as the person left (or edited) it. */
async function create(page: string, name?: string) {
  const { action, fields } = firstForm(page, web.url);
  return fetch(action, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ ...fields, ...(name != null ? { name } : {}) }),
    redirect: 'manual',
  });
}

async function convert(code: string) {
  const res = await fetch(`${gh.url}/app-manifests/${code}/conversions`, {
    method: 'POST',
    headers: { accept: 'application/vnd.github+json' },
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

function jwtFor(appId: number, pem: string) {
  const enc = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const s = Math.floor(gh.clock() / 1000);
  const body = `${enc({ alg: 'RS256', typ: 'JWT' })}.${enc({ iss: appId, iat: s - 30, exp: s + 540 })}`;
  return `Bearer ${body}.${createSign('RSA-SHA256').update(body).sign(pem).toString('base64url')}`;
}

async function flow(path = '/organizations/acme/settings/apps/new', m = manifest()) {
  const form = await postManifest(path, m);
  expect(form.status).toBe(200);
  const created = await create(await form.text());
  expect(created.status).toBe(302);
  const back = new URL(created.headers.get('location')!);
  return { back, code: back.searchParams.get('code')! };
}

describe('the manifest flow of the fake GitHub', () => {
  it('form → "Create GitHub App" → redirect with code and state → one conversion with the App and its secrets', async () => {
    const { back, code } = await flow();
    expect(`${back.origin}${back.pathname}`).toBe('http://127.0.0.1:9/callback');
    expect(back.searchParams.get('state')).toBe('st-1');
    expect(code).toMatch(/^[0-9a-f]{40}$/);
    expect(web.received).toEqual([{ owner: 'acme', state: 'st-1', manifest: manifest() }]);

    const first = await convert(code);
    expect(first.status).toBe(201);
    const app = first.body as {
      id: number;
      slug: string;
      pem: string;
      webhook_secret: string;
      client_secret: string;
      permissions: Record<string, string>;
      events: string[];
      owner: { login: string; type: string };
      html_url: string;
    };
    expect(app).toMatchObject({
      slug: 'spark-controller-acme',
      name: 'Spark Controller acme',
      external_url: 'https://spark.example.org',
      html_url: 'https://github.com/apps/spark-controller-acme',
      owner: { login: 'acme', type: 'Organization' },
      permissions: SHIPPED.default_permissions,
      events: SHIPPED.default_events,
    });
    // as the description's example: a PKCS#1 key and a 40-hex-digit webhook secret
    expect(app.pem).toMatch(/^-----BEGIN RSA PRIVATE KEY-----\n/);
    expect(app.webhook_secret).toMatch(/^[0-9a-f]{40}$/);
    const registered = gh.apps.get(app.id)!;
    expect(registered.webhookSecret).toBe(app.webhook_secret);
    expect(registered.hookUrl).toBe('https://spark.example.org/github/webhooks');
    expect(createPublicKey(app.pem).export({ type: 'spki', format: 'pem' })).toBe(registered.publicKey);

    // once: a used code is GitHub's 404, as an unknown one is
    expect((await convert(code)).status).toBe(404);
    expect((await convert('0'.repeat(40))).status).toBe(404);

    // the new App's JWT is its own: accepted, with its own (empty) delivery log
    gh.recordHookDelivery({
      guid: 'g-1',
      event: 'ping',
      action: null,
      redelivery: false,
      statusCode: 200,
      body: '{}',
    });
    const own = await fetch(`${gh.url}/app/hook/deliveries`, {
      headers: { authorization: jwtFor(app.id, app.pem) },
    });
    expect(own.status).toBe(200);
    expect(await own.json()).toEqual([]);
    const mine = await fetch(`${gh.url}/app/hook/deliveries`, {
      headers: { authorization: jwtFor(gh.appId, gh.privateKey) },
    });
    expect(((await mine.json()) as unknown[]).length).toBe(1);
    // signed with another App's key, the new App's id is refused
    const forged = await fetch(`${gh.url}/app/hook/deliveries`, {
      headers: { authorization: jwtFor(app.id, gh.privateKey) },
    });
    expect(forged.status).toBe(401);

    // installed, it gets installation tokens with the manifest's permissions; the other App cannot
    const installation = gh.install(app.id);
    gh.addRepo('acme/butter', { installationId: installation });
    const token = await fetch(`${gh.url}/app/installations/${installation}/access_tokens`, {
      method: 'POST',
      headers: { authorization: jwtFor(app.id, app.pem) },
    });
    expect(token.status).toBe(201);
    expect(((await token.json()) as { permissions: unknown }).permissions).toEqual(
      SHIPPED.default_permissions,
    );
    const foreign = await fetch(`${gh.url}/app/installations/${installation}/access_tokens`, {
      method: 'POST',
      headers: { authorization: jwtFor(gh.appId, gh.privateKey) },
    });
    expect(foreign.status).toBe(404);
    const where = await fetch(`${gh.url}/repos/acme/butter/installation`, {
      headers: { authorization: jwtFor(app.id, app.pem) },
    });
    expect(((await where.json()) as { id: number }).id).toBe(installation);
  });

  it('a code unused for an hour is gone', async () => {
    const { code } = await flow();
    offset = CODE_LIFETIME_MS + 1000;
    expect((await convert(code)).status).toBe(404);
  });

  it('a personal account: the form at /settings/apps/new, the signed-in user owns the App; no state, none back', async () => {
    const form = await postManifest('/settings/apps/new', manifest({ name: 'Spark Controller' }), null);
    const created = await create(await form.text(), 'Spark Controller Octo');
    const back = new URL(created.headers.get('location')!);
    expect(back.searchParams.has('state')).toBe(false);
    const app = (await convert(back.searchParams.get('code')!)).body;
    expect(app).toMatchObject({ owner: { login: 'octocat', type: 'User' }, slug: 'spark-controller-octo' });
  });

  it('the name is edited on the form: one already taken, or longer than 34 characters, is shown as an error', async () => {
    const form = await (await postManifest('/organizations/acme/settings/apps/new', manifest())).text();
    // the App under test is "Spark Controller"; names are unique regardless of case
    const taken = await create(form, 'spark controller');
    expect(taken.status).toBe(422);
    const page = await taken.text();
    expect(page).toContain('Name has already been taken');
    const long = await create(page, 'x'.repeat(35));
    expect(await long.text()).toContain('Name is too long (maximum is 34 characters)');
    const ok = await create(page, 'Spark Controller Acme 2');
    expect(ok.status).toBe(302);
    expect(gh.apps.size).toBe(2);
  });

  it('a manifest GitHub would refuse is an error page and a violation: no App, no code', async () => {
    const res = await postManifest('/organizations/acme/settings/apps/new', manifest({ url: undefined }));
    expect(res.status).toBe(422);
    expect(await res.text()).toContain('url is required');
    expect(gh.takeViolations()).toEqual([
      'web: the manifest POSTed to /organizations/acme/settings/apps/new is refused: url is required (the homepage of the App)',
    ]);
    expect(gh.apps.size).toBe(1);
    expect(gh.manifestCodes.size).toBe(0);
  });

  it('slugs as GitHub shows names: lowercase, spaces to "-", accents ignored', () => {
    expect(slugOf('My APp Näme')).toBe('my-app-name');
  });
});
