import * as z from 'zod';
import { runnerGroupIdOf } from '../../core/config.ts';
import { parseBody } from '../api/body.ts';
import type { OperatorApi } from '../api/operator.ts';
import { ApiError } from '../errors.ts';
import { disableRepository, enableRepository } from '../ledger/github.ts';
import type { RepositoryRow } from '../ledger/ledger.ts';
import { listRepositories } from '../ledger/queries.ts';
import { buildViews } from '../views.ts';
import { GitHubError } from './client.ts';
import type { GitHubService } from './service.ts';

/**
 * Explicit repository enablement (DESIGN.md: "a repository not enabled gets nothing"). The
 * operator route checks the App installation and the runner group scope through the GitHub API
 * and creates the three labels; sparkctl calls it.
 */

const NAME = /^[A-Za-z0-9_.-]{1,100}$/;
const EnableBody = z
  .object({
    pairEnabled: z.boolean().optional(),
    installationId: z.number().int().positive().optional(),
    workflow: z.string().min(1).max(200).optional(),
    /** Operator override of the rollout gate (issue 12 item 6); recorded with the enablement. */
    forceRollout: z.boolean().optional(),
  })
  .strict();

export interface RepositoryView {
  fullName: string;
  installationId: number | null;
  defaultBranch: string;
  pairEnabled: boolean;
  workflow: string;
  enabled: boolean;
}

function view(svc: GitHubService, r: RepositoryRow): RepositoryView {
  return {
    fullName: r.fullName,
    installationId: r.installationId,
    defaultBranch: r.defaultBranch,
    pairEnabled: r.pairEnabled,
    workflow: r.workflow ?? svc.gh.workflow,
    enabled: r.disabledAt == null,
  };
}

const LABEL_STYLE: Record<'test' | 'long' | 'pair', { color: string; description: string }> = {
  test: {
    color: '76b900',
    description: 'Run the Spark smoke test on private GPU hardware (maintainers only)',
  },
  long: { color: '4b8b00', description: 'Run the Spark performance suite (maintainers only)' },
  pair: { color: '2e5c00', description: 'Run the two-Spark distributed test (maintainers only)' },
};

/** The App permission (and level) each runner scope needs (docs/github-app.md "Minimum permissions"). */
const RUNNER_PERMISSION = {
  org: { key: 'organization_self_hosted_runners', name: 'Organization → "Self-hosted runners"' },
  repo: { key: 'administration', name: 'Repository → "Administration"' },
} as const;

const RANK: Record<string, number> = { read: 1, write: 2, admin: 3 };
/** Whether `held` grants `permission` at `access` or above. */
export const holds = (held: Record<string, string>, permission: string, access: 'read' | 'write') =>
  (RANK[held[permission] ?? ''] ?? 0) >= RANK[access]!;

async function checkRunnerGroup(
  svc: GitHubService,
  repo: string,
  installationId: number,
  held: Record<string, string>,
): Promise<{ ok: boolean; detail: string }> {
  // asked only when the installation may answer: a request it cannot serve is refused by GitHub
  // (403 "Resource not accessible by integration") and says nothing more than its permissions do
  const need = RUNNER_PERMISSION[svc.gh.runnerScope];
  if (!holds(held, need.key, 'write'))
    return {
      ok: false,
      detail: `the App installation lacks ${need.name}: read and write, which runnerScope "${svc.gh.runnerScope}" needs to register runners for ${repo}; grant it (docs/github-app.md) and accept the new permission on the installation`,
    };
  try {
    if (svc.gh.runnerScope === 'org') {
      const org = repo.split('/')[0]!;
      const group = runnerGroupIdOf(svc.config);
      const g = await svc.client.request<{ visibility: string; name: string }>(
        'GET',
        `/orgs/${org}/actions/runner-groups/${group}`,
        { installationId },
      );
      if (g.data.visibility === 'all')
        return { ok: true, detail: `runner group "${g.data.name}" is open to all repositories` };
      const repos = await svc.client.request<{ repositories: { full_name: string }[] }>(
        'GET',
        `/orgs/${org}/actions/runner-groups/${group}/repositories?per_page=100`,
        { installationId },
      );
      const ok = repos.data.repositories.some((r) => r.full_name.toLowerCase() === repo.toLowerCase());
      return {
        ok,
        detail: ok
          ? `runner group "${g.data.name}" includes ${repo}`
          : `runner group "${g.data.name}" does not include ${repo}; add it under the organization's Actions runner groups`,
      };
    }
    await svc.client.request('GET', `/repos/${repo}/actions/runners?per_page=1`, { installationId });
    return { ok: true, detail: `the App can register repository runners on ${repo}` };
  } catch (e) {
    if (e instanceof GitHubError)
      return {
        ok: false,
        detail: `cannot manage self-hosted runners for ${repo} (${e.status}): grant the App ${need.name} read/write`,
      };
    throw e;
  }
}

