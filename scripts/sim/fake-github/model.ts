import type { GitHubLatency } from './latency.ts';
import type { WorkflowDef } from './workflows.ts';

/**
 * The GitHub documentation each behaviour of the fake GitHub plays (cited as `DOC.x` across its
 * modules; server.ts gives the overview), and the state the fake keeps, in GitHub's terms.
 */
export const DOC = {
  dispatchEvent:
    'https://docs.github.com/en/actions/reference/workflows-and-actions/events-that-trigger-workflows#workflow_dispatch (GITHUB_SHA: last commit on the GITHUB_REF branch or tag)',
  dispatchApi:
    'https://docs.github.com/en/rest/actions/workflows#create-a-workflow-dispatch-event (return_run_details → 200 with workflow_run_id)',
  jit: 'https://docs.github.com/en/actions/reference/security/secure-use#using-just-in-time-runners (a JIT runner performs at most one job and is then removed automatically)',
  permission:
    'https://docs.github.com/en/rest/collaborators/collaborators#get-repository-permissions-for-a-user (permission: admin, write, read or none)',
  installationToken:
    'https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/generating-an-installation-access-token-for-a-github-app (expires after one hour; only the repositories of that installation)',
  jwt: 'https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/generating-a-json-web-token-jwt-for-a-github-app (iat 60 s in the past; exp no more than 10 minutes into the future)',
  pagination:
    'https://docs.github.com/en/rest/using-the-rest-api/using-pagination-in-the-rest-api (per_page default 30, max 100; Link rel=next/last)',
  labels:
    'https://docs.github.com/en/rest/issues/labels#create-a-label (422 already_exists; names compare case-insensitively)',
  runnerLabels:
    'https://docs.github.com/en/actions/how-tos/manage-runners/self-hosted-runners/apply-labels (labels are case-insensitive; a job needs a runner with all its labels)',
  notFound:
    'https://docs.github.com/en/rest/using-the-rest-api/troubleshooting-the-rest-api#404-not-found-for-an-existing-resource',
  runnerGroups:
    'https://docs.github.com/en/actions/how-tos/manage-runners/self-hosted-runners/manage-access (every organization has a "Default" group; a group serves all repositories or selected ones, and its runners take jobs only from those)',
  runnerScope:
    'https://docs.github.com/en/actions/concepts/runners/self-hosted-runners (a repository runner serves one repository; an organization runner the repositories its runner group allows)',
  failedDeliveries:
    'https://docs.github.com/en/webhooks/using-webhooks/handling-failed-webhook-deliveries (GitHub does not redeliver failed deliveries by itself; a failed delivery has a status other than OK)',
  hookDeliveries:
    'https://docs.github.com/en/rest/apps/webhooks#list-deliveries-for-an-app-webhook (App JWT; per_page max 100; cursor pagination with a Link header)',
  redeliver:
    'https://docs.github.com/en/rest/apps/webhooks#redeliver-a-delivery-for-an-app-webhook (App JWT; 202; the redelivery keeps the GUID, X-GitHub-Delivery)',
  revokeToken:
    'https://docs.github.com/en/rest/apps/installations#revoke-an-installation-access-token (DELETE /installation/token with the installation token itself; 204; "once an installation token is revoked, the token is invalidated and cannot be used")',
  cancelRun:
    'https://docs.github.com/en/rest/actions/workflow-runs#cancel-a-workflow-run (202 Accepted; 409 Conflict when the run can no longer be cancelled; GitHub Apps need actions: write)',
  cancelling:
    'https://docs.github.com/en/actions/how-tos/manage-workflow-runs/cancel-a-workflow-run#steps-github-takes-to-cancel-a-workflow-run (the server re-evaluates if conditions, sends the cancellation to the runners of running jobs, and the jobs end afterwards; the REST status enum of a run has no "cancelling")',
  workflowJobEvent:
    'https://docs.github.com/en/webhooks/webhook-events-and-payloads#workflow_job (queued when the job is created, in_progress when a runner starts it, completed when it ends)',
  permissions:
    'https://docs.github.com/en/rest/authentication/permissions-required-for-github-apps (each endpoint needs the listed App permission; scripts/sim/fake-github/permissions.ts)',
  notAccessible:
    'https://docs.github.com/en/rest/using-the-rest-api/troubleshooting-the-rest-api#resource-not-accessible (403 "Resource not accessible by integration": the token lacks the permission or the repository)',
  accessTokens:
    'https://docs.github.com/en/rest/apps/apps#create-an-installation-access-token-for-an-app (repositories or repository_ids narrow the token, at most 500; permissions narrow it and cannot exceed what the App was granted; the answer lists permissions, repository_selection and the repositories)',
  contents:
    'https://docs.github.com/en/rest/repos/contents#get-repository-content (a file: type file, encoding base64, content, sha; ref defaults to the default branch)',
  manifest:
    "https://docs.github.com/en/apps/sharing-github-apps/registering-a-github-app-from-a-manifest (default_permissions are the App's permissions)",
  manifestConversion:
    'https://docs.github.com/en/rest/apps/apps#create-a-github-app-from-a-manifest (no authentication; the temporary code from the manifest flow; the flow must be completed within one hour)',
  getInstallation:
    "https://docs.github.com/en/rest/apps/apps#get-an-installation-for-the-authenticated-app (App JWT; the installation's permissions, events, repository_selection, suspended_at; 404 for an installation the App does not have)",
  suspended:
    'https://docs.github.com/en/apps/maintaining-github-apps/suspending-a-github-app-installation (a suspended installation cannot be used: creating its access token answers 403 "This installation has been suspended", as octokit/octokit.rb#1307 records)',
} as const;

