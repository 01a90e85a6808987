import { createVerify, generateKeyPairSync, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { exampleOf, overlay, type Schema, validate } from './schema.ts';

/**
 * A local fake of the GitHub REST calls the controller makes, on 127.0.0.1. Every request body
 * and every response body is validated against GitHub's official OpenAPI description (the
 * subset extracted by scripts/extract-openapi.ts); any mismatch lands in `violations`, which
 * tests assert is empty, so the fake cannot drift from GitHub. Responses start from the
 * smallest schema-valid body and overlay the fields a scenario needs.
 */

interface Operation {
  method: string;
  path: string;
  requestBody: Schema | null;
  requestBodyRequired: boolean;
  responses: Record<string, Schema | null>;
  re: RegExp;
  names: string[];
}

interface FixtureFile {
  source: string;
  operations: Omit<Operation, 're' | 'names'>[];
}

export interface PullState {
  state: 'open' | 'closed';
  headSha: string;
  headRepo: string | null;
  labels: string[];
}

export interface RepoState {
  installationId: number;
  defaultBranch: string;
  /** login → role_name */
  collaborators: Record<string, 'admin' | 'maintain' | 'write' | 'triage' | 'read'>;
  pulls: Record<number, PullState>;
  headSha: string;
  labels: Set<string>;
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
}

export interface Failure {
  method?: string;
  path: RegExp;
  status: number;
  headers?: Record<string, string>;
  body?: unknown;
  times: number;
}

export interface RecordedRequest {
  method: string;
  path: string;
  body: unknown;
  status: number;
  auth: 'app' | 'installation' | 'none';
  /** Wall-clock time the request arrived (ms). */
  at: number;
}

const fixture = JSON.parse(
  readFileSync(join(import.meta.dirname, '..', 'fixtures', 'openapi', 'github-rest-subset.json'), 'utf8'),
) as FixtureFile;

const operations: Operation[] = fixture.operations.map((o) => {
  const names: string[] = [];
  const re = new RegExp(
    `^${o.path.replace(/\{([^}]+)\}/g, (_m, n: string) => {
      names.push(n);
      return '([^/]+)';
    })}$`,
  );
  return { ...o, re, names };
});

export class FakeGitHub {
  readonly appId = 424242;
  readonly privateKey: string;
  private readonly publicKey: string;
  server!: Server;
  url = '';
  repos = new Map<string, RepoState>();
  checkRuns: CheckRun[] = [];
  runners: Runner[] = [];
  dispatches: { repo: string; workflow: string; ref: string; inputs: Record<string, string> }[] = [];
  runnerGroups = new Map<number, { name: string; visibility: 'all' | 'selected'; repositories: string[] }>();
  requests: RecordedRequest[] = [];
  violations: string[] = [];
  failures: Failure[] = [];
  tokens = new Map<string, number>();
  private nextId = 1000;

  constructor() {
    const { privateKey, publicKey } = generateKeyPairSync('rsa', {
      modulusLength: 2048,
      privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
      publicKeyEncoding: { type: 'spki', format: 'pem' },
    });
    this.privateKey = privateKey;
    this.publicKey = publicKey;
    this.runnerGroups.set(1, { name: 'Default', visibility: 'all', repositories: [] });
  }

  async start(): Promise<this> {
    this.server = createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  addRepo(fullName: string, over: Partial<RepoState> = {}): RepoState {
    const st: RepoState = {
      installationId: 77,
      defaultBranch: 'main',
      collaborators: {},
      pulls: {},
      headSha: 'a'.repeat(40),
      labels: new Set(),
      ...over,
    };
    this.repos.set(fullName.toLowerCase(), st);
    return st;
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

  private verifyJwt(auth: string | undefined): boolean {
    const m = /^Bearer (.+)\.(.+)\.(.+)$/.exec(auth ?? '');
    if (!m) return false;
    const v = createVerify('RSA-SHA256');
    v.update(`${m[1]}.${m[2]}`);
    if (!v.verify(this.publicKey, Buffer.from(m[3]!, 'base64url'))) return false;
    const claims = JSON.parse(Buffer.from(m[2]!, 'base64url').toString()) as {
      iss: string | number;
      exp: number;
    };
    return String(claims.iss) === String(this.appId) && claims.exp * 1000 > Date.now() - 60_000;
  }

  private async handle(req: IncomingMessage, res: ServerResponse) {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    const url = new URL(req.url ?? '/', 'http://x');
    const method = (req.method ?? 'GET').toLowerCase();
    let body: unknown = null;
    if (text) {
      try {
        body = JSON.parse(text);
      } catch {
        this.violations.push(`${method.toUpperCase()} ${url.pathname}: request body is not JSON`);
      }
    }
    const op = operations.find((o) => o.method === method && o.re.test(url.pathname));
    const send = (status: number, data: unknown, headers: Record<string, string> = {}) => {
      if (op) {
        const schema = op.responses[String(status)];
        if (schema && data != null) {
          for (const v of validate(schema, data))
            this.violations.push(`response ${method.toUpperCase()} ${op.path} ${status} ${v}`);
        } else if (!(String(status) in op.responses) && status < 500 && status !== 401 && status !== 403) {
          this.violations.push(
            `response ${method.toUpperCase()} ${op.path}: status ${status} is not documented`,
          );
        }
      }
      const auth = /^Bearer /.test(req.headers.authorization ?? '')
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
        at: Date.now(),
      });
      res.writeHead(status, { 'content-type': 'application/json', ...headers });
      res.end(data == null ? '' : JSON.stringify(data));
    };
    if (!op) {
      this.violations.push(
        `${method.toUpperCase()} ${url.pathname}: not an operation the controller should call`,
      );
      return send(404, { message: 'Not Found', documentation_url: 'https://docs.github.com/rest' });
    }
    if (op.requestBody && (body != null || op.requestBodyRequired)) {
      for (const v of validate(op.requestBody, body))
        this.violations.push(`request ${method.toUpperCase()} ${op.path} ${v}`);
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
    const params = Object.fromEntries(
      op.names.map((n, i) => [n, decodeURIComponent(op.re.exec(url.pathname)![i + 1]!)]),
    );
    const isAppCall = op.path.startsWith('/app/') || op.path === '/repos/{owner}/{repo}/installation';
    const auth = req.headers.authorization;
    if (isAppCall) {
      if (!this.verifyJwt(auth))
        return send(401, { message: 'A JSON web token could not be decoded', documentation_url: 'x' });
    } else {
      const tok = /^token (.+)$/.exec(auth ?? '')?.[1];
      if (!tok || !this.tokens.has(tok))
        return send(401, { message: 'Bad credentials', documentation_url: 'x' });
    }
    const full = (data: unknown, status: number) => overlay(exampleOf(op.responses[String(status)]), data);
    const notFound = () =>
      send(404, { message: 'Not Found', documentation_url: 'https://docs.github.com/rest' });
    const repo = params.owner ? this.repo(params.owner, params.repo!) : undefined;
    const key = `${method} ${op.path}`;

    switch (key) {
      case 'post /app/installations/{installation_id}/access_tokens': {
        const token = `ghs_${randomBytes(12).toString('hex')}`;
        this.tokens.set(token, Number(params.installation_id));
        return send(201, full({ token, expires_at: new Date(Date.now() + 3600_000).toISOString() }, 201));
      }
      case 'get /repos/{owner}/{repo}/installation':
        return repo ? send(200, full({ id: repo.installationId }, 200)) : notFound();
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
        const role = repo?.collaborators[params.username!];
        if (!repo || !role) return notFound();
        const permission = role === 'maintain' ? 'write' : role === 'triage' ? 'read' : role;
        return send(200, full({ permission, role_name: role, user: { login: params.username } }, 200));
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
        return send(
          200,
          full(
            {
              total_count: runs.length,
              check_runs: runs.map((r) =>
                overlay(exampleOf(op.responses['200']?.properties?.check_runs?.items), this.checkRunBody(r)),
              ),
            },
            200,
          ),
        );
      }
      case 'post /repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches': {
        if (!repo) return notFound();
        const b = body as { ref: string; inputs: Record<string, string> };
        this.dispatches.push({
          repo: `${params.owner}/${params.repo}`,
          workflow: params.workflow_id!,
          ref: b.ref,
          inputs: b.inputs,
        });
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
        const i = this.runners.findIndex((r) => r.id === Number(params.runner_id));
        if (i < 0) return send(404, { message: 'Not Found', documentation_url: 'x' });
        if (this.runners[i]!.busy)
          return send(422, {
            message: 'Bad request - Runner is currently running a job',
            documentation_url: 'x',
          });
        this.runners.splice(i, 1);
        return send(204, null);
      }
      case 'get /repos/{owner}/{repo}/actions/runners': {
        const name = url.searchParams.get('name');
        const scope = `repo:${params.owner}/${params.repo}`;
        const rs = this.runners.filter((r) => r.scope === scope && (!name || r.name === name));
        const item = op.responses['200']?.properties?.runners?.items;
        return send(
          200,
          full(
            {
              total_count: rs.length,
              runners: rs.map((r) => overlay(exampleOf(item), { id: r.id, name: r.name, busy: r.busy })),
            },
            200,
          ),
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
        return send(
          200,
          full(
            {
              total_count: g.repositories.length,
              repositories: g.repositories.map((full_name) => overlay(exampleOf(item), { full_name })),
            },
            200,
          ),
        );
      }
      case 'post /repos/{owner}/{repo}/labels': {
        if (!repo) return notFound();
        const b = body as { name: string; color?: string };
        if (repo.labels.has(b.name))
          return send(422, {
            message: 'Validation Failed',
            documentation_url: 'x',
            errors: [{ resource: 'Label', code: 'already_exists', field: 'name' }],
          });
        repo.labels.add(b.name);
        return send(201, full({ name: b.name, color: b.color ?? 'ededed' }, 201));
      }
      default:
        this.violations.push(`no fake implementation for ${key}`);
        return notFound();
    }
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

/** Starts a fake GitHub on an ephemeral loopback port. */
export async function startFakeGitHub(): Promise<FakeGitHub> {
  return new FakeGitHub().start();
}
