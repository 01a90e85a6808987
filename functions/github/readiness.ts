import {
  type DoctorResponse,
  type LabelSpec,
  READINESS_CHECKS,
  type ReadinessCheck,
  type ReadinessReport,
} from '../../core/protocol/readiness.ts';
import { GitHubError } from './client.ts';
import { checkDstack, checkFleet } from './readiness-fleet.ts';
import {
  ask,
  githubDown,
  holds,
  type Installation,
  labelsCheck,
  notChecked,
  permissionsCheck,
  type ReadinessPort,
  runnerGroupCheck,
  workflowCheck,
} from './readiness-github.ts';

export { holds, type ReadinessPort, requirements, sparkLabels } from './readiness-github.ts';

/**
 * Whether a repository is ready for Spark work (docs/adr/0165-enable-is-a-gate.md): the checks
 * `enable` refuses on, and `sparkctl doctor github` / `npm run admin -- check` report at any time.
 * One function over a small port (the ledger for reads, the configuration, the GitHub client), so
 * the operator route, the doctor route and the admin script run exactly the same checks.
 *
 * It sends no request the installation cannot serve: the installation's real permissions come
 * first, with the App's JWT (`GET /app/installations/{id}`, REST "Get an installation for the
 * authenticated app", https://docs.github.com/rest/apps/apps#get-an-installation-for-the-authenticated-app),
 * and every later call is made only when they cover it (endpoint permissions:
 * https://docs.github.com/en/rest/authentication/permissions-required-for-github-apps). Nothing
 * here writes, neither to the ledger nor to GitHub.
 */

/** What the repository checks found, for `enable` to act on. */
export interface RepositoryFacts {
  checks: ReadinessCheck[];
  installationId: number | null;
  fullName: string | null;
  defaultBranch: string | null;
  /** The installation's permissions (empty when unknown). */
  held: Record<string, string>;
  labelsToCreate: LabelSpec[];
}

/**
 * The repository's own GitHub checks: installation, permissions and events, runner group,
 * workflow contract and labels (its dstack enrolment reads the ledger: readiness-fleet.ts).
 * `installationId`: refuse unless GitHub serves the repository through it; `workflow`: the
 * dispatched file (default `github.workflow`).
 */
export async function checkRepository(
  port: ReadinessPort,
  repo: string,
  opts: {
    installationId?: number | undefined;
    workflow?: string | null | undefined;
    /** The installation id is the one the ledger recorded at enable (the doctor), not a request's. */
    recorded?: boolean;
  } = {},
): Promise<RepositoryFacts> {
  const out: RepositoryFacts = {
    checks: [],
    installationId: null,
    fullName: null,
    defaultBranch: null,
    held: {},
    labelsToCreate: [],
  };
  const workflow = opts.workflow ?? port.config.github.workflow;
  const finish = (blocked: ReadinessCheck | null): RepositoryFacts => {
    // checks that could not run because an earlier one failed say so, one line each
    if (blocked)
      for (const id of ['permissions', 'runner-group', 'workflow'] as const)
        if (!out.checks.some((c) => c.id === id))
          out.checks.push(notChecked(id, blocked.summary, blocked.fix ?? 'fix the check above'));
    if (!out.checks.some((c) => c.id === 'labels')) {
      const l = labelsCheck(port, out.held, false);
      out.labelsToCreate = l.toCreate;
      out.checks.push({ id: l.id, status: l.status, summary: l.summary, fix: l.fix });
    }
    return out;
  };

  if (!port.client.configured) {
    const c: ReadinessCheck = {
      id: 'installation',
      status: 'fail',
      summary: 'the GitHub App is not configured on this controller',
      fix: 'set SPARK_GITHUB_APP_ID and SPARK_GITHUB_PRIVATE_KEY (docs/github-app.md "Create the App")',
    };
    out.checks.push(c);
    return finish(c);
  }
  const found = await ask(
    port.client.request<{ id: number }>('GET', `/repos/${repo}/installation`, { as: 'app' }),
  );
  if (found instanceof GitHubError) {
    const c: ReadinessCheck =
      found.status === 404
        ? {
            id: 'installation',
            status: 'fail',
            summary: `the GitHub App is not installed on ${repo}`,
            fix: `install it there (the App's page → Install App → ${repo.split('/')[0]} → Only select repositories: add ${repo}), then run this again`,
          }
        : githubDown('installation', `look up the App's installation on ${repo}`, found);
    out.checks.push(c);
    return finish(c);
  }
  const installationId = found.data.id;
  if (opts.installationId != null && opts.installationId !== installationId) {
    const c: ReadinessCheck = {
      id: 'installation',
      status: 'fail',
      summary: `${repo} is served by App installation ${installationId}, not ${opts.installationId}`,
      fix: opts.recorded
        ? `enable it again so the controller records installation ${installationId}: sparkctl repo enable ${repo}`
        : `name installation ${installationId} (or leave installationId out)`,
    };
    out.checks.push(c);
    return finish(c);
  }
  out.installationId = installationId;
  const inst = await ask(
    port.client.request<Installation>('GET', `/app/installations/${installationId}`, { as: 'app' }),
  );
  if (inst instanceof GitHubError) {
    const c = githubDown('installation', `read installation ${installationId}`, inst);
    out.checks.push(c);
    return finish(c);
  }
  out.held = { ...(inst.data.permissions ?? {}) };
  // a suspended installation gets no access token, and without Metadata no repository call
  // answers: nothing further is asked, the permissions line says why
  if (inst.data.suspended_at || !holds(out.held, 'metadata', 'read')) {
    const c = permissionsCheck(port.config, repo, inst.data);
    out.checks.push(
      {
        id: 'installation',
        status: 'ok',
        summary: `installed on ${repo} (installation ${installationId})`,
        fix: null,
      },
      c,
    );
    return finish(c);
  }
  const info = await ask(
    port.client.request<{ full_name: string; default_branch: string }>('GET', `/repos/${repo}`, {
      installationId,
    }),
  );
  if (info instanceof GitHubError) {
    const c = githubDown('installation', `read ${repo}`, info);
    out.checks.push(c);
    return finish(c);
  }
  out.fullName = info.data.full_name;
  out.defaultBranch = info.data.default_branch;
  out.checks.push({
    id: 'installation',
    status: 'ok',
    summary: `installed on ${out.fullName} (installation ${installationId}); default branch ${out.defaultBranch}`,
    fix: null,
  });
  out.checks.push(permissionsCheck(port.config, out.fullName, inst.data));
  out.checks.push(await runnerGroupCheck(port, out.fullName, installationId, out.held));
  out.checks.push(
    await workflowCheck(port, out.fullName, workflow, out.defaultBranch, installationId, out.held),
  );
  const l = labelsCheck(port, out.held, true);
  out.labelsToCreate = l.toCreate;
  out.checks.push({ id: l.id, status: l.status, summary: l.summary, fix: l.fix });
  return out;
}

