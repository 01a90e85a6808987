import * as z from 'zod';
import { CI_MODES } from '../model.ts';

/**
 * The host's evidence of one lease's run (ADR 0160): what the relay agent — its own user, never
 * the job's — observed itself and reports with `runner_exited`. The check run's verdict comes
 * from this, never from a receipt the job posts (a job receipt may add detail; where the two
 * disagree the check says so and fails, core/evidence.ts).
 */

/**
 * The job results a GitHub Actions runner prints when its job ends: actions/runner
 * `src/Sdk/DTWebApi/WebApi/TaskResult.cs` (`TaskResult`), printed by
 * `src/Runner.Listener/JobDispatcher.cs` as `<time>: Job <name> completed with result: <result>`.
 */
export const RUNNER_JOB_RESULTS = [
  'Succeeded',
  'SucceededWithIssues',
  'Failed',
  'Canceled',
  'Skipped',
  'Abandoned',
] as const;
export type RunnerJobResult = (typeof RUNNER_JOB_RESULTS)[number];

/** Results that count as a pass (GitHub maps both to the `success` conclusion). */
export function isPassingResult(r: RunnerJobResult | null): boolean {
  return r === 'Succeeded' || r === 'SucceededWithIssues';
}

const sha40 = z.string().regex(/^[0-9a-f]{40}$/, 'expected a full 40-character lower-case commit SHA');

/** One named host check line (the same shape as the in-job preflight's, agent/preflight/check.ts). */
export const HostCheckSchema = z
  .object({
    name: z.string().regex(/^[a-z0-9][a-z0-9:_.-]{0,59}$/, 'a check name like "gpu"'),
    ok: z.boolean(),
    /** A failed fatal check fails the preflight; a failed soft one only warns. */
    fatal: z.boolean(),
    detail: z.string().max(300),
  })
  .strict();
export type HostCheck = z.infer<typeof HostCheckSchema>;

/** The agent's own preflight, run right before it started the runner (or the CI task). */
export const HostPreflightSchema = z
  .object({
    ok: z.boolean(),
    /** Epoch ms when it ran (agent clock). */
    at: z.number().int().nonnegative(),
    checks: z.array(HostCheckSchema).max(20),
  })
  .strict();
export type HostPreflight = z.infer<typeof HostPreflightSchema>;

/** A plain relative path: segments of name characters, never `.` or `..`. */
const relPath = z
  .string()
  .max(200)
  .regex(
    /^(?!.*(^|\/)\.\.?(\/|$))[A-Za-z0-9_.-]+(\/[A-Za-z0-9_.-]+)*$/,
    'a relative path like "butter/butter"',
  );

/**
 * A checkout the agent found after the job: for a runner, `<repo>/<repo>` in the runner's work
 * folder (actions/runner `src/Runner.Worker/TrackingConfig.cs`: `WorkspaceDirectory =
 * Path.Combine(repoName, repoName)`); for a CI task, the task's `checkout`. `sha` is what its
 * `.git/HEAD` resolves to, read as files (no git of the PR's config ever runs), or null with why.
 */
export const WorkTreeSchema = z
  .object({
    path: relPath,
    sha: sha40.nullable(),
    detail: z.string().max(300),
  })
  .strict();
export type WorkTree = z.infer<typeof WorkTreeSchema>;

export const HostEvidenceSchema = z
  .object({
    version: z.literal(1),
    /** `runner`: a GitHub job on a runner the agent started; `task`: the agent's own CI task (ADR 0110). */
    mode: z.enum(CI_MODES),
    /** null when no preflight was recorded for this lease (it then cannot pass). */
    preflight: HostPreflightSchema.nullable(),
    runner: z
      .object({
        /**
         * The runner's own job result from its console (agent-owned capture of the runner's
         * stdout), or, for a task, its backend's exit status; null when none was seen.
         */
        result: z.enum(RUNNER_JOB_RESULTS).nullable(),
        /** The job's display name as the runner printed it. */
        job: z.string().max(200).nullable(),
        exitCode: z.number().int().nullable(),
        /** The agent stopped the runner (release, replacement) before it ended by itself. */
        stoppedByAgent: z.boolean(),
        detail: z.string().max(300),
      })
      .strict(),
    workTrees: z.array(WorkTreeSchema).max(8),
    /** Epoch ms when the agent gathered it (agent clock). */
    observedAt: z.number().int().nonnegative(),
  })
  .strict();
export type HostEvidence = z.infer<typeof HostEvidenceSchema>;

/** Parses a stored `host_evidence.evidence_json`; null when it is not in this shape. */
export function parseHostEvidence(json: string | null): HostEvidence | null {
  if (!json) return null;
  try {
    const parsed = HostEvidenceSchema.safeParse(JSON.parse(json));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
}
