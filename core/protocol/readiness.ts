import * as z from 'zod';

/**
 * The readiness checks of a repository's Spark rollout (docs/github-app.md "Enabling a
 * repository", docs/adr/0165-enable-is-a-gate.md): what `enable` refuses on and what
 * `sparkctl doctor github` / `npm run admin -- check` report at any time. The controller answers
 * with these shapes and sparkctl validates them, so both sides agree on every field.
 */

/** Every check, in the order they are reported. */
export const READINESS_CHECKS = [
  'installation',
  'permissions',
  'runner-group',
  'workflow',
  'labels',
  'hosts',
  'dstack',
  'deckard',
] as const;
export type ReadinessCheckId = (typeof READINESS_CHECKS)[number];

/**
 * Checks an explicit override may pass over (`enable --override`), recorded in the audit log.
 * Not the installation (without it there is nothing to enable) and not the labels (never a
 * refusal: a maintainer creates them).
 */
export const OVERRIDABLE_CHECKS = [
  'permissions',
  'runner-group',
  'workflow',
  'hosts',
  'dstack',
  'deckard',
] as const satisfies readonly ReadinessCheckId[];
export type OverridableCheck = (typeof OVERRIDABLE_CHECKS)[number];

/** `ok`; `warn`: a protection lost or a step left to a person, never a refusal; `fail`: refuses. */
export const CHECK_STATUSES = ['ok', 'warn', 'fail'] as const;
export type CheckStatus = (typeof CHECK_STATUSES)[number];

export const ReadinessCheck = z.object({
  id: z.enum(READINESS_CHECKS),
  status: z.enum(CHECK_STATUSES),
  /** What was found, in one line. */
  summary: z.string(),
  /** The exact fix (a command, a setting, a GitHub page); null when there is nothing to do. */
  fix: z.string().nullable(),
});
export type ReadinessCheck = z.infer<typeof ReadinessCheck>;

/** A Spark label with the colour and description `enable` creates it with. */
export const LabelSpec = z.object({ name: z.string(), color: z.string(), description: z.string() });
export type LabelSpec = z.infer<typeof LabelSpec>;

export const ReadinessReport = z.object({
  /** `owner/name`; null for the fleet-wide checks alone. */
  repository: z.string().nullable(),
  /** No check failed. */
  ok: z.boolean(),
  checks: z.array(ReadinessCheck),
  /** Labels a maintainer creates by hand (the App may not): exact names and colours. */
  labelsToCreate: z.array(LabelSpec),
});
export type ReadinessReport = z.infer<typeof ReadinessReport>;

/**
 * `GET /api/v1/doctor/github[/:owner/:name]`: one report per repository (every enabled one when
 * none is named) and the fleet-wide checks (hosts, Deckard) once in `fleet`.
 */
export const DoctorResponse = z.object({
  ok: z.boolean(),
  fleet: ReadinessReport,
  repositories: z.array(ReadinessReport),
});
export type DoctorResponse = z.infer<typeof DoctorResponse>;

/** `POST /api/v1/repositories/:owner/:name/enable` */
export const EnableBody = z
  .object({
    pairEnabled: z.boolean().optional(),
    /** Refuse unless GitHub serves the repository through this installation. */
    installationId: z.number().int().positive().optional(),
    /** The dispatched workflow file (default `github.workflow`). */
    workflow: z
      .string()
      .regex(
        /^[A-Za-z0-9_.-]{1,200}$/,
        'a workflow is a file name under .github/workflows, e.g. "spark-pr-test.yml"',
      )
      .optional(),
    /** Failing checks to enable anyway (operator override, recorded with the enablement). */
    override: z
      .array(
        z.enum(OVERRIDABLE_CHECKS, {
          message: `override names checks among ${OVERRIDABLE_CHECKS.join(', ')} (the installation and the labels cannot be overridden)`,
        }),
      )
      .max(OVERRIDABLE_CHECKS.length)
      .optional(),
  })
  .strict();
export type EnableBody = z.infer<typeof EnableBody>;

export const RepositoryInfo = z.object({
  fullName: z.string(),
  installationId: z.number().nullable(),
  defaultBranch: z.string(),
  pairEnabled: z.boolean(),
  workflow: z.string(),
  enabled: z.boolean(),
});

export const EnableResponse = z.object({
  repository: RepositoryInfo,
  readiness: ReadinessReport,
  /** Failing checks the operator overrode (each also in the `repository.enabled` history row). */
  overridden: z.array(z.object({ id: z.enum(OVERRIDABLE_CHECKS), summary: z.string() })),
  labelsCreated: z.array(z.string()),
  labelsExisting: z.array(z.string()),
  /** Labels GitHub refused to create, with its status. */
  labelsFailed: z.array(z.string()),
  labelsToCreate: z.array(LabelSpec),
});
export type EnableResponse = z.infer<typeof EnableResponse>;

/** The 409 `not_ready` answer of a refused `enable`: nothing was changed. */
export const EnableRefused = z.object({
  error: z.object({ code: z.literal('not_ready'), message: z.string() }),
  readiness: ReadinessReport,
});
export type EnableRefused = z.infer<typeof EnableRefused>;

/** One line per check: `fail hosts        spark-1 never sent a heartbeat — fix: …`. */
export function formatCheck(c: ReadinessCheck): string {
  return `${c.status.padEnd(4)} ${c.id.padEnd(13)} ${c.summary}${c.fix ? ` — fix: ${c.fix}` : ''}`;
}

/** The checks of `report` that refuse. */
export const failing = (report: Pick<ReadinessReport, 'checks'>): ReadinessCheck[] =>
  report.checks.filter((c) => c.status === 'fail');
