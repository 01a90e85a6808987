import { randomBytes } from 'node:crypto';
import { convertManifestCode } from './app-manifest-flow.ts';
import { DOC } from './model.ts';
import { narrowPermissions } from './permissions.ts';
import { exampleOf, overlay } from './schema.ts';
import type { RestHandler } from './world.ts';

/**
 * The fake GitHub's Apps area: the manifest conversion, installation access tokens and their
 * revocation, installations, and the App's webhook delivery log. server.ts authenticates each call
 * and dispatches it here by `method path`.
 */

/** POST /app-manifests/{code}/conversions */
const convertManifest: RestHandler = (w, c) => {
  const { send, full, params } = c;
  const answer = convertManifestCode(w, params.code!);
  return send(answer.status, answer.status === 201 ? full(answer.body, 201) : answer.body);
};

/** POST /app/installations/{installation_id}/access_tokens */
const createAccessToken: RestHandler = (w, c) => {
  const { send, notFound, full, params, body, app, op } = c;
  const installationId = Number(params.installation_id);
  const known =
    [...w.repos.values()].some((r) => r.installationId === installationId) ||
    w.installationApps.has(installationId);
  // an App sees only its own installations
  if (!known || w.appOfInstallation(installationId) !== app!.id) return notFound();
  const appPermissions = app!.permissions;
  if (w.suspendedInstallations.has(installationId))
    return send(403, {
      message: 'This installation has been suspended',
      documentation_url: DOC.accessTokens,
      status: '403',
    });
  // a token may be narrowed to some of the installation's repositories (`repositories`
  // names without the owner, or `repository_ids`, at most 500) and to fewer permissions than
  // the installation holds; a repository outside the installation, or a permission it does
  // not hold, is 422 (DOC.accessTokens)
  const ask = (body ?? {}) as {
    repositories?: string[];
    repository_ids?: number[];
    permissions?: Record<string, string>;
  };
  const mine = [...w.repos.entries()].filter(([, r]) => r.installationId === installationId);
  let scoped: string[] | null = null;
  const outside = () =>
    send(422, {
      message:
        'There is at least one repository that does not exist or is not accessible to the parent installation.',
      documentation_url: DOC.accessTokens,
    });
  if (ask.repositories || ask.repository_ids) {
    scoped = [];
    for (const n of ask.repositories ?? []) {
      const hit = mine.find(([k]) => k.split('/')[1] === n.toLowerCase());
      if (!hit) return outside();
      scoped.push(hit[0]);
    }
    for (const id of ask.repository_ids ?? []) {
      const hit = mine.find(([, r]) => r.id === id);
      if (!hit) return outside();
      scoped.push(hit[0]);
    }
    scoped = [...new Set(scoped)];
  }
  const narrowed = narrowPermissions(appPermissions, ask.permissions);
  if (!narrowed.ok) return send(422, { message: narrowed.message, documentation_url: DOC.accessTokens });
  let permissions = narrowed.permissions;
  const fault =
    ask.repositories || ask.repository_ids || ask.permissions ? w.ignoreNarrowing.shift() : undefined;
  if (fault) {
    // fault: GitHub answers a narrowed request with a token broader than asked
    if (fault.repositories) scoped = null;
    if (fault.permissions) permissions = { ...appPermissions };
  }
  const tokenValue = `ghs_${randomBytes(12).toString('hex')}`;
  // installation tokens expire after one hour (DOC.installationToken)
  const expiresAt = w.clock() + 3600_000;
  w.tokens.set(tokenValue, { installationId, expiresAt, repositories: scoped, permissions });
  return send(
    201,
    full(
      {
        token: tokenValue,
        expires_at: new Date(expiresAt).toISOString(),
        permissions,
        // "selected" when narrowed, else the installation's own selection
        repository_selection: scoped ? 'selected' : (w.installationSelection.get(installationId) ?? 'all'),
        // full repository objects, as GitHub lists them (the schema's shape)
        ...(scoped
          ? {
              repositories: scoped.map((k) =>
                overlay(exampleOf(op.responses['201']?.properties?.repositories?.items), {
                  id: w.repos.get(k)!.id,
                  full_name: k,
                  name: k.split('/')[1],
                }),
              ),
            }
          : {}),
      },
      201,
    ),
  );
};

