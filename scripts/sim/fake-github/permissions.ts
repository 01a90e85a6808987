import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * GitHub App permissions as GitHub enforces them, for the fake GitHub: which App permission (and
 * access level) each REST operation the fake serves needs when it is called with an installation
 * access token, and what an App created from a manifest holds.
 *
 * The endpoint → permission table is data: `scripts/sim/fixtures/github-apps/server-to-server-permissions.subset.json`
 * holds, field for field, the entries of github/docs
 * `src/github-apps/data/fpt-2022-11-28/server-to-server-permissions.json` (the data behind
 * "Permissions required for GitHub Apps",
 * https://docs.github.com/en/rest/authentication/permissions-required-for-github-apps) for the
 * operations the fake serves, with the source commit. An operation listed under several
 * permissions carries `additional-permissions: true`; that page says "some endpoints require more
 * than one permission, other endpoints work with any one permission from a set of permissions ...
 * see the documentation for that endpoint", so each such operation must be named in
 * {@link ANY_OF} with its endpoint page, or loading the table fails rather than guess.
 */

export type Access = 'read' | 'write' | 'admin';

export interface PermissionEntry {
  permission: string;
  verb: string;
  requestPath: string;
  access: Access;
  category: string;
  subcategory: string;
  slug: string;
  'additional-permissions': boolean;
}

interface TableFile {
  source: string;
  commit: string;
  entries: PermissionEntry[];
}

/** What one operation needs: any one of these permission/access pairs, and its documentation page. */
export interface Requirement {
  anyOf: { permission: string; access: Access }[];
  /** GitHub's `documentation_url` for the operation (REST reference, category/subcategory#slug). */
  documentationUrl: string;
}

/**
 * Operations listed under several permissions that work with any one of them, as each endpoint's
 * own page says ("The fine-grained token must have at least one of the following permission sets").
 */
const ANY_OF: Record<string, string> = {
  'post /repos/{owner}/{repo}/labels':
    'https://docs.github.com/en/rest/issues/labels#create-a-label ("Issues" repository permissions (write) or "Pull requests" repository permissions (write))',
  'get /repos/{owner}/{repo}/pulls/{pull_number}':
    'https://docs.github.com/en/rest/pulls/pulls#get-a-pull-request ("Pull requests" repository permissions (read) or "Contents" repository permissions (read))',
};

/**
 * Operations an installation token may call with no App permission: revoking the token itself
 * (https://docs.github.com/en/rest/apps/installations#revoke-an-installation-access-token).
 */
const NO_PERMISSION = new Set(['delete /installation/token']);

const RANK: Record<Access, number> = { read: 1, write: 2, admin: 3 };

const TABLE_PATH = join(
  import.meta.dirname,
  '..',
  'fixtures',
  'github-apps',
  'server-to-server-permissions.subset.json',
);

function loadTable(): { source: string; requirements: Map<string, Requirement> } {
  const file = JSON.parse(readFileSync(TABLE_PATH, 'utf8')) as TableFile;
  const byOp = new Map<string, PermissionEntry[]>();
  for (const e of file.entries) {
    const key = `${e.verb} ${e.requestPath}`;
    byOp.set(key, [...(byOp.get(key) ?? []), e]);
  }
  const requirements = new Map<string, Requirement>();
  for (const [key, es] of byOp) {
    if (es.length > 1 && !ANY_OF[key])
      throw new TypeError(
        `${TABLE_PATH}: ${key} is listed under ${es.map((e) => e.permission).join(', ')}; say in ANY_OF (from the endpoint's page) whether any one of them is enough`,
      );
    const first = es[0]!;
    requirements.set(key, {
      anyOf: es.map((e) => ({ permission: e.permission, access: e.access })),
      documentationUrl: `https://docs.github.com/rest/${first.category}/${first.subcategory}#${first.slug}`,
    });
  }
  return { source: `${file.source}@${file.commit}`, requirements };
}

const table = loadTable();

/** Where the table comes from (`repo path@commit`), for reports. */
export const PERMISSIONS_SOURCE = table.source;

/**
 * What `method path` (an OpenAPI path template) needs from an installation token: a
 * {@link Requirement}, `null` when it needs no permission, `undefined` when the table does not
 * list it (the caller records that as a fake defect rather than letting the call through).
 */
export function requirementFor(method: string, opPath: string): Requirement | null | undefined {
  const key = `${method.toLowerCase()} ${opPath}`;
  if (NO_PERMISSION.has(key)) return null;
  return table.requirements.get(key);
}

/** Whether `held` (a token's `permissions`) satisfies one of the requirement's pairs. */
export function satisfies(held: Record<string, string>, need: Requirement): boolean {
  return need.anyOf.some((n) => {
    const have = held[n.permission] as Access | undefined;
    return have != null && (RANK[have] ?? 0) >= RANK[n.access];
  });
}

/**
 * The App's permissions: `default_permissions` of a manifest in this repository (the one
 * `docs/github-app.md` tells operators to use, unless a test names another), read at run time so
 * the fake can never hold more than the documented App.
 * https://docs.github.com/en/apps/sharing-github-apps/registering-a-github-app-from-a-manifest
 */
export function manifestPermissions(manifestPath: string): Record<string, string> {
  const m = JSON.parse(readFileSync(join(import.meta.dirname, '..', '..', '..', manifestPath), 'utf8')) as {
    default_permissions?: Record<string, string>;
  };
  if (!m.default_permissions) throw new TypeError(`${manifestPath}: no default_permissions`);
  return { ...m.default_permissions };
}

/**
 * Narrows a token's permissions as `POST /app/installations/{id}/access_tokens` does: without
 * `permissions` the token gets everything the installation holds; with it, exactly what was asked,
 * and asking for a permission (or a level) the installation does not hold is refused (422, "The
 * permissions requested are not granted to this installation."). REST "Create an installation
 * access token for an app": "The installation access token cannot be granted permissions that the
 * app was not granted."
 */
export function narrowPermissions(
  held: Record<string, string>,
  asked: Record<string, string> | undefined,
): { ok: true; permissions: Record<string, string> } | { ok: false; message: string } {
  if (!asked) return { ok: true, permissions: { ...held } };
  for (const [k, v] of Object.entries(asked)) {
    const have = held[k] as Access | undefined;
    if (!have || (RANK[have] ?? 0) < (RANK[v as Access] ?? Number.POSITIVE_INFINITY))
      return { ok: false, message: 'The permissions requested are not granted to this installation.' };
  }
  return { ok: true, permissions: { ...asked } };
}

/**
 * The webhook events the App subscribes to: `default_events` of the same manifest (what an
 * installation's `events` lists, REST "Get an installation for the authenticated app").
 */
export function manifestEvents(manifestPath: string): string[] {
  const m = JSON.parse(readFileSync(join(import.meta.dirname, '..', '..', '..', manifestPath), 'utf8')) as {
    default_events?: string[];
  };
  return [...(m.default_events ?? [])];
}
