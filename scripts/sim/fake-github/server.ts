import { createHash, createVerify, generateKeyPairSync, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { convertManifestCode, type ManifestCode } from './app-manifest-flow.ts';
import type { GitHubLatency } from './latency.ts';
import { checkRequest, checkResponse, matchOperation, warmValidators } from './operations.ts';
import {
  manifestEvents,
  manifestPermissions,
  narrowPermissions,
  requirementFor,
  satisfies,
} from './permissions.ts';
import { exampleOf, overlay } from './schema.ts';
import { webhookViolations } from './webhooks.ts';
import { loadWorkflow, type WorkflowDef } from './workflows.ts';

/**
 * A local fake of the GitHub REST calls the controller, the agent and the actions make, on
 * 127.0.0.1, answering from GitHub's own OpenAPI description (`@octokit/openapi`, extracted by
 * scripts/extract-openapi.ts; docs/adr/0125-fake-github-from-githubs-description.md). Every
 * request is matched to one operation of the description (anything else: 404) and its path and
 * query parameters and body are validated with ajv (operations.ts): a body the description
 * rejects gets GitHub's 422 `Invalid request.`, malformed JSON its 400. Every response is
 * validated against the operation's schema for its status, and webhook payloads the harnesses
 * send against GitHub's webhook description (webhooks.ts). Each mismatch lands in `violations`,
 * and `close()` throws while any is left, so the fake cannot drift from GitHub and no test can
 * forget to look. Responses start from the smallest schema-valid body and overlay the fields a
 * scenario needs.
 *
 * Beyond the schema, it plays the behaviours of GitHub the controller depends on, each with the
 * documentation it follows (the `DOC` links below):
 * - a `workflow_dispatch` run's `head_sha`/`head_branch` are the tip of the dispatched ref (the
 *   default branch), never a commit passed as an input (DOC.dispatchEvent);
 * - a dispatch is refused for an unknown workflow (404), an unknown ref, a missing required, an
 *   undeclared or an out-of-options input (422), checked against the workflow file itself;
 * - a JIT runner runs one job and then removes itself, so a later DELETE answers 404 (DOC.jit);
 * - a user who exists but is not a collaborator gets 200 with `none` (`read` on a public repo);
 *   only a user that does not exist is 404 (DOC.permission);
 * - installation tokens expire after one hour and open only their own installation's
 *   repositories (DOC.installationToken); App JWTs need `iat` in the past and `exp` at most 10
 *   minutes after it (DOC.jwt);
 * - `DELETE /installation/token`, authenticated with an installation token, revokes that very
 *   token: 204, and from then on every use of it (any endpoint, git over HTTP through
 *   `tokenScope`, a second revoke) is 401 "Bad credentials", as an unknown token is
 *   (DOC.revokeToken);
 * - list endpoints paginate with `per_page` (default 30, max 100), `page` and a `Link` header
 *   (DOC.pagination);
 * - label names are unique case-insensitively (DOC.labels); a job goes to a runner whose labels
 *   include all of the job's `runs-on` labels, compared case-insensitively (DOC.runnerLabels);
 * - cancelling a run answers 202 and ends its unfinished jobs `cancelled`; a completed run
 *   answers 409 (DOC.cancelRun);
 * - the App's delivery log lists every attempt newest first with cursor pagination, and a
 *   requested redelivery is sent again with the same GUID; a failed delivery is never retried by
 *   GitHub itself (DOC.hookDeliveries, DOC.redeliver, DOC.failedDeliveries);
 * - several Apps: the one under test and any created through the manifest flow
 *   (app-manifest-flow.ts). A JWT is checked against the key of the App its `iss` names, and an
 *   App reaches only its own installations and delivery log (DOC.jwt, DOC.installationToken);
 *   `POST /app-manifests/{code}/conversions` takes no authentication and answers a code once,
 *   within the hour (DOC.manifestConversion).
 * GitHub-shaped refusals that the OpenAPI description leaves out (its 404s, the dispatch 422s,
 * the 400/422 for a request it rejects) are recorded in `refused`; a rejected request is also a
 * violation (the caller sent something GitHub refuses), a dispatch refusal is not.
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

/** The workflow the controller dispatches, read from the template consuming repositories install. */
const sparkWorkflow = loadWorkflow(
  readFileSync(
    join(import.meta.dirname, '..', '..', '..', 'workflows-templates', 'spark-pr-test.yml'),
    'utf8',
  ),
);

const PAGINATED = new Set([
  'get /repos/{owner}/{repo}/actions/runners',
  'get /orgs/{org}/actions/runners',
  'get /orgs/{org}/actions/runner-groups/{runner_group_id}/repositories',
  'get /repos/{owner}/{repo}/commits/{ref}/check-runs',
  'get /repos/{owner}/{repo}/actions/runs',
  'get /repos/{owner}/{repo}/actions/workflows/{workflow_id}/runs',
  'get /repos/{owner}/{repo}/actions/runs/{run_id}/jobs',
]);

let appKeys: { privateKey: string; publicKey: string } | null = null;

/**
 * The App's RSA key pair, one per test process. The private key is PKCS#1 (`BEGIN RSA PRIVATE
 * KEY`), as GitHub hands it out (the App settings page's download; the example `pem` of "Create a
 * GitHub App from a manifest" in GitHub's REST description): a PKCS#8 key here would hide that
 * WebCrypto, the Worker's only crypto, cannot import PKCS#1. Generating a 2048-bit key costs 0.1–0.2 s of CPU
 * (measured), and suites that start a fake GitHub per test paid that for every test. Each fake
 * still verifies every JWT against this public key; no test depends on two fakes holding different
 * keys (they already share the App id; tokens and state are each fake's own).
 */
function appKeyPair(): { privateKey: string; publicKey: string } {
  appKeys ??= generateKeyPairSync('rsa', {
    modulusLength: 2048,
    privateKeyEncoding: { type: 'pkcs1', format: 'pem' },
    publicKeyEncoding: { type: 'spki', format: 'pem' },
  });
  return appKeys;
}

export class FakeGitHub {
  readonly appId = 424242;
  readonly privateKey: string;
  /** Every App registration: the one under test and those created from a manifest. */
  apps = new Map<number, FakeApp>();
  /** Installation id → the App it is an installation of; unlisted ones belong to {@link appId}. */
  installationApps = new Map<number, number>();
  /** Temporary codes of the manifest flow waiting for their conversion (app-manifest-flow.ts). */
  manifestCodes = new Map<string, ManifestCode>();
  server!: Server;
  url = '';
  repos = new Map<string, RepoState>();
  checkRuns: CheckRun[] = [];
  runners: Runner[] = [];
  dispatches: { repo: string; workflow: string; ref: string; inputs: Record<string, string> }[] = [];
  runnerGroups = new Map<number, { name: string; visibility: 'all' | 'selected'; repositories: string[] }>();
  /** Installation id → whether it was installed on all the account's repositories or selected ones. */
  installationSelection = new Map<number, 'all' | 'selected'>();
  /** Fault: what the next narrowed access tokens ignore (see {@link ignoreNextTokenNarrowing}). */
  private ignoreNarrowing: { repositories: boolean; permissions: boolean }[] = [];
  /** A runner group every repository added from now on joins (a harness's Spark group), or null. */
  joinRunnerGroup: number | null = null;
  requests: RecordedRequest[] = [];
  /**
   * Every way a request, a response or a webhook left GitHub's description (operations.ts,
   * webhooks.ts). {@link close} fails while any is left: a test that provokes one on purpose
   * asserts it and takes it with {@link takeViolations}.
   */
  violations: string[] = [];
  /** GitHub-shaped refusals (404/422) the OpenAPI description does not list: not violations. */
  refused: Refusal[] = [];
  failures: Failure[] = [];
  /**
   * Installation token → what it opens (DOC.accessTokens): its installation, expiry (ms), the
   * repositories it was narrowed to and its permissions.
   */
  tokens = new Map<string, InstallationToken>();
  /**
   * The App's permissions: the manifest's `default_permissions` (DOC.manifest); every
   * installation grants exactly these (the fake's installations accept what the App asks for).
   */
  readonly appPermissions: Record<string, string>;
  /** Installation id → when it was suspended (ISO): no access token for it (DOC.suspended). */
  suspendedInstallations = new Map<number, string>();
  /**
   * Every call GitHub refused for a missing permission or repository (403 "Resource not
   * accessible by integration"); each is also a violation, since a controller that sends a request
   * its token cannot serve is broken.
   */
  forbidden: Refusal[] = [];

  /**
   * What an installation token may do (for a test's git server, which GitHub's git endpoint
   * plays): null when it is unknown, expired or revoked.
   */
  tokenScope(token: string): { repositories: string[] | null; permissions: Record<string, string> } | null {
    const t = this.tokens.get(token);
    if (!t || t.expiresAt <= this.clock() || t.revokedAt !== undefined) return null;
    return { repositories: t.repositories, permissions: { ...t.permissions } };
  }
  runs: WorkflowRun[] = [];
  jobs: Job[] = [];
  /** Logins that do not exist on GitHub (every other login does). */
  ghostUsers = new Set<string>();
  /** Org login → installation id; defaults to the installation of the org's first repository. */
  orgInstallations = new Map<string, number>();
  /**
   * Called as GitHub sends the `workflow_job` webhooks (DOC.workflowJobEvent): `queued` for each
   * job when its run is created (dispatch; whether or not any runner exists), `in_progress` when a
   * runner picks it up, `completed` when it ends (a cancellation included). A harness delivers them.
   */
  onWorkflowJob: ((job: Job, action: 'queued' | 'in_progress' | 'completed') => void) | null = null;
  /** How long after an accepted cancellation its jobs end (GitHub's asynchronous cancel, DOC.cancelling). */
  cancelDelayMs = 25;
  private cancelTimers = new Set<ReturnType<typeof setTimeout>>();
  /** The App's webhook delivery log, oldest first (served newest first). */
  hookDeliveries: HookDelivery[] = [];
  /** Sends a delivery again with its GUID (the harness's webhook sender) when one is requested. */
  redeliver: ((d: HookDelivery) => Promise<void>) | null = null;
  /** GitHub's clock (ms); a harness shares its test clock so tokens and JWTs age with it. */
  clock: () => number = Date.now;
  /**
   * GitHub's modelled time (latency.ts): each REST call is answered its modelled latency after it
   * arrived (the wait comes before the request is handled, so its effect — a run created, a
   * runner registered — is there when the answer is), and harnesses hold each webhook for the
   * modelled delivery delay ({@link webhookDelayMs}). Validation is the same either way.
   */
  latency: GitHubLatency | null;
  private nextId = 1000;
  private runNumbers = new Map<string, number>();

  /**
   * `manifest`: the App manifest (a path in this repository) whose permissions the App holds;
   * default the one docs/github-app.md tells operators to use.
   */
  constructor(opts: FakeGitHubOptions = {}) {
    const { privateKey, publicKey } = appKeyPair();
    this.privateKey = privateKey;
    this.appPermissions = manifestPermissions(opts.manifest ?? DEFAULT_MANIFEST);
    this.apps.set(this.appId, {
      id: this.appId,
      slug: 'spark-controller',
      name: 'Spark Controller',
      owner: { login: 'acme', type: 'Organization' },
      publicKey,
      permissions: this.appPermissions,
      events: manifestEvents(opts.manifest ?? DEFAULT_MANIFEST),
      description: null,
      externalUrl: 'https://github.com/apps/spark-controller',
      hookUrl: null,
      webhookSecret: null,
      clientId: 'Iv1.0000000000000000',
      createdAt: new Date(0).toISOString(),
    });
    this.latency = opts.latency ?? null;
    // every organization has the "Default" runner group, open to all its repositories
    // (DOC.runnerGroups)
    this.runnerGroups.set(1, { name: 'Default', visibility: 'all', repositories: [] });
  }

  async start(): Promise<this> {
    warmValidators();
    this.server = createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  /**
   * Stops the server, then throws {@link FakeGitHubViolations} if any violation is left, so no
   * user of the fake can forget to check: every harness closes its fake.
   */
  async close(): Promise<void> {
    for (const t of this.cancelTimers) clearTimeout(t);
    this.cancelTimers.clear();
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
    if (this.violations.length) throw new FakeGitHubViolations(this.takeViolations());
  }

  /** Returns the recorded violations and forgets them (a test that provoked them asserts them). */
  takeViolations(): string[] {
    return this.violations.splice(0);
  }

  /** How long GitHub takes to deliver a webhook of `event` (`latency`; 0 without one): harnesses wait it out. */
  webhookDelayMs(event: string): number {
    return this.latency?.webhookDelayMs(event) ?? 0;
  }

  /** Records a webhook payload that is not what GitHub sends (webhooks.ts): harnesses call it. */
  checkWebhook(event: string, payload: unknown): void {
    this.violations.push(...webhookViolations(event, payload));
  }

  addRepo(fullName: string, over: Partial<RepoState> = {}): RepoState {
    const st: RepoState = {
      id: this.nextId++,
      installationId: 77,
      defaultBranch: 'main',
      visibility: 'private',
      collaborators: {},
      pulls: {},
      headSha: 'a'.repeat(40),
      branches: {},
      labels: new Set(),
      workflows: { 'spark-pr-test.yml': sparkWorkflow },
      ...over,
    };
    this.repos.set(fullName.toLowerCase(), st);
    const org = fullName.split('/')[0]!.toLowerCase();
    if (!this.orgInstallations.has(org)) this.orgInstallations.set(org, st.installationId);
    // the harness's runner group restricted to the enabled repositories (docs/github-app.md)
    if (this.joinRunnerGroup != null) this.addToRunnerGroup(this.joinRunnerGroup, fullName);
    return st;
  }

  /**
   * A runner group of the organization: `all` repositories, or the `selected` ones listed
   * (DOC.runnerGroups).
   */
  addRunnerGroup(
    id: number,
    name: string,
    visibility: 'all' | 'selected',
    repositories: string[] = [],
  ): void {
    this.runnerGroups.set(id, { name, visibility, repositories: [...repositories] });
  }

  /** Gives a `selected` runner group access to one more repository. */
  addToRunnerGroup(id: number, fullName: string): void {
    const g = this.runnerGroups.get(id);
    if (!g) throw new TypeError(`no runner group ${id}`);
    if (!g.repositories.some((r) => r.toLowerCase() === fullName.toLowerCase()))
      g.repositories.push(fullName);
  }

  /**
   * Whether `runner` may take jobs of `repo`: a repository runner only its own repository's; an
   * organization runner those of its organization that its runner group allows — every one for a
   * group open to all repositories, else the group's selected repositories (DOC.runnerScope,
   * DOC.runnerGroups).
   */
  private serves(runner: Runner, repo: string): boolean {
    const lower = repo.toLowerCase();
    if (runner.scope.startsWith('repo:')) return runner.scope.slice(5).toLowerCase() === lower;
    if (runner.scope.slice(4).toLowerCase() !== lower.split('/')[0]) return false;
    const g = this.runnerGroups.get(runner.runnerGroupId);
    if (!g) return false;
    return g.visibility === 'all' || g.repositories.some((r) => r.toLowerCase() === lower);
  }

  /**
   * A registered runner picks up the oldest queued job of a repository it serves whose labels it
   * carries (all of them, case-insensitively: DOC.runnerLabels); null when none fits. The job is
   * in_progress on it.
   */
  pickUp(runnerName: string): Job | null {
    const runner = this.runners.find((r) => r.name === runnerName);
    if (!runner || runner.busy || runner.jobId != null) return null;
    const have = new Set(runner.labels.map((l) => l.toLowerCase()));
    const job = this.jobs.find(
      (j) =>
        j.status === 'queued' &&
        !this.runs.find((r) => r.id === j.runId)?.cancelRequestedAt &&
        this.serves(runner, j.repo) &&
        j.labels.every((l) => have.has(l.toLowerCase())),
    );
    if (!job) return null;
    const now = new Date(this.clock()).toISOString();
    Object.assign(job, {
      status: 'in_progress',
      runnerId: runner.id,
      runnerName: runner.name,
      startedAt: now,
    });
    runner.busy = true;
    runner.jobId = job.id;
    const run = this.runs.find((r) => r.id === job.runId);
    if (run) run.status = 'in_progress';
    this.onWorkflowJob?.(job, 'in_progress');
    return job;
  }

  /** Completes a job; its JIT runner removes itself right after (DOC.jit). */
  completeJob(jobId: number, conclusion: 'success' | 'failure' | 'cancelled' = 'success'): Job {
    const job = this.jobs.find((j) => j.id === jobId);
    if (!job) throw new TypeError(`no job ${jobId}`);
    Object.assign(job, {
      status: 'completed',
      conclusion,
      completedAt: new Date(this.clock()).toISOString(),
    });
    this.runners = this.runners.filter((r) => r.jobId !== jobId);
    const run = this.runs.find((r) => r.id === job.runId);
    const siblings = this.jobs.filter((j) => j.runId === job.runId);
    if (run && siblings.every((j) => j.status === 'completed')) {
      run.status = 'completed';
      run.conclusion = siblings.every((j) => j.conclusion === 'success')
        ? 'success'
        : siblings.some((j) => j.conclusion === 'cancelled')
          ? 'cancelled'
          : 'failure';
    }
    this.onWorkflowJob?.(job, 'completed');
    return job;
  }

  /**
   * Ends the accepted cancellations now (the fake also does it `cancelDelayMs` after each one):
   * every unfinished job of each such run completes `cancelled` — a queued one never had a runner,
   * a running one's runner acknowledged the cancellation and removes itself (DOC.cancelling, DOC.jit).
   */
  settleCancellations(): void {
    for (const run of this.runs) {
      if (run.cancelRequestedAt == null || run.status === 'completed') continue;
      for (const j of this.jobs.filter((x) => x.runId === run.id && x.status !== 'completed'))
        this.completeJob(j.id, 'cancelled');
      // a run without jobs (all skipped) ends as well
      if (this.runs.find((r) => r.id === run.id)?.status !== 'completed')
        Object.assign(run, { status: 'completed', conclusion: 'cancelled' });
    }
  }

  /** A new installation of App `appId` (e.g. one created from a manifest); its id. */
  install(appId: number): number {
    if (!this.apps.has(appId)) throw new TypeError(`no App ${appId}`);
    const id = this.nextId++;
    this.installationApps.set(id, appId);
    return id;
  }

  /** The App an installation belongs to. */
  appOfInstallation(installationId: number): number {
    return this.installationApps.get(installationId) ?? this.appId;
  }

  /** A fresh id for an object the fake creates (Apps from a manifest included). */
  newId(): number {
    return this.nextId++;
  }

  /** Logs one delivery attempt; GitHub never retries a failed one by itself (DOC.failedDeliveries). */
  recordHookDelivery(d: Omit<HookDelivery, 'id' | 'deliveredAt'>): HookDelivery {
    const entry: HookDelivery = {
      ...d,
      id: this.nextId++,
      deliveredAt: new Date(this.clock()).toISOString(),
    };
    this.hookDeliveries.push(entry);
    return entry;
  }

  /**
   * Fault injection: the next access token asked for with narrowing is minted broader than asked
   * — every repository of the installation (answered `repository_selection` of the installation,
   * no `repositories`) and/or every App permission — and really opens that much, so a test can
   * check that the caller refuses and revokes it.
   */
  ignoreNextTokenNarrowing(what: { repositories?: boolean; permissions?: boolean } = {}): void {
    this.ignoreNarrowing.push({
      repositories: what.repositories ?? true,
      permissions: what.permissions ?? true,
    });
  }

  /** The next `times` matching calls answer `status` (with headers/body) instead of succeeding. */
  fail(f: Omit<Failure, 'times'> & { times?: number }): void {
    this.failures.push({ times: 1, ...f });
  }

  calls(method: string, path: RegExp): RecordedRequest[] {
    return this.requests.filter((r) => r.method === method && path.test(r.path));
  }

  private repo(owner: string, name: string): RepoState | undefined {
    return this.repos.get(`${owner}/${name}`.toLowerCase());
  }

  /**
   * The App a JWT authenticates, or GitHub's message for why it does not (DOC.jwt): the App its
   * `iss` names, whose key must have signed it.
   */
  private appOfJwt(auth: string | undefined): { app: FakeApp } | { problem: string } {
    const m = /^Bearer (.+)\.(.+)\.(.+)$/.exec(auth ?? '');
    if (!m) return { problem: 'A JSON web token could not be decoded' };
    let claims: { iss?: string | number; iat?: unknown; exp?: unknown };
    try {
      claims = JSON.parse(Buffer.from(m[2]!, 'base64url').toString());
    } catch {
      return { problem: 'A JSON web token could not be decoded' };
    }
    const app = this.apps.get(Number(claims.iss));
    if (!app || String(claims.iss) !== String(app.id))
      return { problem: "'Issuer' claim ('iss') must be the App's ID" };
    const v = createVerify('RSA-SHA256');
    v.update(`${m[1]}.${m[2]}`);
    if (!v.verify(app.publicKey, Buffer.from(m[3]!, 'base64url')))
      return { problem: 'A JSON web token could not be decoded' };
    const problem = this.jwtTimeProblem(claims);
    return problem ? { problem } : { app };
  }

  /** Null when the JWT's times are acceptable, else GitHub's message (DOC.jwt). */
  private jwtTimeProblem(claims: { iat?: unknown; exp?: unknown }): string | null {
    const now = Math.floor(this.clock() / 1000);
    if (typeof claims.iat !== 'number' || !Number.isInteger(claims.iat) || claims.iat > now)
      return "'Issued at' claim ('iat') must be an Integer representing a time in the past";
    if (typeof claims.exp !== 'number' || !Number.isInteger(claims.exp) || claims.exp <= now)
      return "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires";
    if (claims.exp - now > 600) return "'Expiration time' claim ('exp') is too far in the future";
    return null;
  }

  private async handle(req: IncomingMessage, res: ServerResponse) {
    const arrived = this.clock();
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    const url = new URL(req.url ?? '/', 'http://x');
    const method = (req.method ?? 'GET').toLowerCase();
    // every request is one operation of GitHub's description (operations.ts); anything else is
    // GitHub's 404, also for a method the path does not support (DOC.notFound)
    const match = matchOperation(method, url.pathname);
    const op = match?.op;
    // GitHub's time to answer (latency.ts), before anything is handled: what the call changes
    // exists when its answer arrives, never earlier
    const latencyMs = this.latency?.restMs(method, op?.path ?? url.pathname) ?? 0;
    if (latencyMs > 0) await new Promise((r) => setTimeout(r, latencyMs));
    let body: unknown = null;
    /** A refusal GitHub answers that the description does not list for the operation. */
    let refusal = false;
    const send = (status: number, data: unknown, headers: Record<string, string> = {}) => {
      if (op) {
        // GitHub's 422 refusals of a dispatch (unknown ref, undeclared or missing inputs) are
        // not in the description either (DOC.dispatchApi)
        const checked = checkResponse(
          op,
          status,
          data,
          refusal || (status === 422 && op.path.endsWith('/dispatches')),
        );
        this.violations.push(...checked.violations);
        if (checked.refused)
          this.refused.push({
            method: method.toUpperCase(),
            path: url.pathname,
            status,
            message: String((data as { message?: unknown } | null)?.message),
          });
      }
      // an installation token (`ghs_…`) may come as `token` or `Bearer` (GitHub accepts both)
      const installationToken = /^(?:token|Bearer) (ghs_\S+)$/.exec(req.headers.authorization ?? '')?.[1];
      const auth = installationToken
        ? 'installation'
        : /^Bearer /.test(req.headers.authorization ?? '')
          ? 'app'
          : /^token /.test(req.headers.authorization ?? '')
            ? 'installation'
            : 'none';
      this.requests.push({
        method: method.toUpperCase(),
        path: url.pathname + url.search,
        body,
        status,
        auth,
        ...(installationToken ? { token: installationToken } : {}),
        at: arrived,
        latencyMs,
        answeredAt: this.clock(),
      });
      res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', ...headers });
      res.end(data == null ? '' : JSON.stringify(data));
    };
    if (!match || !op) {
      this.violations.push(
        `${method.toUpperCase()} ${url.pathname}: not an operation of GitHub's description the fake serves`,
      );
      return send(404, { message: 'Not Found', documentation_url: DOC.notFound });
    }
    const { params } = match;
    // parameters and body against the description: GitHub's 400/422 for what it rejects
    const check = checkRequest(op, params, url.searchParams, text);
    body = check.body;
    this.violations.push(...check.violations);
    if (check.answer) {
      refusal = true;
      return send(check.answer.status, check.answer.body);
    }
    const failure = this.failures.find(
      (f) => f.times > 0 && (!f.method || f.method === method.toUpperCase()) && f.path.test(url.pathname),
    );
    if (failure) {
      failure.times--;
      return send(
        failure.status,
        failure.body ?? {
          message: `injected ${failure.status}`,
          documentation_url: 'https://docs.github.com/rest',
        },
        failure.headers,
      );
    }
    const isAppCall = op.path.startsWith('/app/') || op.path === '/repos/{owner}/{repo}/installation';
    // the manifest flow's last step takes no authentication: the code is the credential
    // (DOC.manifestConversion)
    const isAnonymous = op.path === '/app-manifests/{code}/conversions';
    const auth = req.headers.authorization;
    const notFound = () =>
      send(404, { message: 'Not Found', documentation_url: 'https://docs.github.com/rest' });
    let token: InstallationToken | null = null;
    /** The App a JWT authenticated (App calls only). */
    let app: FakeApp | null = null;
    if (isAnonymous) {
      // nothing to check
    } else if (isAppCall) {
      const who = this.appOfJwt(auth);
      if ('problem' in who) return send(401, { message: who.problem, documentation_url: DOC.jwt });
      app = who.app;
    } else {
      const tok = /^(?:token|Bearer) (ghs_\S+)$/.exec(auth ?? '')?.[1];
      const t = tok ? this.tokens.get(tok) : undefined;
      // an expired (DOC.installationToken) or revoked (DOC.revokeToken) token is no token at all
      if (!t || t.expiresAt <= this.clock() || t.revokedAt !== undefined)
        return send(401, { message: 'Bad credentials', documentation_url: 'https://docs.github.com/rest' });
      token = t;
    }
    const full = (data: unknown, status: number) => overlay(exampleOf(op.responses[String(status)]), data);
    const repo = params.owner ? this.repo(params.owner, params.repo!) : undefined;
    if (token) {
      // a token opens only its own installation's repositories and organization (DOC.installationToken)
      if (repo && repo.installationId !== token.installationId) return notFound();
      if (params.org && this.orgInstallations.get(params.org.toLowerCase()) !== token.installationId)
        return notFound();
      const need = requirementFor(method, op.path);
      if (need === undefined) {
        this.violations.push(
          `no App permission known for ${method.toUpperCase()} ${op.path} (permissions.ts)`,
        );
        return notFound();
      }
      // a token narrowed to some repositories, or holding too little, is refused (DOC.permissions,
      // DOC.notAccessible)
      const outside =
        repo != null &&
        token.repositories != null &&
        !token.repositories.includes(`${params.owner}/${params.repo}`.toLowerCase());
      if (need && (outside || !satisfies(token.permissions, need))) {
        const why = outside
          ? `the token is narrowed to ${token.repositories!.join(', ')}`
          : `the token holds ${JSON.stringify(token.permissions)}; needs ${need.anyOf.map((n) => `${n.permission}: ${n.access}`).join(' or ')}`;
        this.forbidden.push({ method: method.toUpperCase(), path: url.pathname, status: 403, message: why });
        this.violations.push(`permission: ${method.toUpperCase()} ${url.pathname} refused (403): ${why}`);
        return send(403, {
          message: 'Resource not accessible by integration',
          documentation_url: need.documentationUrl,
          status: '403',
        });
      }
    }
    const key = `${method} ${op.path}`;
    const page = PAGINATED.has(key) ? this.pager(url) : null;
    const paged = <T>(items: T[]): { items: T[]; headers: Record<string, string> } =>
      page ? page.take(items) : { items, headers: {} };

    switch (key) {
      case 'post /app-manifests/{code}/conversions': {
        const answer = convertManifestCode(this, params.code!);
        return send(answer.status, answer.status === 201 ? full(answer.body, 201) : answer.body);
      }
      case 'post /app/installations/{installation_id}/access_tokens': {
        const installationId = Number(params.installation_id);
        const known =
          [...this.repos.values()].some((r) => r.installationId === installationId) ||
          this.installationApps.has(installationId);
        // an App sees only its own installations
        if (!known || this.appOfInstallation(installationId) !== app!.id) return notFound();
        const appPermissions = app!.permissions;
        if (this.suspendedInstallations.has(installationId))
          return send(403, {
            message: 'This installation has been suspended',
            documentation_url: DOC.accessTokens,
            status: '403',
          });
        // a token may be narrowed to some of the installation's repositories (`repositories`
        // names without the owner, or `repository_ids`, at most 500) and to fewer permissions than
        // the installation holds; a repository outside the installation, or a permission it does
        // not hold, is 422 (DOC.accessTokens)
        const ask = (body ?? {}) as {
          repositories?: string[];
          repository_ids?: number[];
          permissions?: Record<string, string>;
        };
        const mine = [...this.repos.entries()].filter(([, r]) => r.installationId === installationId);
        let scoped: string[] | null = null;
        const outside = () =>
          send(422, {
            message:
              'There is at least one repository that does not exist or is not accessible to the parent installation.',
            documentation_url: DOC.accessTokens,
          });
        if (ask.repositories || ask.repository_ids) {
          scoped = [];
          for (const n of ask.repositories ?? []) {
            const hit = mine.find(([k]) => k.split('/')[1] === n.toLowerCase());
            if (!hit) return outside();
            scoped.push(hit[0]);
          }
          for (const id of ask.repository_ids ?? []) {
            const hit = mine.find(([, r]) => r.id === id);
            if (!hit) return outside();
            scoped.push(hit[0]);
          }
          scoped = [...new Set(scoped)];
        }
        const narrowed = narrowPermissions(appPermissions, ask.permissions);
        if (!narrowed.ok)
          return send(422, { message: narrowed.message, documentation_url: DOC.accessTokens });
        let permissions = narrowed.permissions;
        const fault =
          ask.repositories || ask.repository_ids || ask.permissions
            ? this.ignoreNarrowing.shift()
            : undefined;
        if (fault) {
          // fault: GitHub answers a narrowed request with a token broader than asked
          if (fault.repositories) scoped = null;
          if (fault.permissions) permissions = { ...appPermissions };
        }
        const tokenValue = `ghs_${randomBytes(12).toString('hex')}`;
        // installation tokens expire after one hour (DOC.installationToken)
        const expiresAt = this.clock() + 3600_000;
        this.tokens.set(tokenValue, { installationId, expiresAt, repositories: scoped, permissions });
        return send(
          201,
          full(
            {
              token: tokenValue,
              expires_at: new Date(expiresAt).toISOString(),
              permissions,
              // "selected" when narrowed, else the installation's own selection
              repository_selection: scoped
                ? 'selected'
                : (this.installationSelection.get(installationId) ?? 'all'),
              // full repository objects, as GitHub lists them (the schema's shape)
              ...(scoped
                ? {
                    repositories: scoped.map((k) =>
                      overlay(exampleOf(op.responses['201']?.properties?.repositories?.items), {
                        id: this.repos.get(k)!.id,
                        full_name: k,
                        name: k.split('/')[1],
                      }),
                    ),
                  }
                : {}),
            },
            201,
          ),
        );
      }
      case 'get /app/installations/{installation_id}': {
        // the installation as the App sees it with its JWT (DOC.getInstallation): it holds exactly
        // the permissions and events of the manifest its App was created from (DOC.manifest), on
        // the account of its repositories, on all of them or selected ones; an installation of
        // another App, or none: 404
        const installationId = Number(params.installation_id);
        const mine = [...this.repos.entries()].filter(([, r]) => r.installationId === installationId);
        const known = mine.length > 0 || this.installationApps.has(installationId);
        if (!known || this.appOfInstallation(installationId) !== app!.id) return notFound();
        const login = mine[0]?.[0].split('/')[0] ?? app!.owner.login;
        const created = new Date(this.clock() - 86_400_000).toISOString();
        return send(
          200,
          full(
            {
              id: installationId,
              app_id: app!.id,
              app_slug: app!.slug,
              client_id: app!.clientId,
              target_id: 1,
              target_type: 'Organization',
              account: { login, type: 'Organization' },
              repository_selection: this.installationSelection.get(installationId) ?? 'all',
              permissions: { ...app!.permissions },
              events: [...app!.events],
              access_tokens_url: `${this.url}/app/installations/${installationId}/access_tokens`,
              repositories_url: `${this.url}/installation/repositories`,
              html_url: `https://github.com/organizations/${login}/settings/installations/${installationId}`,
              single_file_name: null,
              ...(this.suspendedInstallations.has(installationId)
                ? {
                    suspended_at: this.suspendedInstallations.get(installationId),
                    suspended_by: { login, type: 'Organization' },
                  }
                : { suspended_by: null, suspended_at: null }),
              created_at: created,
              updated_at: created,
            },
            200,
          ),
        );
      }
      case 'get /repos/{owner}/{repo}/installation':
        return repo && this.appOfInstallation(repo.installationId) === app!.id
          ? send(200, full({ id: repo.installationId }, 200))
          : notFound();
      case 'get /repos/{owner}/{repo}':
        return repo
          ? send(
              200,
              full(
                {
                  full_name: `${params.owner}/${params.repo}`,
                  name: params.repo,
                  default_branch: repo.defaultBranch,
                },
                200,
              ),
            )
          : notFound();
      case 'get /repos/{owner}/{repo}/collaborators/{username}/permission': {
        if (!repo || this.ghostUsers.has(params.username!.toLowerCase())) return notFound();
        // logins are case-insensitive; an existing user without access is `none` (`read` where
        // the repository is public), not a 404 (DOC.permission)
        const login = Object.keys(repo.collaborators).find(
          (c) => c.toLowerCase() === params.username!.toLowerCase(),
        );
        const role = login ? repo.collaborators[login]! : repo.visibility === 'public' ? 'read' : 'none';
        const permission = role === 'maintain' ? 'write' : role === 'triage' ? 'read' : role;
        return send(
          200,
          full({ permission, role_name: role, user: { login: login ?? params.username } }, 200),
        );
      }
      case 'get /repos/{owner}/{repo}/pulls/{pull_number}': {
        const pr = repo?.pulls[Number(params.pull_number)];
        if (!repo || !pr) return notFound();
        const base = `${params.owner}/${params.repo}`;
        return send(
          200,
          full(
            {
              number: Number(params.pull_number),
              state: pr.state,
              labels: pr.labels.map((name, i) =>
                overlay(exampleOf(op.responses['200']?.properties?.labels?.items), { id: i + 1, name }),
              ),
              head: { sha: pr.headSha, ref: 'topic', repo: pr.headRepo ? { full_name: pr.headRepo } : null },
              base: { sha: repo.headSha, ref: repo.defaultBranch, repo: { full_name: base } },
            },
            200,
          ),
        );
      }
      case 'get /repos/{owner}/{repo}/contents/{path}': {
        // a file on a ref, base64 with a newline every 60 characters, its git blob sha (DOC.contents);
        // the fake's repositories hold their workflow files, the same on every branch
        if (!repo) return notFound();
        const ref = (url.searchParams.get('ref') ?? repo.defaultBranch).replace(/^refs\/heads\//, '');
        if (ref !== repo.defaultBranch && !(ref in repo.branches) && ref !== repo.headSha)
          return send(404, {
            message: `No commit found for the ref ${ref}`,
            documentation_url: DOC.contents,
          });
        const file = /^\.github\/workflows\/([^/]+)$/.exec(params.path!)?.[1];
        const wf = file ? repo.workflows[file] : undefined;
        if (!wf) return notFound();
        const bytes = Buffer.from(wf.text, 'utf8');
        const blobSha = createHash('sha1')
          .update(Buffer.concat([Buffer.from(`blob ${bytes.length}\0`), bytes]))
          .digest('hex');
        const b64 = bytes.toString('base64').replace(/.{60}/g, '$&\n');
        const self = `${this.url}/repos/${params.owner}/${params.repo}/contents/${params.path}?ref=${ref}`;
        const html = `https://github.com/${params.owner}/${params.repo}/blob/${ref}/${params.path}`;
        const git = `${this.url}/repos/${params.owner}/${params.repo}/git/blobs/${blobSha}`;
        return send(200, {
          type: 'file',
          encoding: 'base64',
          size: bytes.length,
          name: file,
          path: params.path,
          content: b64,
          sha: blobSha,
          url: self,
          git_url: git,
          html_url: html,
          download_url: `https://raw.githubusercontent.com/${params.owner}/${params.repo}/${ref}/${params.path}`,
          _links: { git, html, self },
        });
      }
      case 'get /repos/{owner}/{repo}/commits/{ref}':
        return repo ? send(200, full({ sha: repo.headSha }, 200)) : notFound();
      case 'post /repos/{owner}/{repo}/check-runs': {
        if (!repo) return notFound();
        const b = body as {
          name: string;
          head_sha: string;
          external_id?: string;
          status?: string;
          conclusion?: string;
          output?: { title?: string; summary?: string };
        };
        const run: CheckRun = {
          id: this.nextId++,
          repo: `${params.owner}/${params.repo}`,
          head_sha: b.head_sha,
          name: b.name,
          external_id: b.external_id ?? null,
          status: b.conclusion ? 'completed' : (b.status ?? 'queued'),
          conclusion: b.conclusion ?? null,
          output: { title: b.output?.title ?? null, summary: b.output?.summary ?? null },
          updates: 0,
        };
        this.checkRuns.push(run);
        return send(201, full(this.checkRunBody(run), 201));
      }
      case 'patch /repos/{owner}/{repo}/check-runs/{check_run_id}': {
        const run = this.checkRuns.find((c) => c.id === Number(params.check_run_id));
        if (!run) return notFound();
        const b = body as {
          status?: string;
          conclusion?: string;
          output?: { title?: string; summary?: string };
        };
        if (b.status) run.status = b.status;
        if (b.conclusion) {
          run.conclusion = b.conclusion;
          run.status = 'completed';
        }
        if (b.output)
          run.output = {
            title: b.output.title ?? run.output.title,
            summary: b.output.summary ?? run.output.summary,
          };
        run.updates++;
        return send(200, full(this.checkRunBody(run), 200));
      }
      case 'get /repos/{owner}/{repo}/commits/{ref}/check-runs': {
        const name = url.searchParams.get('check_name');
        const runs = this.checkRuns.filter(
          (c) =>
            c.repo.toLowerCase() === `${params.owner}/${params.repo}`.toLowerCase() &&
            c.head_sha === params.ref &&
            (!name || c.name === name),
        );
        const p = paged(runs);
        return send(
          200,
          full(
            {
              total_count: runs.length,
              check_runs: p.items.map((r) =>
                overlay(exampleOf(op.responses['200']?.properties?.check_runs?.items), this.checkRunBody(r)),
              ),
            },
            200,
          ),
          p.headers,
        );
      }
      case 'post /repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches': {
        if (!repo) return notFound();
        const b = body as { ref: string; inputs?: Record<string, unknown>; return_run_details?: boolean };
        const wf = repo.workflows[params.workflow_id!];
        if (!wf) return notFound();
        const refused = (message: string) => send(422, { message, documentation_url: DOC.dispatchApi });
        // the run is created on the tip of the dispatched ref, whatever the inputs say (DOC.dispatchEvent)
        const branch = String(b.ref ?? '').replace(/^refs\/heads\//, '');
        const tip = branch === repo.defaultBranch ? repo.headSha : repo.branches[branch];
        if (!tip) return refused(`No ref found for: ${b.ref}`);
        const given = b.inputs ?? {};
        const unexpected = Object.keys(given).filter((k) => !(k in wf.inputs));
        if (unexpected.length) return refused(`Unexpected inputs provided: ${JSON.stringify(unexpected)}`);
        const inputs: Record<string, string> = {};
        for (const [name, def] of Object.entries(wf.inputs)) {
          const v = name in given ? String(given[name]) : def.default;
          if (v == null || (def.required && v === ''))
            return refused(`Required input '${name}' not provided`);
          if (def.options && !def.options.includes(v))
            return refused(`Provided value '${v}' for input '${name}' not in the list of allowed values`);
          inputs[name] = v;
        }
        const full_name = `${params.owner}/${params.repo}`;
        this.dispatches.push({ repo: full_name, workflow: params.workflow_id!, ref: b.ref, inputs });
        const run = this.createRun(full_name, params.workflow_id!, wf, branch, tip, inputs);
        if (b.return_run_details) {
          return send(
            200,
            full(
              {
                workflow_run_id: run.id,
                run_url: `${this.url}/repos/${full_name}/actions/runs/${run.id}`,
                html_url: `https://github.com/${full_name}/actions/runs/${run.id}`,
              },
              200,
            ),
          );
        }
        return send(204, null);
      }
      case 'post /repos/{owner}/{repo}/actions/runners/generate-jitconfig':
      case 'post /orgs/{org}/actions/runners/generate-jitconfig': {
        const scope = params.org ? `org:${params.org}` : `repo:${params.owner}/${params.repo}`;
        if (!params.org && !repo) return notFound();
        const b = body as { name: string; labels: string[]; runner_group_id: number };
        if (this.runners.some((r) => r.name === b.name && r.scope === scope))
          return send(409, {
            message: 'Already exists - A runner with the same name already exists',
            documentation_url: 'x',
          });
        const runner: Runner = {
          id: this.nextId++,
          name: b.name,
          labels: b.labels,
          scope,
          runnerGroupId: b.runner_group_id,
          busy: false,
          encodedJitConfig: `JITCONFIG-SECRET-${randomBytes(16).toString('hex')}`,
          jobId: null,
        };
        this.runners.push(runner);
        return send(
          201,
          full(
            {
              runner: {
                id: runner.id,
                name: runner.name,
                os: 'linux',
                status: 'offline',
                busy: false,
                labels: runner.labels.map((name) => ({ name, type: 'custom' })),
              },
              encoded_jit_config: runner.encodedJitConfig,
            },
            201,
          ),
        );
      }
      case 'delete /repos/{owner}/{repo}/actions/runners/{runner_id}':
      case 'delete /orgs/{org}/actions/runners/{runner_id}': {
        const scope = params.org ? `org:${params.org}` : `repo:${params.owner}/${params.repo}`;
        const i = this.runners.findIndex((r) => r.id === Number(params.runner_id) && r.scope === scope);
        // a JIT runner that ran its job has removed itself: 404 (DOC.jit)
        if (i < 0) return notFound();
        if (this.runners[i]!.busy)
          return send(422, {
            message: 'Bad request - Runner is currently running a job',
            documentation_url: 'x',
          });
        this.runners.splice(i, 1);
        return send(204, null);
      }
      case 'get /repos/{owner}/{repo}/actions/runners':
      case 'get /orgs/{org}/actions/runners': {
        if (!params.org && !repo) return notFound();
        const name = url.searchParams.get('name');
        const scope = params.org ? `org:${params.org}` : `repo:${params.owner}/${params.repo}`;
        const rs = this.runners.filter((r) => r.scope === scope && (!name || r.name === name));
        const item = op.responses['200']?.properties?.runners?.items;
        const p = paged(rs);
        return send(
          200,
          full(
            {
              total_count: rs.length,
              runners: p.items.map((r) =>
                overlay(exampleOf(item), {
                  id: r.id,
                  name: r.name,
                  busy: r.busy,
                  status: r.busy ? 'online' : 'offline',
                  labels: r.labels.map((l) => ({ name: l, type: 'custom' })),
                }),
              ),
            },
            200,
          ),
          p.headers,
        );
      }
      case 'get /orgs/{org}/actions/runner-groups/{runner_group_id}': {
        const g = this.runnerGroups.get(Number(params.runner_group_id));
        return g
          ? send(
              200,
              full({ id: Number(params.runner_group_id), name: g.name, visibility: g.visibility }, 200),
            )
          : notFound();
      }
      case 'get /orgs/{org}/actions/runner-groups/{runner_group_id}/repositories': {
        const g = this.runnerGroups.get(Number(params.runner_group_id));
        if (!g) return notFound();
        const item = op.responses['200']?.properties?.repositories?.items;
        const p = paged(g.repositories);
        return send(
          200,
          full(
            {
              total_count: g.repositories.length,
              repositories: p.items.map((full_name) => overlay(exampleOf(item), { full_name })),
            },
            200,
          ),
          p.headers,
        );
      }
      case 'post /repos/{owner}/{repo}/labels': {
        if (!repo) return notFound();
        const b = body as { name: string; color?: string };
        // label names are unique regardless of case (DOC.labels)
        if ([...repo.labels].some((l) => l.toLowerCase() === b.name.toLowerCase()))
          return send(422, {
            message: 'Validation Failed',
            documentation_url: 'x',
            errors: [{ resource: 'Label', code: 'already_exists', field: 'name' }],
          });
        repo.labels.add(b.name);
        return send(201, full({ name: b.name, color: b.color ?? 'ededed' }, 201));
      }
      case 'get /repos/{owner}/{repo}/actions/runs':
      case 'get /repos/{owner}/{repo}/actions/workflows/{workflow_id}/runs': {
        if (!repo) return notFound();
        if (params.workflow_id && !repo.workflows[params.workflow_id]) return notFound();
        const q = url.searchParams;
        const rs = this.runs
          .filter(
            (r) =>
              r.repo.toLowerCase() === `${params.owner}/${params.repo}`.toLowerCase() &&
              (!params.workflow_id || r.workflow === params.workflow_id) &&
              (!q.get('event') || r.event === q.get('event')) &&
              (!q.get('branch') || r.headBranch === q.get('branch')) &&
              (!q.get('head_sha') || r.headSha === q.get('head_sha')) &&
              (!q.get('status') || r.status === q.get('status') || r.conclusion === q.get('status')),
          )
          .reverse(); // newest first, as GitHub lists them
        const item = op.responses['200']?.properties?.workflow_runs?.items;
        const p = paged(rs);
        return send(
          200,
          full(
            {
              total_count: rs.length,
              workflow_runs: p.items.map((r) => overlay(exampleOf(item), this.runBody(r))),
            },
            200,
          ),
          p.headers,
        );
      }
      case 'get /repos/{owner}/{repo}/actions/runs/{run_id}': {
        const run = this.runs.find(
          (r) =>
            r.id === Number(params.run_id) &&
            r.repo.toLowerCase() === `${params.owner}/${params.repo}`.toLowerCase(),
        );
        return run ? send(200, full(this.runBody(run), 200)) : notFound();
      }
      case 'get /repos/{owner}/{repo}/actions/runs/{run_id}/jobs': {
        const run = this.runs.find(
          (r) =>
            r.id === Number(params.run_id) &&
            r.repo.toLowerCase() === `${params.owner}/${params.repo}`.toLowerCase(),
        );
        if (!run) return notFound();
        const js = this.jobs.filter((j) => j.runId === run.id);
        const item = op.responses['200']?.properties?.jobs?.items;
        const p = paged(js);
        return send(
          200,
          full(
            {
              total_count: js.length,
              jobs: p.items.map((j) => overlay(exampleOf(item), this.jobBody(j, run))),
            },
            200,
          ),
          p.headers,
        );
      }
      case 'post /repos/{owner}/{repo}/actions/runs/{run_id}/cancel': {
        // 202 and the run's unfinished jobs end cancelled afterwards; a completed run is a 409 (DOC.cancelRun)
        const run = this.runs.find(
          (r) =>
            r.id === Number(params.run_id) &&
            r.repo.toLowerCase() === `${params.owner}/${params.repo}`.toLowerCase(),
        );
        if (!run) return notFound();
        if (run.status === 'completed')
          return send(409, {
            message: 'Cannot cancel a workflow run that is completed.',
            documentation_url: DOC.cancelRun,
          });
        // accepted, not done: the run keeps its status until its jobs end (DOC.cancelling)
        run.cancelRequestedAt ??= this.clock();
        const timer = setTimeout(() => {
          this.cancelTimers.delete(timer);
          this.settleCancellations();
        }, this.cancelDelayMs);
        timer.unref?.();
        this.cancelTimers.add(timer);
        return send(202, {});
      }
      case 'get /app/hook/deliveries': {
        // newest first, `per_page` (max 100) and an opaque `cursor` (DOC.hookDeliveries)
        const size = Math.min(Math.max(1, Number(url.searchParams.get('per_page') ?? 30) || 30), 100);
        // each App has its own delivery log
        const newest = this.hookDeliveries.filter((d) => (d.appId ?? this.appId) === app!.id).reverse();
        const cursor = url.searchParams.get('cursor');
        const from = cursor ? newest.findIndex((d) => `c${d.id}` === cursor) : 0;
        if (from < 0) return send(422, { message: 'Invalid cursor', documentation_url: DOC.hookDeliveries });
        const items = newest.slice(from, from + size);
        const after = newest[from + size];
        const headers: Record<string, string> = {};
        if (after) {
          const u = new URL('/app/hook/deliveries', this.url);
          u.searchParams.set('per_page', String(size));
          u.searchParams.set('cursor', `c${after.id}`);
          headers.link = `<${u.toString()}>; rel="next"`;
        }
        return send(
          200,
          items.map((d) => ({
            id: d.id,
            guid: d.guid,
            delivered_at: d.deliveredAt,
            redelivery: d.redelivery,
            duration: 0.05,
            status:
              d.statusCode >= 200 && d.statusCode < 300
                ? 'OK'
                : d.statusCode
                  ? `Invalid HTTP Response: ${d.statusCode}`
                  : "We couldn't deliver this payload: Connection refused",
            status_code: d.statusCode,
            event: d.event,
            action: d.action,
            installation_id: 77,
            repository_id: null,
            throttled_at: null,
          })),
          headers,
        );
      }
      case 'delete /installation/token': {
        // revokes the token this very request authenticated with (checked live above, else 401)
        if (!token) return send(401, { message: 'Bad credentials', documentation_url: DOC.revokeToken });
        token.revokedAt = this.clock();
        return send(204, null);
      }
      case 'post /app/hook/deliveries/{delivery_id}/attempts': {
        const d = this.hookDeliveries.find(
          (x) => x.id === Number(params.delivery_id) && (x.appId ?? this.appId) === app!.id,
        );
        if (!d) return notFound();
        // accepted now, delivered again with the same GUID right after (DOC.redeliver)
        send(202, {});
        void this.redeliver?.(d);
        return;
      }
      default:
        this.violations.push(`no fake implementation for ${key}`);
        return notFound();
    }
  }

  /** `per_page`/`page` of a list endpoint, with GitHub's Link header (DOC.pagination). */
  private pager(url: URL): { take<T>(items: T[]): { items: T[]; headers: Record<string, string> } } {
    const asInt = (v: string | null, dflt: number) => {
      const n = Number(v ?? dflt);
      return Number.isInteger(n) && n >= 1 ? n : dflt;
    };
    const pageNo = asInt(url.searchParams.get('page'), 1);
    const size = Math.min(asInt(url.searchParams.get('per_page'), 30), 100);
    return {
      take: <T>(items: T[]) => {
        const last = Math.max(1, Math.ceil(items.length / size));
        const link = (n: number, rel: string) => {
          const u = new URL(url.pathname + url.search, this.url);
          u.searchParams.set('per_page', String(size));
          u.searchParams.set('page', String(n));
          return `<${u.toString()}>; rel="${rel}"`;
        };
        const rels: string[] = [];
        if (pageNo > 1) rels.push(link(pageNo - 1, 'prev'), link(1, 'first'));
        if (pageNo < last) rels.push(link(pageNo + 1, 'next'), link(last, 'last'));
        return {
          items: items.slice((pageNo - 1) * size, pageNo * size),
          headers: (rels.length ? { link: rels.join(', ') } : {}) as Record<string, string>,
        };
      },
    };
  }

  private createRun(
    repo: string,
    workflow: string,
    wf: WorkflowDef,
    branch: string,
    tip: string,
    inputs: Record<string, string>,
  ): WorkflowRun {
    const key = `${repo.toLowerCase()}/${workflow}`;
    const runNumber = (this.runNumbers.get(key) ?? 0) + 1;
    this.runNumbers.set(key, runNumber);
    const createdAt = new Date(this.clock()).toISOString();
    const run: WorkflowRun = {
      id: this.nextId++,
      repo,
      workflow,
      name: wf.name,
      displayTitle: wf.renderRunName(inputs),
      runNumber,
      runAttempt: 1,
      event: 'workflow_dispatch',
      headSha: tip,
      headBranch: branch,
      inputs,
      status: 'queued',
      conclusion: null,
      createdAt,
    };
    this.runs.push(run);
    for (const j of wf.jobsFor(inputs)) {
      this.jobs.push({
        id: this.nextId++,
        runId: run.id,
        repo,
        name: j.name,
        labels: j.labels,
        headSha: tip,
        headBranch: branch,
        status: 'queued',
        conclusion: null,
        runnerId: null,
        runnerName: null,
        createdAt,
        startedAt: null,
        completedAt: null,
      });
    }
    // each job is queued with its run, whether or not a runner exists (DOC.workflowJobEvent)
    for (const j of this.jobs.filter((x) => x.runId === run.id)) this.onWorkflowJob?.(j, 'queued');
    return run;
  }

  private runBody(r: WorkflowRun) {
    return {
      id: r.id,
      name: r.name,
      display_title: r.displayTitle,
      run_number: r.runNumber,
      run_attempt: r.runAttempt,
      event: r.event,
      status: r.status,
      conclusion: r.conclusion,
      head_sha: r.headSha,
      head_branch: r.headBranch,
      path: `.github/workflows/${r.workflow}`,
      created_at: r.createdAt,
      updated_at: r.createdAt,
      html_url: `https://github.com/${r.repo}/actions/runs/${r.id}`,
      url: `${this.url}/repos/${r.repo}/actions/runs/${r.id}`,
      head_commit: null,
      pull_requests: [],
    };
  }

  private jobBody(j: Job, run: WorkflowRun) {
    return {
      id: j.id,
      run_id: j.runId,
      run_attempt: run.runAttempt,
      name: j.name,
      workflow_name: run.name,
      labels: j.labels,
      head_sha: j.headSha,
      head_branch: j.headBranch,
      status: j.status,
      conclusion: j.conclusion,
      runner_id: j.runnerId,
      runner_name: j.runnerName,
      runner_group_id: j.runnerId == null ? null : 1,
      runner_group_name: j.runnerId == null ? null : 'Default',
      created_at: j.createdAt,
      started_at: j.startedAt ?? j.createdAt,
      completed_at: j.completedAt,
      html_url: `https://github.com/${j.repo}/actions/runs/${j.runId}/job/${j.id}`,
      url: `${this.url}/repos/${j.repo}/actions/jobs/${j.id}`,
      run_url: `${this.url}/repos/${j.repo}/actions/runs/${j.runId}`,
    };
  }

  private checkRunBody(r: CheckRun) {
    return {
      id: r.id,
      head_sha: r.head_sha,
      name: r.name,
      external_id: r.external_id,
      status: r.status,
      conclusion: r.conclusion,
      output: {
        title: r.output.title,
        summary: r.output.summary,
        text: null,
        annotations_count: 0,
        annotations_url: 'https://github.invalid/a',
      },
    };
  }
}

/** What a fake GitHub's `close()` throws while violations are left: each one, in words. */
export class FakeGitHubViolations extends Error {
  constructor(readonly violations: string[]) {
    super(
      `the fake GitHub recorded ${violations.length} violation(s) of GitHub's description:\n${violations.map((v) => `- ${v}`).join('\n')}`,
    );
    this.name = 'FakeGitHubViolations';
  }
}

/** Starts a fake GitHub on an ephemeral loopback port. */
export async function startFakeGitHub(opts: FakeGitHubOptions = {}): Promise<FakeGitHub> {
  return new FakeGitHub(opts).start();
}
