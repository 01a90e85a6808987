import { ciModeForRepo, mergeCiForRepo, runnerGroupIdOf, type SparkConfig } from '../../core/config.ts';
import type { LabelSpec, ReadinessCheck } from '../../core/protocol/readiness.ts';
import type { Ledger } from '../ledger/ledger.ts';
import { type GitHubClient, GitHubError } from './client.ts';
import { readWorkflowContract } from './workflow-contract.ts';

/**
 * The GitHub side of the rollout readiness (docs/adr/0165-enable-is-a-gate.md): what a
 * repository needs of the App's installation, and the checks of its permissions and events, the
 * runner group, the workflow contract and the labels. Each request is made only when the
 * installation's permissions cover it (functions/github/readiness.ts says why).
 */

/** What the checks read and ask through: the ledger (reads only), the configuration, GitHub. */
export interface ReadinessPort {
  ledger: Ledger;
  config: SparkConfig;
  client: GitHubClient;
}

/** The labels `enable` creates (or names for a maintainer), with their colours. */
export function sparkLabels(gh: SparkConfig['github']): LabelSpec[] {
  return [
    {
      name: gh.labels.test,
      color: '76b900',
      description: 'Run the Spark smoke test on private GPU hardware (maintainers only)',
    },
    {
      name: gh.labels.long,
      color: '4b8b00',
      description: 'Run the Spark performance suite (maintainers only)',
    },
    {
      name: gh.labels.pair,
      color: '2e5c00',
      description: 'Run the two-Spark distributed test (maintainers only)',
    },
  ];
}

const RANK: Record<string, number> = { read: 1, write: 2, admin: 3 };
/** Whether `held` grants `permission` at `access` or above. */
export const holds = (held: Record<string, string>, permission: string, access: 'read' | 'write') =>
  (RANK[held[permission] ?? ''] ?? 0) >= RANK[access]!;

/** The App permission names as GitHub's settings page shows them. */
const PERMISSION_NAMES: Record<string, string> = {
  actions: 'Actions',
  checks: 'Checks',
  contents: 'Contents',
  metadata: 'Metadata',
  pull_requests: 'Pull requests',
  issues: 'Issues',
  organization_self_hosted_runners: 'Organization → Self-hosted runners',
  administration: 'Administration',
};
const accessWords = (a: string) => (a === 'read' ? 'read' : 'read and write');
const permissionName = (k: string) => PERMISSION_NAMES[k] ?? k;

/**
 * What `repo` needs of the installation (docs/github-app.md "Minimum permissions", the spec's
 * "Install and scope the GitHub App"): the repository permissions of every path, Actions and the
 * runner scope's permission unless its CI runs as a dstack task (no dispatch, no runner), Issues
 * for the `/spark` comments (always enabled here), and the webhook events the intake reads
 * (`push` only where merge CI is on).
 */
export function requirements(config: SparkConfig, repo: string) {
  const task = ciModeForRepo(config, repo) === 'task';
  const permissions: { key: string; access: 'read' | 'write' }[] = [
    ...(task ? [] : [{ key: 'actions', access: 'write' as const }]),
    { key: 'checks', access: 'write' },
    { key: 'contents', access: 'read' },
    { key: 'metadata', access: 'read' },
    { key: 'pull_requests', access: 'read' },
    { key: 'issues', access: 'read' },
    ...(task
      ? []
      : [
          {
            key: config.github.runnerScope === 'org' ? 'organization_self_hosted_runners' : 'administration',
            access: 'write' as const,
          },
        ]),
  ];
  // `push` feeds merge CI, which a repository may switch off (`mergeCi: false`)
  const events = [
    'pull_request',
    'issue_comment',
    ...(mergeCiForRepo(config, repo) ? ['push'] : []),
    ...(task ? [] : ['workflow_job']),
  ];
  return { task, permissions, events };
}

/** A check GitHub could not answer (unreachable, 5xx, bad credentials): it fails, it does not pass. */
export const githubDown = (id: ReadinessCheck['id'], what: string, e: GitHubError): ReadinessCheck => ({
  id,
  status: 'fail',
  summary: `could not ${what}: ${e.message}`,
  fix:
    e.status === 0 || e.retryable
      ? 'check again when GitHub answers (github.apiUrl, the network path, GitHub status)'
      : "check github.apiUrl and the App's id and private key (SPARK_GITHUB_APP_ID, SPARK_GITHUB_PRIVATE_KEY)",
});

/** A check an earlier failure kept from running: the gate cannot vouch for it, so it fails. */
export const notChecked = (id: ReadinessCheck['id'], why: string, fix: string): ReadinessCheck => ({
  id,
  status: 'fail',
  summary: `not checked: ${why}`,
  fix,
});

