import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { CreateAppOptions } from './options.ts';

/**
 * The App manifest the command sends: the shipped one for the runner scope
 * (docs/github-app-manifest.json, or docs/github-app-manifest.repo-scope.json for repository
 * runners; docs/github-app.md "Minimum permissions") with this controller's addresses. Permissions
 * and events are the shipped file's, never edited here, so the App holds what the docs say.
 * Parameters: https://docs.github.com/en/apps/sharing-github-apps/registering-a-github-app-from-a-manifest
 */
export interface AppManifest {
  name: string;
  url: string;
  description?: string;
  hook_attributes: { url: string; active: boolean };
  redirect_url: string;
  setup_url: string;
  public: boolean;
  default_permissions: Record<string, string>;
  default_events: string[];
}

/** The shipped manifest file for a runner scope, relative to the repository root. */
export function manifestPathFor(scope: 'org' | 'repo'): string {
  return join('docs', scope === 'repo' ? 'github-app-manifest.repo-scope.json' : 'github-app-manifest.json');
}

const ROOT = join(import.meta.dirname, '..', '..');

/**
 * The manifest for `opts`: GitHub sends webhooks to `<public URL>/github/webhooks`, shows the
 * controller as the App's homepage, sends the person to `<public URL>/` after an installation
 * (`setup_url`) and back to the local setup page with the code (`redirect_url`: loopback, as
 * Probot's setup does with http://localhost:3000/probot/setup, probot/probot src/manifest-creation.ts).
 */
export function buildManifest(opts: CreateAppOptions, redirectUrl: string): AppManifest {
  const shipped = JSON.parse(
    readFileSync(join(ROOT, manifestPathFor(opts.runnerScope)), 'utf8'),
  ) as AppManifest;
  return {
    name: opts.name,
    url: opts.publicUrl,
    ...(shipped.description ? { description: shipped.description } : {}),
    hook_attributes: { url: `${opts.publicUrl}/github/webhooks`, active: true },
    redirect_url: redirectUrl,
    setup_url: `${opts.publicUrl}/`,
    public: false,
    default_permissions: { ...shipped.default_permissions },
    default_events: [...shipped.default_events],
  };
}

/** GitHub's new-App form for the account, with `state` as the documented example passes it. */
export function newAppFormUrl(opts: CreateAppOptions, state: string): string {
  const path =
    opts.account.kind === 'org'
      ? `/organizations/${encodeURIComponent(opts.account.org)}/settings/apps/new`
      : '/settings/apps/new';
  const u = new URL(`${opts.githubUrl}${path}`);
  u.searchParams.set('state', state);
  return u.toString();
}
