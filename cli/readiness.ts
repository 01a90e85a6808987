import {
  DoctorResponse,
  EnableRefused,
  EnableResponse,
  formatCheck,
  OVERRIDABLE_CHECKS,
  type ReadinessReport,
} from '../core/protocol/readiness.ts';
import type { CommandContext, CommandIo } from './commands.ts';
import { CliError, EXIT, usageError } from './errors.ts';

/**
 * `sparkctl repo enable` and `sparkctl doctor github`: the rollout readiness checks
 * (docs/adr/0165-enable-is-a-gate.md) through the operator API. Each check is one line, `ok`,
 * `warn` or `fail` with its fix. Not to be confused with `sparkctl doctor` alone, the in-job
 * provisioning doctor of this machine (cli/doctor.ts).
 */

const REPO = /^([A-Za-z0-9_.-]+)\/([A-Za-z0-9_.-]+)$/;

function repoPath(full: string): string {
  const m = REPO.exec(full);
  if (!m) throw usageError(`invalid repository '${full}': expected OWNER/NAME`);
  return `${encodeURIComponent(m[1]!)}/${encodeURIComponent(m[2]!)}`;
}

/** `--override hosts,deckard`: check ids, each one that may be overridden. */
export function parseOverride(text: string | undefined): string[] | undefined {
  if (text == null) return undefined;
  const ids = text
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  const bad = ids.filter((i) => !(OVERRIDABLE_CHECKS as readonly string[]).includes(i));
  if (!ids.length || bad.length)
    throw usageError(
      `invalid --override '${text}': a comma list of ${OVERRIDABLE_CHECKS.join(', ')} (the installation and the labels cannot be overridden)`,
    );
  return [...new Set(ids)];
}

function printReport(io: Pick<CommandIo, 'out'>, r: ReadinessReport, indent = '') {
  for (const c of r.checks) io.out(`${indent}${formatCheck(c)}`);
}

const tally = (reports: ReadinessReport[]) => {
  const checks = reports.flatMap((r) => r.checks);
  return {
    total: checks.length,
    failed: checks.filter((c) => c.status === 'fail'),
    warned: checks.filter((c) => c.status === 'warn').length,
  };
};

/** `sparkctl repo enable OWNER/NAME [--pair] [--override checks] [--json]` */
export async function cmdRepoEnable({ client, io, flags, args }: CommandContext): Promise<number> {
  const full = args[0];
  if (!full)
    throw usageError(
      'missing repository: usage: sparkctl repo enable OWNER/NAME [--pair] [--override checks]',
    );
  const path = repoPath(full);
  const override = parseOverride(flags.override);
  let res: EnableResponse;
  try {
    res = await client.call('POST', `/api/v1/repositories/${path}/enable`, EnableResponse, {
      ...(flags.pair ? { pairEnabled: true } : {}),
      ...(override ? { override } : {}),
    });
  } catch (e) {
    const refusal = e instanceof CliError && e.code === 'not_ready' ? EnableRefused.safeParse(e.body) : null;
    if (!refusal?.success) throw e;
    const { readiness } = refusal.data;
    if (flags.json) io.out(JSON.stringify(refusal.data, null, 2));
    else printReport(io, readiness);
    const failed = tally([readiness]).failed;
    const overridable = failed.filter((f) => (OVERRIDABLE_CHECKS as readonly string[]).includes(f.id));
    throw new CliError(
      EXIT.conflict,
      `enable refused for ${full}, nothing was changed: ${failed.length} check${failed.length === 1 ? '' : 's'} failed (${failed.map((f) => f.id).join(', ')}); fix each as its line says${overridable.length === failed.length ? `, or override with --override ${[...new Set([...(override ?? []), ...overridable.map((f) => f.id)])].join(',')} (recorded in the history)` : ''}`,
      'not_ready',
      e instanceof CliError ? e.body : undefined,
    );
  }
  if (flags.json) {
    io.out(JSON.stringify(res, null, 2));
  } else {
    io.out(`enabled ${res.repository.fullName}${res.repository.pairEnabled ? ' with pair tests' : ''}`);
    printReport(io, res.readiness, '  ');
    const labels = [
      res.labelsCreated.length ? `created ${res.labelsCreated.join(', ')}` : null,
      res.labelsExisting.length ? `already there ${res.labelsExisting.join(', ')}` : null,
      res.labelsFailed.length ? `FAILED ${res.labelsFailed.join(', ')}` : null,
    ].filter(Boolean);
    if (labels.length) io.out(`  labels: ${labels.join('; ')}`);
    if (res.labelsToCreate.length)
      io.out(
        `  create by hand (the App may not): ${res.labelsToCreate.map((l) => `${l.name} #${l.color}`).join(', ')}`,
      );
    if (res.overridden.length)
      io.out(`  overridden (recorded in the history): ${res.overridden.map((o) => o.id).join(', ')}`);
  }
  return res.labelsFailed.length ? EXIT.failed : EXIT.ok;
}

/**
 * The doctor's report as lines (the fleet, then each repository, one line per check and a
 * summary); answers the exit code: 1 when a check failed, else 0. Shared with
 * `npm run admin -- check` (scripts/admin.ts).
 */
export function printDoctor(io: Pick<CommandIo, 'out'>, res: DoctorResponse, repo?: string): number {
  const t = tally([res.fleet, ...res.repositories]);
  io.out('fleet');
  printReport(io, res.fleet, '  ');
  if (!res.repositories.length)
    io.out('no repository is enabled (name one: sparkctl doctor github OWNER/NAME)');
  for (const r of res.repositories) {
    io.out(r.repository ?? '(repository)');
    printReport(io, r, '  ');
  }
  io.out(
    `doctor github: ${t.failed.length ? `${t.failed.length} of ${t.total} checks failed` : `all ${t.total} checks passed`}${t.warned ? `, ${t.warned} warning${t.warned === 1 ? '' : 's'}` : ''}${t.failed.length && repo ? `; enable ${repo} would refuse` : ''}`,
  );
  return t.failed.length ? EXIT.failed : EXIT.ok;
}

/** `sparkctl doctor github [OWNER/NAME] [--json]`: read-only; exit 1 when a check fails. */
export async function cmdDoctorGithub({ client, io, flags, args }: CommandContext): Promise<number> {
  const full = args[0];
  const res = await client.call(
    'GET',
    `/api/v1/doctor/github${full ? `/${repoPath(full)}` : ''}`,
    DoctorResponse,
  );
  if (!flags.json) return printDoctor(io, res, full);
  io.out(JSON.stringify(res, null, 2));
  return tally([res.fleet, ...res.repositories]).failed.length ? EXIT.failed : EXIT.ok;
}
