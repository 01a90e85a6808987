import githubAppJwt from 'universal-github-app-jwt';
import { signingKey } from './private-key.ts';

/**
 * The GitHub REST port. One small interface so the outbox, the webhook handlers and the
 * operator routes can be driven against a local fake on 127.0.0.1 in tests, and against
 * api.github.com or a GitHub Enterprise Server base URL in production.
 */
export interface GitHubClient {
  /** Calls the REST API as the App installation (or as the App itself with `as: 'app'`). */
  request<T = unknown>(
    method: string,
    path: string,
    opts?: {
      body?: unknown;
      installationId?: number | null;
      as?: 'app' | 'installation';
      /** An installation token to authenticate with instead (e.g. one to revoke with itself). */
      token?: string;
    },
  ): Promise<GitHubResponse<T>>;
  /** True when App credentials are configured; without them every call fails with `not_configured`. */
  readonly configured: boolean;
}

export interface GitHubResponse<T> {
  status: number;
  data: T;
  headers: Headers;
}

/**
 * A failed GitHub call. `retryAt` is set when GitHub said when to come back (Retry-After, or a
 * primary rate limit with `x-ratelimit-reset`); `retryable` says whether trying again can help.
 */
export class GitHubError extends Error {
  override name = 'GitHubError';
  constructor(
    readonly status: number,
    message: string,
    readonly retryable: boolean,
    readonly retryAt: number | null = null,
    readonly ghMessage: string | null = null,
  ) {
    super(message);
  }
}

export interface GitHubClientOptions {
  apiUrl: string;
  appId: string | undefined;
  privateKey: string | undefined;
  fetch: typeof fetch;
  clock?: () => number;
  /** Per-request deadline (default 4 s) so a slow GitHub never holds a webhook past its 10 s budget. */
  timeoutMs?: number;
  userAgent?: string;
  /** Sees every call's status and headers (status 0: unreachable); feeds `/metrics`. */
  observe?: (o: { status: number; headers: Headers | null }) => void;
}

/** Reads GitHub's retry hints: `Retry-After` (seconds or date) and primary rate-limit resets. */
export function retryAtFrom(status: number, headers: Headers, now: number): number | null {
  const ra = headers.get('retry-after');
  if (ra) {
    const s = Number(ra);
    if (Number.isFinite(s)) return now + Math.max(0, s) * 1000;
    const d = Date.parse(ra);
    if (Number.isFinite(d)) return Math.max(now, d);
  }
  if ((status === 403 || status === 429) && headers.get('x-ratelimit-remaining') === '0') {
    const reset = Number(headers.get('x-ratelimit-reset'));
    if (Number.isFinite(reset) && reset > 0) return Math.max(now, reset * 1000);
  }
  return null;
}

/** Creates the REST client with App JWT auth and cached installation tokens. */
export function createGitHubClient(opts: GitHubClientOptions): GitHubClient {
  const clock = opts.clock ?? Date.now;
  const base = opts.apiUrl.replace(/\/+$/, '');
  const configured = Boolean(opts.appId && opts.privateKey);
  let appJwt: { token: string; expiresAt: number } | null = null;
  const installationTokens = new Map<number, { token: string; expiresAt: number }>();

  async function getAppJwt(): Promise<string> {
    const now = clock();
    if (appJwt && appJwt.expiresAt - 60_000 > now) return appJwt.token;
    if (!opts.appId || !opts.privateKey) {
      throw new GitHubError(
        0,
        'GitHub App is not configured: set SPARK_GITHUB_APP_ID and SPARK_GITHUB_PRIVATE_KEY',
        false,
      );
    }
    let r: { token: string; expiration: number };
    try {
      r = await githubAppJwt({
        id: opts.appId,
        privateKey: signingKey(opts.privateKey),
        now: Math.floor(now / 1000),
      });
    } catch (e) {
      throw new GitHubError(
        0,
        `cannot sign the GitHub App JWT (check SPARK_GITHUB_PRIVATE_KEY is the App's PEM key): ${(e as Error).message}`,
        false,
      );
    }
    appJwt = { token: r.token, expiresAt: r.expiration * 1000 };
    return r.token;
  }

  async function getInstallationToken(id: number): Promise<{ token: string; expiresAt: number }> {
    const cached = installationTokens.get(id);
    // tokens live 1 h; refresh 5 min early so an in-flight call never carries an expired one
    if (cached && cached.expiresAt - 5 * 60_000 > clock()) return cached;
    const res = await send<{ token: string; expires_at: string }>(
      'POST',
      `/app/installations/${id}/access_tokens`,
      undefined,
      `Bearer ${await getAppJwt()}`,
    );
    const expiresAt = Date.parse(res.data.expires_at);
    const entry = {
      token: res.data.token,
      expiresAt: Number.isFinite(expiresAt) ? expiresAt : clock() + 55 * 60_000,
    };
    installationTokens.set(id, entry);
    return entry;
  }

  async function send<T>(
    method: string,
    path: string,
    body: unknown,
    authorization: string,
  ): Promise<GitHubResponse<T>> {
    let res: Response;
    try {
      res = await opts.fetch(`${base}${path}`, {
        method,
        headers: {
          accept: 'application/vnd.github+json',
          'x-github-api-version': '2022-11-28',
          'user-agent': opts.userAgent ?? 'spark-controller',
          authorization,
          ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
        },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
        signal: AbortSignal.timeout(opts.timeoutMs ?? 4000),
      });
    } catch (e) {
      opts.observe?.({ status: 0, headers: null });
      throw new GitHubError(0, `${method} ${path}: GitHub unreachable (${(e as Error).message})`, true);
    }
    opts.observe?.({ status: res.status, headers: res.headers });
    const text = await res.text();
    let data: unknown = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch {
        data = null;
      }
    }
    if (!res.ok) {
      const ghMessage = (data as { message?: string } | null)?.message ?? null;
      const retryAt = retryAtFrom(res.status, res.headers, clock());
      const rateLimited = retryAt != null && (res.status === 403 || res.status === 429);
      const retryable = res.status >= 500 || res.status === 429 || rateLimited || res.status === 408;
      throw new GitHubError(
        res.status,
        `${method} ${path} → ${res.status}${ghMessage ? `: ${ghMessage}` : ''}`,
        retryable,
        retryAt,
        ghMessage,
      );
    }
    return { status: res.status, data: data as T, headers: res.headers };
  }

  return {
    configured,
    async request<T>(
      method: string,
      path: string,
      o: { body?: unknown; installationId?: number | null; as?: 'app' | 'installation'; token?: string } = {},
    ) {
      if (o.as === 'app') return send<T>(method, path, o.body, `Bearer ${await getAppJwt()}`);
      if (o.token != null) return send<T>(method, path, o.body, `token ${o.token}`);
      if (o.installationId == null) {
        throw new GitHubError(
          0,
          `${method} ${path}: no App installation known for this repository; enable it again`,
          false,
        );
      }
      const { token } = await getInstallationToken(o.installationId);
      return send<T>(method, path, o.body, `token ${token}`);
    },
  };
}