/** The fields of GitHub's installation object (REST "Get an installation for the authenticated app") read here. */
export interface Installation {
  id: number;
  account: { login?: string } | null;
  permissions: Record<string, string>;
  events: string[];
  repository_selection: 'all' | 'selected';
  suspended_at: string | null;
}

/** A GitHub call whose refusal is a value to check, not an exception. */
export async function ask<T>(p: Promise<{ data: T }>): Promise<{ data: T } | GitHubError> {
  try {
    return await p;
  } catch (e) {
    if (e instanceof GitHubError) return e;
    throw e;
  }
}

/** The installation, its permissions and events against what `repo` needs. */
export function permissionsCheck(config: SparkConfig, repo: string, inst: Installation): ReadinessCheck {
  const need = requirements(config, repo);
  const lacking = need.permissions.filter((n) => !holds(inst.permissions, n.key, n.access));
  const missingEvents = need.events.filter((e) => !inst.events.includes(e));
  const problems: string[] = [];
  const fixes: string[] = [];
  const account = inst.account?.login ?? repo.split('/')[0]!;
  if (inst.suspended_at) {
    problems.push(`the installation on ${account} is suspended (since ${inst.suspended_at})`);
    fixes.push(`unsuspend it (${account}'s settings → GitHub Apps → Configure)`);
  }
  if (lacking.length) {
    problems.push(
      `the installation lacks ${lacking
        .map(
          (n) =>
            `${permissionName(n.key)}: ${accessWords(n.access)}${inst.permissions[n.key] ? ` (holds ${inst.permissions[n.key]})` : ''}`,
        )
        .join(', ')}`,
    );
    fixes.push(
      `grant ${lacking.length === 1 ? 'it' : 'them'} in the App's settings (Permissions & events; docs/github-app.md "Minimum permissions"${config.github.runnerScope === 'org' ? '' : ', manifest docs/github-app-manifest.repo-scope.json'}), then accept the new permissions on the installation on ${account}`,
    );
  }
  if (missingEvents.length) {
    problems.push(`the App is not subscribed to ${missingEvents.join(', ')}`);
    fixes.push(
      `subscribe it in the App's settings (Permissions & events → Subscribe to events; docs/github-app.md "Webhook events")`,
    );
  }
  if (problems.length)
    return { id: 'permissions', status: 'fail', summary: problems.join('; '), fix: fixes.join('; ') };
  const held = need.permissions.map((n) => `${permissionName(n.key)}: ${n.access}`).join(', ');
  if (inst.repository_selection === 'all')
    return {
      id: 'permissions',
      status: 'warn',
      summary: `installation ${inst.id} holds ${held}, but it is installed on every repository of ${account}`,
      fix: `install it on the approved repositories only (${account}'s settings → GitHub Apps → Configure → Repository access: Only select repositories)`,
    };
  return {
    id: 'permissions',
    status: 'ok',
    summary: `installation ${inst.id} holds ${held}; subscribed to ${need.events.join(', ')}`,
    fix: null,
  };
}

/** The configured runner group exists, is restricted to selected repositories and includes `repo`. */
export async function runnerGroupCheck(
  port: ReadinessPort,
  repo: string,
  installationId: number,
  held: Record<string, string>,
): Promise<ReadinessCheck> {
  const gh = port.config.github;
  if (requirements(port.config, repo).task)
    return {
      id: 'runner-group',
      status: 'ok',
      summary: `not used: ${repo}'s CI runs as a dstack task (no runner is registered)`,
      fix: null,
    };
  if (gh.runnerScope === 'repo')
    return {
      id: 'runner-group',
      status: 'ok',
      summary: `repository runners (runnerScope "repo") take jobs of ${repo} only; no runner group to restrict`,
      fix: null,
    };
  const org = repo.split('/')[0]!;
  const group = runnerGroupIdOf(port.config);
  if (!holds(held, 'organization_self_hosted_runners', 'read'))
    return notChecked(
      'runner-group',
      `reading runner group ${group} of ${org} needs Organization → Self-hosted runners, which the installation lacks`,
      'grant it (see permissions)',
    );
  const g = await ask(
    port.client.request<{ name: string; visibility: string; allows_public_repositories?: boolean }>(
      'GET',
      `/orgs/${org}/actions/runner-groups/${group}`,
      { installationId },
    ),
  );
  if (g instanceof GitHubError) {
    if (g.status === 404)
      return {
        id: 'runner-group',
        status: 'fail',
        summary: `runner group ${group} (github.runnerGroupId) does not exist in ${org}`,
        fix: `create a runner group for the Spark runners (${org}'s settings → Actions → Runner groups → New runner group, Repository access: selected repositories, add ${repo}) and set github.runnerGroupId to its id (the number in the group's URL)`,
      };
    return githubDown('runner-group', `read runner group ${group} of ${org}`, g);
  }
  const name = `"${g.data.name}" (${group})`;
  const restrict = `${org}'s settings → Actions → Runner groups → ${g.data.name} → Repository access: Selected repositories, with ${repo} among them`;
  if (g.data.visibility !== 'selected')
    return {
      id: 'runner-group',
      status: 'fail',
      summary: `runner group ${name} is open to ${g.data.visibility === 'private' ? 'all private' : 'all'} repositories of ${org}: any of them could take a Spark runner`,
      fix: `restrict it: ${restrict} (or create a group for the Spark runners only and set github.runnerGroupId)`,
    };
  let found = false;
  for (let page = 1; page <= 50 && !found; page++) {
    const r = await ask(
      port.client.request<{ repositories: { full_name: string }[] }>(
        'GET',
        `/orgs/${org}/actions/runner-groups/${group}/repositories?per_page=100&page=${page}`,
        { installationId },
      ),
    );
    if (r instanceof GitHubError)
      return githubDown('runner-group', `list the repositories of runner group ${name}`, r);
    const items = r.data.repositories;
    found = items.some((x) => x.full_name.toLowerCase() === repo.toLowerCase());
    if (items.length < 100) break;
  }
  if (!found)
    return {
      id: 'runner-group',
      status: 'fail',
      summary: `runner group ${name} does not include ${repo}, so its runners would never take the repository's jobs`,
      fix: `add it: ${restrict}`,
    };
  if (g.data.allows_public_repositories)
    return {
      id: 'runner-group',
      status: 'warn',
      summary: `runner group ${name} includes ${repo} but allows public repositories`,
      fix: `turn off "Allow public repositories" on the group (docs/github-app.md "Runner labels and runner-group scoping")`,
    };
  return {
    id: 'runner-group',
    status: 'ok',
    summary: `runner group ${name} is restricted to selected repositories and includes ${repo}`,
    fix: null,
  };
}