/**
 * A GitHub App registration the fake knows: the one under test ({@link FakeGitHub.appId}) and any
 * created through the manifest flow (app-manifest-flow.ts). Only the public half of its key is
 * kept: GitHub hands the private key out once and keeps only what verifies its JWTs.
 */
export interface FakeApp {
  id: number;
  slug: string;
  name: string;
  /** The account that owns the registration. */
  owner: { login: string; type: 'Organization' | 'User' };
  publicKey: string;
  /** `default_permissions` of its manifest: what every installation of it grants (DOC.manifest). */
  permissions: Record<string, string>;
  events: string[];
  description: string | null;
  /** The homepage (`url` of its manifest). */
  externalUrl: string;
  hookUrl: string | null;
  webhookSecret: string | null;
  clientId: string;
  createdAt: string;
}

export interface PullState {
  state: 'open' | 'closed';
  headSha: string;
  headRepo: string | null;
  labels: string[];
}

export interface RepoState {
  /** The repository's numeric id (what `repository_ids` names when a token is narrowed). */
  id: number;
  installationId: number;
  defaultBranch: string;
  visibility: 'private' | 'public';
  /** login → role_name */
  collaborators: Record<string, 'admin' | 'maintain' | 'write' | 'triage' | 'read'>;
  pulls: Record<number, PullState>;
  /** Tip of the default branch. */
  headSha: string;
  /** Other branches → tip SHA (the default branch is `headSha`). */
  branches: Record<string, string>;
  labels: Set<string>;
  /**
   * Workflow files by name (`spark-pr-test.yml`), as the dispatch API resolves `workflow_id` and
   * the contents API serves `.github/workflows/<name>`; default the shipped template.
   */
  workflows: Record<string, WorkflowDef>;
}