export function mountRepositoryRoutes(api: OperatorApi, svc: () => GitHubService) {
  api.get('/repositories', 'develop', async (c) => {
    const s = svc();
    const rows = await listRepositories(s.ledger);
    return c.json({ repositories: rows.map((r) => view(s, r)) });
  });

  api.post('/repositories/:owner/:name/enable', 'operate', async (c) => {
    const s = svc();
    const { owner, name } = c.req.param();
    if (!NAME.test(owner) || !NAME.test(name))
      throw new ApiError(400, 'invalid_request', 'expected /repositories/OWNER/NAME');
    const body = await parseBody(c, EnableBody);
    const repo = `${owner}/${name}`;

    // Rollout gate (issue 12 item 6): no repository gets Spark work while a host is unknown or
    // unmanaged — a job could be admitted onto a fleet the operator has not taken over yet
    const { fleet } = await buildViews(s.ledger);
    const notReady = fleet.hosts
      .filter((h) => !h.managed || h.state === 'unknown')
      .map((h) => `${h.id} (${h.managed ? h.state : 'unmanaged'})`);
    if (notReady.length && !body.forceRollout)
      throw new ApiError(
        409,
        'rollout_not_ready',
        `rollout gate: ${notReady.join(', ')} ${notReady.length === 1 ? 'is' : 'are'} not adopted; adopt every host first (sparkctl host adopt ID), or override with --force-rollout (recorded in the audit trail)`,
      );

    let installationId: number;
    let defaultBranch: string;
    let fullName: string;
    try {
      const inst = await s.client.request<{ id: number }>('GET', `/repos/${repo}/installation`, {
        as: 'app',
      });
      installationId = inst.data.id;
      if (body.installationId != null && body.installationId !== installationId)
        throw new ApiError(
          409,
          'installation_mismatch',
          `${repo} is served by App installation ${installationId}, not ${body.installationId}`,
        );
      const info = await s.client.request<{ full_name: string; default_branch: string }>(
        'GET',
        `/repos/${repo}`,
        {
          installationId,
        },
      );
      defaultBranch = info.data.default_branch;
      fullName = info.data.full_name;
    } catch (e) {
      if (e instanceof GitHubError) {
        if (e.status === 404)
          throw new ApiError(
            404,
            'app_not_installed',
            `the GitHub App is not installed on ${repo}; install it there first`,
          );
        throw new ApiError(502, 'github_unavailable', `could not check ${repo} with GitHub: ${e.message}`);
      }
      throw e;
    }

    const held = await s.client.installationPermissions(installationId);
    const runnerGroup = await checkRunnerGroup(s, fullName, installationId, held);
    const labelsCreated: string[] = [];
    const labelsExisting: string[] = [];
    const labelsFailed: string[] = [];
    // labels a maintainer must create by hand: the installation may not (creating one needs Issues
    // or Pull requests: write, REST "Create a label"); the request is never sent to be refused
    const labelsToCreate: { name: string; color: string; description: string }[] = [];
    const mayCreateLabels = holds(held, 'issues', 'write') || holds(held, 'pull_requests', 'write');
    for (const key of ['test', 'long', 'pair'] as const) {
      const labelName = s.gh.labels[key];
      if (!mayCreateLabels) {
        labelsToCreate.push({ name: labelName, ...LABEL_STYLE[key] });
        continue;
      }
      try {
        await s.client.request('POST', `/repos/${fullName}/labels`, {
          body: { name: labelName, ...LABEL_STYLE[key] },
          installationId,
        });
        labelsCreated.push(labelName);
      } catch (e) {
        if (e instanceof GitHubError && e.status === 422) labelsExisting.push(labelName);
        else if (e instanceof GitHubError) labelsFailed.push(`${labelName} (${e.status})`);
        else throw e;
      }
    }

    const who = c.get('principal').name;
    const row = await enableRepository(
      s.ledger,
      { fullName, installationId, defaultBranch, pairEnabled: body.pairEnabled, workflow: body.workflow },
      `api:${who}`,
      (values) => ({
        cause: `enabled by ${who}${values.pairEnabled ? ' with pair tests' : ''}${notReady.length ? `; rollout gate overridden while ${notReady.join(', ')} not adopted` : ''}`,
        data: {
          installationId,
          pairEnabled: values.pairEnabled,
          runnerGroupOk: runnerGroup.ok,
          labelsCreated,
          ...(notReady.length ? { rolloutOverride: notReady } : {}),
        },
      }),
    );
    return c.json({
      repository: view(s, { ...row, enabledAt: 0 }),
      labelsCreated,
      labelsExisting,
      labelsFailed,
      labelsToCreate,
      runnerGroupOk: runnerGroup.ok,
      runnerGroupDetail: runnerGroup.detail,
      rolloutOverride: notReady,
    });
  });

  api.post('/repositories/:owner/:name/disable', 'operate', async (c) => {
    const s = svc();
    const { owner, name } = c.req.param();
    const repo = `${owner}/${name}`;
    const who = c.get('principal').name;
    const row = await disableRepository(
      s.ledger,
      repo,
      `api:${who}`,
      `disabled by ${who}; new webhooks are ignored, queued and active work is untouched`,
    );
    return c.json({ repository: view(s, row) });
  });
}