/** GET /app/installations/{installation_id} */
const getInstallation: RestHandler = (w, c) => {
  const { send, notFound, full, params, app } = c;
  // the installation as the App sees it with its JWT (DOC.getInstallation): it holds exactly
  // the permissions and events of the manifest its App was created from (DOC.manifest), on
  // the account of its repositories, on all of them or selected ones; an installation of
  // another App, or none: 404
  const installationId = Number(params.installation_id);
  const mine = [...w.repos.entries()].filter(([, r]) => r.installationId === installationId);
  const known = mine.length > 0 || w.installationApps.has(installationId);
  if (!known || w.appOfInstallation(installationId) !== app!.id) return notFound();
  const login = mine[0]?.[0].split('/')[0] ?? app!.owner.login;
  const created = new Date(w.clock() - 86_400_000).toISOString();
  return send(
    200,
    full(
      {
        id: installationId,
        app_id: app!.id,
        app_slug: app!.slug,
        client_id: app!.clientId,
        target_id: 1,
        target_type: 'Organization',
        account: { login, type: 'Organization' },
        repository_selection: w.installationSelection.get(installationId) ?? 'all',
        permissions: { ...app!.permissions },
        events: [...app!.events],
        access_tokens_url: `${w.url}/app/installations/${installationId}/access_tokens`,
        repositories_url: `${w.url}/installation/repositories`,
        html_url: `https://github.com/organizations/${login}/settings/installations/${installationId}`,
        single_file_name: null,
        ...(w.suspendedInstallations.has(installationId)
          ? {
              suspended_at: w.suspendedInstallations.get(installationId),
              suspended_by: { login, type: 'Organization' },
            }
          : { suspended_by: null, suspended_at: null }),
        created_at: created,
        updated_at: created,
      },
      200,
    ),
  );
};

/** GET /repos/{owner}/{repo}/installation */
const getRepoInstallation: RestHandler = (w, c) => {
  const { send, notFound, full, app, repo } = c;
  return repo && w.appOfInstallation(repo.installationId) === app!.id
    ? send(200, full({ id: repo.installationId }, 200))
    : notFound();
};

/** GET /app/hook/deliveries */
const listHookDeliveries: RestHandler = (w, c) => {
  const { send, app, url } = c;
  // newest first, `per_page` (max 100) and an opaque `cursor` (DOC.hookDeliveries)
  const size = Math.min(Math.max(1, Number(url.searchParams.get('per_page') ?? 30) || 30), 100);
  // each App has its own delivery log
  const newest = w.hookDeliveries.filter((d) => (d.appId ?? w.appId) === app!.id).reverse();
  const cursor = url.searchParams.get('cursor');
  const from = cursor ? newest.findIndex((d) => `c${d.id}` === cursor) : 0;
  if (from < 0) return send(422, { message: 'Invalid cursor', documentation_url: DOC.hookDeliveries });
  const items = newest.slice(from, from + size);
  const after = newest[from + size];
  const headers: Record<string, string> = {};
  if (after) {
    const u = new URL('/app/hook/deliveries', w.url);
    u.searchParams.set('per_page', String(size));
    u.searchParams.set('cursor', `c${after.id}`);
    headers.link = `<${u.toString()}>; rel="next"`;
  }
  return send(
    200,
    items.map((d) => ({
      id: d.id,
      guid: d.guid,
      delivered_at: d.deliveredAt,
      redelivery: d.redelivery,
      duration: 0.05,
      status:
        d.statusCode >= 200 && d.statusCode < 300
          ? 'OK'
          : d.statusCode
            ? `Invalid HTTP Response: ${d.statusCode}`
            : "We couldn't deliver this payload: Connection refused",
      status_code: d.statusCode,
      event: d.event,
      action: d.action,
      installation_id: 77,
      repository_id: null,
      throttled_at: null,
    })),
    headers,
  );
};

/** DELETE /installation/token */
const deleteInstallationToken: RestHandler = (w, c) => {
  const { send, token } = c;
  // revokes the token this very request authenticated with (checked live above, else 401)
  if (!token) return send(401, { message: 'Bad credentials', documentation_url: DOC.revokeToken });
  token.revokedAt = w.clock();
  return send(204, null);
};

/** POST /app/hook/deliveries/{delivery_id}/attempts */
const redeliverHook: RestHandler = (w, c) => {
  const { send, notFound, params, app } = c;
  const d = w.hookDeliveries.find(
    (x) => x.id === Number(params.delivery_id) && (x.appId ?? w.appId) === app!.id,
  );
  if (!d) return notFound();
  // accepted now, delivered again with the same GUID right after (DOC.redeliver)
  send(202, {});
  void w.redeliver?.(d);
  return;
};

/** This area's operations, by `method path`. */
export const APPS_REST: Record<string, RestHandler> = {
  'post /app-manifests/{code}/conversions': convertManifest,
  'post /app/installations/{installation_id}/access_tokens': createAccessToken,
  'get /app/installations/{installation_id}': getInstallation,
  'get /repos/{owner}/{repo}/installation': getRepoInstallation,
  'get /app/hook/deliveries': listHookDeliveries,
  'delete /installation/token': deleteInstallationToken,
  'post /app/hook/deliveries/{delivery_id}/attempts': redeliverHook,
};