const order = (checks: ReadinessCheck[]) =>
  [...checks].sort((a, b) => READINESS_CHECKS.indexOf(a.id) - READINESS_CHECKS.indexOf(b.id));

/** A report from its checks: `ok` when none failed. */
export function report(
  repository: string | null,
  checks: ReadinessCheck[],
  labelsToCreate: LabelSpec[] = [],
): ReadinessReport {
  const sorted = order(checks);
  return { repository, ok: sorted.every((c) => c.status !== 'fail'), checks: sorted, labelsToCreate };
}

/** Every check for `repo` (its own and the fleet's), as `enable` and the one-repository doctor run them. */
export async function checkReadiness(
  port: ReadinessPort,
  repo: string,
  opts: { installationId?: number | undefined; workflow?: string | null | undefined } = {},
): Promise<{ report: ReadinessReport; facts: RepositoryFacts }> {
  const facts = await checkRepository(port, repo, opts);
  const fleet = await checkFleet(port.ledger);
  const dstack = checkDstack(fleet.rows, port.config, facts.fullName ?? repo, port.ledger.clock());
  return {
    report: report(facts.fullName ?? repo, [...facts.checks, dstack, ...fleet.checks], facts.labelsToCreate),
    facts,
  };
}

/**
 * The doctor (`GET /api/v1/doctor/github[/:owner/:name]`, `npm run admin -- check`): the fleet's
 * checks once, then each repository's own — `repo`, or every enabled one — with what the ledger
 * recorded at its enable (installation, workflow). Reads only.
 */
export async function doctorReport(port: ReadinessPort, repo?: string): Promise<DoctorResponse> {
  const rows = await port.ledger.github.listRepositories();
  const targets = repo
    ? [{ fullName: repo, row: rows.find((r) => r.fullName.toLowerCase() === repo.toLowerCase()) ?? null }]
    : rows.filter((r) => r.disabledAt == null).map((row) => ({ fullName: row.fullName, row }));
  const fleet = await checkFleet(port.ledger);
  const repositories: ReadinessReport[] = [];
  for (const { fullName, row } of targets) {
    const facts = await checkRepository(port, fullName, {
      installationId: row?.installationId ?? undefined,
      workflow: row?.workflow,
      recorded: true,
    });
    const dstack = checkDstack(fleet.rows, port.config, facts.fullName ?? fullName, port.ledger.clock());
    repositories.push(report(facts.fullName ?? fullName, [...facts.checks, dstack], facts.labelsToCreate));
  }
  const fleetReport = report(null, fleet.checks);
  return { ok: fleetReport.ok && repositories.every((r) => r.ok), fleet: fleetReport, repositories };
}
