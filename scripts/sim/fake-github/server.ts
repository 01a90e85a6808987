import { createVerify } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DOC, type FakeApp, type FakeGitHubOptions, type InstallationToken } from './model.ts';
import { checkRequest, checkResponse, matchOperation, warmValidators } from './operations.ts';
import { requirementFor, satisfies } from './permissions.ts';
import { ACTIONS_REST } from './rest-actions.ts';
import { APPS_REST } from './rest-apps.ts';
import { REPOS_REST } from './rest-repos.ts';
import { exampleOf, overlay } from './schema.ts';
import { GitHubWorld, type RestHandler } from './world.ts';

export type {
  CheckRun,
  Failure,
  FakeApp,
  FakeGitHubOptions,
  HookDelivery,
  InstallationToken,
  Job,
  PullState,
  RecordedRequest,
  Refusal,
  RepoState,
  Runner,
  WorkflowRun,
} from './model.ts';
export { DEFAULT_MANIFEST, DOC } from './model.ts';
export { GitHubWorld, type RestCall } from './world.ts';

/** Every REST operation the fake serves, by `method path`, from its three areas. */
const ROUTES = new Map<string, RestHandler>(Object.entries({ ...APPS_REST, ...REPOS_REST, ...ACTIONS_REST }));

const PAGINATED = new Set([
  'get /repos/{owner}/{repo}/actions/runners',
  'get /orgs/{org}/actions/runners',
  'get /orgs/{org}/actions/runner-groups/{runner_group_id}/repositories',
  'get /repos/{owner}/{repo}/commits/{ref}/check-runs',
  'get /repos/{owner}/{repo}/actions/runs',
  'get /repos/{owner}/{repo}/actions/workflows/{workflow_id}/runs',
  'get /repos/{owner}/{repo}/actions/runs/{run_id}/jobs',
]);

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
export class FakeGitHub extends GitHubWorld {
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

    const handler = ROUTES.get(key);
    if (handler)
      return handler(this, { method, url, op, params, body, token, app, repo, send, notFound, full, paged });
    this.violations.push(`no fake implementation for ${key}`);
    return notFound();
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