/** The dispatched workflow keeps the contract (functions/github/workflow-contract.ts). */
export async function workflowCheck(
  port: ReadinessPort,
  repo: string,
  workflow: string,
  branch: string,
  installationId: number,
  held: Record<string, string>,
): Promise<ReadinessCheck> {
  if (requirements(port.config, repo).task)
    return {
      id: 'workflow',
      status: 'ok',
      summary: `not used: ${repo}'s CI runs as a dstack task (no workflow is dispatched)`,
      fix: null,
    };
  if (!holds(held, 'contents', 'read'))
    return notChecked(
      'workflow',
      `reading .github/workflows/${workflow} needs Contents: read`,
      'grant it (see permissions)',
    );
  let c: Awaited<ReturnType<typeof readWorkflowContract>>;
  try {
    c = await readWorkflowContract(port, repo, workflow, branch, installationId);
  } catch (e) {
    if (e instanceof GitHubError) return githubDown('workflow', `read .github/workflows/${workflow}`, e);
    throw e;
  }
  const where = `.github/workflows/${workflow} on ${branch}`;
  if (!c.ok)
    return {
      id: 'workflow',
      status: 'fail',
      summary: `${where} breaks the workflow contract: ${c.problems.length} problem${c.problems.length === 1 ? '' : 's'}`,
      fix: c.problems.join('; '),
    };
  if (c.warnings.length)
    return {
      id: 'workflow',
      status: 'warn',
      summary: `${where} keeps the contract (sends ${c.sends.join(', ')}), but ${c.warnings.join('; ')}`,
      // the GitHub expression is text for the person, not a template of ours
      fix: `declare a string input \`nonce\` and add "spark-${'${{'} inputs.reservation_id }}-${'${{'} inputs.nonce }}" to runs-on (workflows-templates/spark-pr-test.yml does)`,
    };
  return {
    id: 'workflow',
    status: 'ok',
    summary: `${where} declares ${c.sends.join(', ')}`,
    fix: null,
  };
}

export function labelsCheck(
  port: ReadinessPort,
  held: Record<string, string>,
  known: boolean,
): ReadinessCheck & {
  toCreate: LabelSpec[];
} {
  const labels = sparkLabels(port.config.github);
  const list = labels.map((l) => `${l.name} #${l.color}`).join(', ');
  if (known && (holds(held, 'issues', 'write') || holds(held, 'pull_requests', 'write')))
    return {
      id: 'labels',
      status: 'ok',
      summary: `the App may create labels: enable creates those missing of ${list}`,
      fix: null,
      toCreate: [],
    };
  return {
    id: 'labels',
    status: 'warn',
    summary: `the App may not create labels (creating one needs Issues or Pull requests: write): a maintainer creates ${list}`,
    fix: `create the missing ones in the repository's Issues → Labels: ${labels.map((l) => `${l.name} (#${l.color}, "${l.description}")`).join(', ')}`,
    toCreate: labels,
  };
}
