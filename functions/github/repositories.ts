import {
  EnableBody,
  type EnableRefused,
  type EnableResponse,
  failing,
  type ReadinessCheck,
} from '../../core/protocol/readiness.ts';
import { parseBody } from '../api/body.ts';
import type { OperatorApi } from '../api/operator.ts';
import { ApiError } from '../errors.ts';
import type { RepositoryRow } from '../ledger/ledger.ts';
import { GitHubError } from './client.ts';
import { checkReadiness, doctorReport, holds, sparkLabels } from './readiness.ts';
import type { GitHubService } from './service.ts';

/**
 * Explicit repository enablement (docs/architecture.md: "a repository not enabled gets nothing"). `enable`
 * is a gate (docs/adr/0165-enable-is-a-gate.md): it runs every readiness check
 * (functions/github/readiness.ts) and refuses — 409 `not_ready`, the report with each fix, nothing
 * written to the ledger, no label created — unless every check passes or the operator overrides
 * the failing ones by name (recorded with the enablement). The doctor routes run the same checks
 * at any time and change nothing.
 */

const NAME = /^[A-Za-z0-9_.-]{1,100}$/;

function repoParam(owner: string, name: string): string {
  if (!NAME.test(owner) || !NAME.test(name))
    throw new ApiError(400, 'invalid_request', 'expected /repositories/OWNER/NAME');
  return `${owner}/${name}`;
}

function view(svc: GitHubService, r: RepositoryRow): EnableResponse['repository'] {
  return {
    fullName: r.fullName,
    installationId: r.installationId,
    defaultBranch: r.defaultBranch,
    pairEnabled: r.pairEnabled,
    workflow: r.workflow ?? svc.gh.workflow,
    enabled: r.disabledAt == null,
  };
}

const line = (c: ReadinessCheck) => `${c.id}: ${c.summary}${c.fix ? ` — fix: ${c.fix}` : ''}`;

export function mountRepositoryRoutes(api: OperatorApi, svc: () => GitHubService) {
  api.get('/repositories', 'develop', async (c) => {
    const s = svc();
    const rows = await s.ledger.github.listRepositories();
    return c.json({ repositories: rows.map((r) => view(s, r)) });
  });

  // read-only: the same checks as enable, for every enabled repository or one named
  api.get('/doctor/github', 'operate', async (c) => c.json(await doctorReport(svc())));
  api.get('/doctor/github/:owner/:name', 'operate', async (c) => {
    const repo = repoParam(c.req.param('owner'), c.req.param('name'));
    return c.json(await doctorReport(svc(), repo));
  });

  api.post('/repositories/:owner/:name/enable', 'operate', async (c) => {
    const s = svc();
    const repo = repoParam(c.req.param('owner'), c.req.param('name'));
    const body = await parseBody(c, EnableBody);
    const existing =
      (await s.ledger.github.listRepositories()).find(
        (r) => r.fullName.toLowerCase() === repo.toLowerCase(),
      ) ?? null;
    const { report: readiness, facts } = await checkReadiness(s, repo, {
      installationId: body.installationId,
      workflow: body.workflow ?? existing?.workflow,
    });
    const override = new Set<string>(body.override ?? []);
    const failed = failing(readiness);
    const refused = failed.filter((f) => !override.has(f.id));
    if (refused.length || facts.installationId == null || !facts.fullName || !facts.defaultBranch) {
      const answer: EnableRefused = {
        error: {
          code: 'not_ready',
          message: `enable refused for ${repo}, nothing was changed: ${refused.length} check${refused.length === 1 ? '' : 's'} failed${failed.length > refused.length ? ` (${failed.length - refused.length} overridden)` : ''}: ${refused.map(line).join(' | ')}`,
        },
        readiness,
      };
      return c.json(answer, 409);
    }
    const overridden = failed.map((f) => ({
      id: f.id as NonNullable<EnableBody['override']>[number],
      summary: f.summary,
    }));
    const installationId = facts.installationId;
    const fullName = facts.fullName;

    // labels only once the gate passed; a maintainer creates them where the installation may not
    // (creating one needs Issues or Pull requests: write, REST "Create a label"): never sent to
    // be refused
    const labelsCreated: string[] = [];
    const labelsExisting: string[] = [];
    const labelsFailed: string[] = [];
    if (holds(facts.held, 'issues', 'write') || holds(facts.held, 'pull_requests', 'write')) {
      for (const spec of sparkLabels(s.gh)) {
        const label = spec.name;
        try {
          await s.client.request('POST', `/repos/${fullName}/labels`, { body: spec, installationId });
          labelsCreated.push(label);
        } catch (e) {
          // 422 already_exists (names compare case-insensitively, REST "Create a label")
          if (e instanceof GitHubError && e.status === 422) labelsExisting.push(label);
          else if (e instanceof GitHubError) labelsFailed.push(`${label} (${e.status})`);
          else throw e;
        }
      }
    }

    const who = c.get('principal').name;
    const row = await s.ledger.github.enableRepository(
      {
        fullName,
        installationId,
        defaultBranch: facts.defaultBranch,
        pairEnabled: body.pairEnabled,
        workflow: body.workflow,
      },
      `api:${who}`,
      (values) => ({
        cause: `enabled by ${who}${values.pairEnabled ? ' with pair tests' : ''}${overridden.length ? `; readiness checks overridden: ${overridden.map((o) => `${o.id} (${o.summary})`).join('; ')}`.slice(0, 1500) : ''}`,
        data: {
          installationId,
          pairEnabled: values.pairEnabled,
          labelsCreated,
          checks: Object.fromEntries(readiness.checks.map((x) => [x.id, x.status])),
          ...(overridden.length ? { overridden } : {}),
        },
      }),
    );
    const answer: EnableResponse = {
      repository: view(s, row),
      readiness,
      overridden,
      labelsCreated,
      labelsExisting,
      labelsFailed,
      labelsToCreate: facts.labelsToCreate,
    };
    return c.json(answer);
  });

  api.post('/repositories/:owner/:name/disable', 'operate', async (c) => {
    const s = svc();
    const repo = repoParam(c.req.param('owner'), c.req.param('name'));
    const who = c.get('principal').name;
    const row = await s.ledger.github.disableRepository(
      repo,
      `api:${who}`,
      `disabled by ${who}; new webhooks are ignored, queued and active work is untouched`,
    );
    return c.json({ repository: view(s, row) });
  });
}
