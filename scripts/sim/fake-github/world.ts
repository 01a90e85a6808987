import { generateKeyPairSync } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Server } from 'node:http';
import { join } from 'node:path';
import type { GitHubLatency } from './latency.ts';
import {
  type CheckRun,
  DEFAULT_MANIFEST,
  type Failure,
  type FakeApp,
  type FakeGitHubOptions,
  type HookDelivery,
  type InstallationToken,
  type Job,
  type ManifestCode,
  type RecordedRequest,
  type Refusal,
  type RepoState,
  type Runner,
  type WorkflowRun,
} from './model.ts';
import type { Operation } from './operations.ts';
import { manifestEvents, manifestPermissions } from './permissions.ts';
import { webhookViolations } from './webhooks.ts';
import { loadWorkflow } from './workflows.ts';

/** The workflow the controller dispatches, read from the template consuming repositories install. */
const sparkWorkflow = loadWorkflow(
  readFileSync(
    join(import.meta.dirname, '..', '..', '..', 'workflows-templates', 'spark-pr-test.yml'),
    'utf8',
  ),
);

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

/**
 * The fake GitHub's world: its Apps, installations and tokens, repositories, check runs, workflow
 * runs and jobs, runners and runner groups, the delivery log, and the faults a test injects; and
 * the operations a test or harness plays on it (add a repository, pick up a job, complete it).
 * server.ts serves it over HTTP (`FakeGitHub`); the REST areas (`rest-*.ts`) read and change it.
 */
export class GitHubWorld {
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
  ignoreNarrowing: { repositories: boolean; permissions: boolean }[] = [];
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
  cancelTimers = new Set<ReturnType<typeof setTimeout>>();
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
  nextId = 1000;
  runNumbers = new Map<string, number>();

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
  serves(runner: Runner, repo: string): boolean {
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

  repo(owner: string, name: string): RepoState | undefined {
    return this.repos.get(`${owner}/${name}`.toLowerCase());
  }
}

/** One REST call as the REST areas handle it, after server.ts matched, checked and authenticated it. */
export interface RestCall {
  method: string;
  url: URL;
  op: Operation;
  params: Record<string, string>;
  /** The parsed request body (null without one). */
  body: unknown;
  /** The installation token the call came with (installation calls only). */
  token: InstallationToken | null;
  /** The App a JWT authenticated (App calls only). */
  app: FakeApp | null;
  /** The repository the path names, when it names one the fake knows. */
  repo: RepoState | undefined;
  send(status: number, data: unknown, headers?: Record<string, string>): void;
  notFound(): void;
  /** The operation's smallest schema-valid answer for `status` with `data` laid over it. */
  full(data: unknown, status: number): unknown;
  /** A list endpoint's page of `items`, with GitHub's Link header. */
  paged<T>(items: T[]): { items: T[]; headers: Record<string, string> };
}

/** The handler of one REST operation, keyed by `method path` in each area's table. */
export type RestHandler = (w: GitHubWorld, c: RestCall) => void;
