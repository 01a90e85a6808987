import { createSign } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { type FakeGitHub, startFakeGitHub } from '../../scripts/sim/fake-github/server.ts';

/**
 * The fake GitHub's `GET /app/installations/{installation_id}` (server.ts `DOC.getInstallation`)
 * over real HTTP: the App's JWT only, the permissions and events of the manifest the App was
 * created from, the installation's repository selection, 404 for an installation the App does
 * not have, and a suspended installation that shows `suspended_at` and gets no access token
 * (`DOC.suspended`). Every answer is checked against GitHub's description (close() fails on any
 * violation).
 */

let gh: FakeGitHub;
const now = Date.UTC(2026, 11, 2, 12, 0, 0);

async function start(manifest?: string) {
  gh = await startFakeGitHub(manifest ? { manifest } : {});
  gh.clock = () => now;
  gh.addRepo('acme/butter', { installationId: 77 });
}
afterEach(async () => {
  expect(gh.violations).toEqual([]);
  await gh.close();
});

const jwt = () => {
  const enc = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const claims = { iss: gh.appId, iat: Math.floor(now / 1000) - 30, exp: Math.floor(now / 1000) + 540 };
  const body = `${enc({ alg: 'RS256', typ: 'JWT' })}.${enc(claims)}`;
  return `Bearer ${body}.${createSign('RSA-SHA256').update(body).sign(gh.privateKey).toString('base64url')}`;
};

async function call(method: string, path: string, auth: string | null) {
  const res = await fetch(`${gh.url}${path}`, { method, headers: auth ? { authorization: auth } : {} });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

describe('fake GitHub: GET /app/installations/{installation_id}', () => {
  it('answers the installation with the manifest’s permissions and events, to the App’s JWT only', async () => {
    await start();
    const r = await call('GET', '/app/installations/77', jwt());
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({
      id: 77,
      app_id: gh.appId,
      account: { login: 'acme' },
      repository_selection: 'all',
      // docs/github-app-manifest.json, the App docs/github-app.md has operators create
      permissions: {
        actions: 'write',
        checks: 'write',
        contents: 'read',
        metadata: 'read',
        pull_requests: 'read',
        issues: 'read',
        organization_self_hosted_runners: 'write',
      },
      events: ['pull_request', 'issue_comment', 'push', 'workflow_job'],
      suspended_at: null,
    });
    expect(Object.keys(r.body.permissions)).toHaveLength(7);
    gh.installationSelection.set(77, 'selected');
    expect((await call('GET', '/app/installations/77', jwt())).body.repository_selection).toBe('selected');
    // an installation the App does not have; no JWT at all
    expect((await call('GET', '/app/installations/78', jwt())).status).toBe(404);
    expect((await call('GET', '/app/installations/77', null)).status).toBe(401);
  });

  it('another manifest, another installation: the repository-runner App holds Administration', async () => {
    await start('docs/github-app-manifest.repo-scope.json');
    const r = await call('GET', '/app/installations/77', jwt());
    expect(r.body.permissions).toMatchObject({ administration: 'write' });
    expect(r.body.permissions.organization_self_hosted_runners).toBeUndefined();
  });

  it('a suspended installation shows when, and gets no access token', async () => {
    await start();
    gh.suspendedInstallations.set(77, '2026-12-01T10:00:00Z');
    const r = await call('GET', '/app/installations/77', jwt());
    expect(r.body).toMatchObject({ suspended_at: '2026-12-01T10:00:00Z', suspended_by: { login: 'acme' } });
    const token = await call('POST', '/app/installations/77/access_tokens', jwt());
    expect(token).toMatchObject({ status: 403, body: { message: 'This installation has been suspended' } });
    expect(gh.tokens.size).toBe(0);
  });
});
