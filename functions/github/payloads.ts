import * as z from 'zod';

/**
 * Zod schemas for the webhook payload fields the controller reads (and nothing more: unknown
 * fields pass through untouched, so GitHub adding fields never breaks intake).
 */

/**
 * A full commit SHA: it is interpolated into GitHub URLs and shown as the
 * tested commit, so anything else (`../../../orgs/acme`) is refused at intake.
 */
export const CommitSha = z
  .string()
  .regex(/^[0-9a-f]{40}$/, 'expected a full 40-character lower-case commit SHA');

const user = z.object({ login: z.string(), type: z.string().optional() });
const repository = z.object({
  full_name: z.string().regex(/^[^/\s]+\/[^/\s]+$/),
  default_branch: z.string().optional(),
});
const installation = z.object({ id: z.number().int() }).nullish();
const label = z.object({ name: z.string() });

export const PullRequestEvent = z.object({
  action: z.string(),
  number: z.number().int(),
  label: label.optional(),
  sender: user,
  repository,
  installation,
  pull_request: z.object({
    number: z.number().int(),
    state: z.string(),
    labels: z.array(label).default([]),
    head: z.object({
      sha: CommitSha,
      ref: z.string(),
      repo: z.object({ full_name: z.string() }).nullable(),
    }),
    base: z.object({ ref: z.string(), repo: z.object({ full_name: z.string() }) }),
  }),
});
export type PullRequestEvent = z.infer<typeof PullRequestEvent>;

export const IssueCommentEvent = z.object({
  action: z.string(),
  sender: user,
  repository,
  installation,
  issue: z.object({
    number: z.number().int(),
    state: z.string().optional(),
    // present only when the issue is a pull request
    pull_request: z.object({ url: z.string().optional() }).nullish(),
  }),
  comment: z.object({ id: z.number().int(), body: z.string().nullable() }),
});
export type IssueCommentEvent = z.infer<typeof IssueCommentEvent>;

export const PushEvent = z.object({
  ref: z.string(),
  after: CommitSha,
  deleted: z.boolean().optional(),
  sender: user,
  repository,
  installation,
});
export type PushEvent = z.infer<typeof PushEvent>;

export const WorkflowJobEvent = z.object({
  action: z.string(),
  sender: user.optional(),
  repository,
  installation,
  workflow_job: z.object({
    id: z.number().int(),
    run_id: z.number().int(),
    /** Absent in older payloads: read as attempt 1. */
    run_attempt: z.number().int().positive().optional(),
    head_sha: z.string(),
    status: z.string(),
    conclusion: z.string().nullable(),
    labels: z.array(z.string()),
    runner_name: z.string().nullable().optional(),
    html_url: z.string().optional(),
  }),
});
export type WorkflowJobEvent = z.infer<typeof WorkflowJobEvent>;

/** The subset of `GET /repos/{o}/{r}/pulls/{n}` the controller reads. */
export const PullRequestResource = z.object({
  number: z.number().int(),
  state: z.string(),
  labels: z.array(label).default([]),
  head: z.object({ sha: CommitSha, repo: z.object({ full_name: z.string() }).nullable() }),
  base: z.object({ repo: z.object({ full_name: z.string() }) }),
});
export type PullRequestResource = z.infer<typeof PullRequestResource>;