export interface WorkflowRun {
  id: number;
  repo: string;
  workflow: string;
  name: string;
  displayTitle: string;
  runNumber: number;
  runAttempt: number;
  event: 'workflow_dispatch';
  /** The dispatched ref's tip at dispatch time: never an input (DOC.dispatchEvent). */
  headSha: string;
  headBranch: string;
  inputs: Record<string, string>;
  status: 'queued' | 'in_progress' | 'completed';
  conclusion: string | null;
  createdAt: string;
  /**
   * When a cancellation was accepted (GitHub's clock, ms). The API shows no status for it (the
   * run's `status` enum has none), the run stays `queued`/`in_progress` until it completes
   * `cancelled` (DOC.cancelling).
   */
  cancelRequestedAt?: number;
}

export interface Job {
  id: number;
  runId: number;
  repo: string;
  name: string;
  labels: string[];
  headSha: string;
  headBranch: string;
  status: 'queued' | 'in_progress' | 'completed';
  conclusion: string | null;
  runnerId: number | null;
  runnerName: string | null;
  createdAt: string;
  startedAt: string | null;
  completedAt: string | null;
}

export interface Refusal {
  method: string;
  path: string;
  status: number;
  message: string;
}

export interface CheckRun {
  id: number;
  repo: string;
  head_sha: string;
  name: string;
  external_id: string | null;
  status: string;
  conclusion: string | null;
  output: { title: string | null; summary: string | null };
  updates: number;
}

export interface Runner {
  id: number;
  name: string;
  labels: string[];
  scope: string;
  runnerGroupId: number;
  busy: boolean;
  encodedJitConfig: string;
  /** The job a JIT runner took; it removes itself when that job completes (DOC.jit). */
  jobId: number | null;
}

/** One attempt of a webhook delivery, as the App's delivery log keeps it (DOC.hookDeliveries). */
export interface HookDelivery {
  id: number;
  /** The App whose webhook sent it (its delivery log); default the App under test. */
  appId?: number;
  /** The `X-GitHub-Delivery` GUID; a redelivery keeps it (DOC.redeliver). */
  guid: string;
  event: string;
  action: string | null;
  deliveredAt: string;
  redelivery: boolean;
  /** The receiver's HTTP status; 0 when it did not answer. */
  statusCode: number;
  body: string;
}

export interface Failure {
  method?: string;
  path: RegExp;
  status: number;
  headers?: Record<string, string>;
  body?: unknown;
  times: number;
}

/** The App manifest docs/github-app.md tells operators to create the App from. */
export const DEFAULT_MANIFEST = 'docs/github-app-manifest.json';

export interface FakeGitHubOptions {
  /** App manifest (path in this repository) whose `default_permissions` the App holds. */
  manifest?: string;
  /** GitHub's modelled time (latency.ts); default none: every call is answered at once. */
  latency?: GitHubLatency | null;
}

/** An installation access token as GitHub keeps it (DOC.accessTokens). */
export interface InstallationToken {
  installationId: number;
  expiresAt: number;
  /** Lower-case `owner/name`s the token was narrowed to; null: every repository of the installation. */
  repositories: string[] | null;
  permissions: Record<string, string>;
  /** When `DELETE /installation/token` revoked it (GitHub's clock, ms); dead from then on. */
  revokedAt?: number;
}

export interface RecordedRequest {
  method: string;
  path: string;
  body: unknown;
  status: number;
  auth: 'app' | 'installation' | 'none';
  /** The installation token the request presented (a test's secret; for leak and revoke checks). */
  token?: string;
  /** Wall-clock time the request arrived (ms). */
  at: number;
  /** GitHub's modelled time to answer it (ms; `latency`), spent before it was handled. */
  latencyMs: number;
  /** When the answer was written (ms): after the modelled latency and the fake's own checks. */
  answeredAt: number;
}

/** A code of the manifest flow waiting for its conversion: the created App and the secrets GitHub hands out once (app-manifest-flow.ts). */
export interface ManifestCode {
  appId: number;
  /** PKCS#1 PEM, as GitHub's description shows it (app-manifest-flow.ts FLOW.conversion). */
  pem: string;
  clientSecret: string;
  expiresAt: number;
}
