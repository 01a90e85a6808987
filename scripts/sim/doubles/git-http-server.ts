import { execFile, spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/**
 * GitHub's git-over-HTTPS endpoint for the CI-task tests: real git repositories served
 * by git's own smart-HTTP CGI (`git http-backend`, git-http-backend(1)) behind a small Node server
 * that plays GitHub's authentication — HTTP Basic with an installation token as the password
 * (user `x-access-token`, GitHub "Authenticating as a GitHub App installation": `git clone
 * https://x-access-token:TOKEN@github.com/owner/repo.git`) — and answers 401 with a Basic
 * challenge otherwise. Whether a token may read a repository is asked of the caller (the fake
 * GitHub knows which repositories and permissions each token was minted with, and which were
 * revoked: a revoked token is refused like an unknown one).
 */

export interface GitServer {
  url: string;
  /** `<url>/<owner>/<name>.git` */
  cloneUrl(repo: string): string;
  /** Every request: the repository, the password presented (null: none), the answer, when (ms). */
  requests: { repo: string; token: string | null; status: number; service: string | null; at: number }[];
  /**
   * Makes a commit in `repo` (created on first use) with `files`; resolves to its SHA. Git runs as
   * a child the event loop does not wait on: a synchronous run blocks the test process for seconds
   * on a loaded machine, long enough for a server to close a kept-alive connection the process then
   * reuses (docs/adr/0285-test-ports-outside-the-ephemeral-range.md).
   */
  commit(repo: string, files: Record<string, string>, message?: string): Promise<string>;
  close(): Promise<void>;
}

const GIT_ENV = {
  GIT_AUTHOR_NAME: 'spark test',
  GIT_AUTHOR_EMAIL: 'spark-test@example.invalid',
  GIT_COMMITTER_NAME: 'spark test',
  GIT_COMMITTER_EMAIL: 'spark-test@example.invalid',
  GIT_CONFIG_NOSYSTEM: '1',
  HOME: '/nonexistent',
};

/** Starts the server on loopback; `mayRead(token, repo)` decides each request. */
export async function startGitServer(
  root: string,
  mayRead: (token: string, repo: string) => boolean,
): Promise<GitServer> {
  const requests: GitServer['requests'] = [];
  const git = async (cwd: string, ...args: string[]) =>
    (await run('git', args, { cwd, env: { ...process.env, ...GIT_ENV }, encoding: 'utf8' })).stdout.trim();

  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const m = /^\/([A-Za-z0-9_.-]+)\/([A-Za-z0-9_.-]+)\.git(\/.*)$/.exec(url.pathname);
    const service = url.searchParams.get('service') ?? (m?.[3]?.slice(1) || null);
    const auth = /^Basic (.+)$/i.exec(req.headers.authorization ?? '')?.[1];
    const [user, token] = auth ? Buffer.from(auth, 'base64').toString('utf8').split(':', 2) : [];
    const repo = m ? `${m[1]}/${m[2]}` : '';
    const refuse = (status: number, text: string) => {
      requests.push({ repo, token: token ?? null, status, service, at: Date.now() });
      res.writeHead(status, {
        'content-type': 'text/plain',
        ...(status === 401 ? { 'www-authenticate': 'Basic realm="GitHub"' } : {}),
      });
      res.end(text);
    };
    if (!m) return refuse(404, 'Not Found');
    // only reads are served: a clone token carries `contents: read`, never a push
    if (service === 'git-receive-pack') return refuse(403, 'Write access to repository not granted.');
    if (!token || user !== 'x-access-token' || !mayRead(token, repo))
      return refuse(401, 'Invalid username or token.');
    requests.push({ repo, token, status: 200, service, at: Date.now() });
    const cgi = spawn('git', ['http-backend'], {
      env: {
        ...process.env,
        ...GIT_ENV,
        GIT_PROJECT_ROOT: root,
        GIT_HTTP_EXPORT_ALL: '1',
        PATH_INFO: `/${repo}.git${m[3]}`,
        REQUEST_METHOD: req.method ?? 'GET',
        QUERY_STRING: url.search.slice(1),
        CONTENT_TYPE: req.headers['content-type'] ?? '',
        REMOTE_USER: 'x-access-token',
        REMOTE_ADDR: '127.0.0.1',
        ...(req.headers['content-encoding']
          ? { HTTP_CONTENT_ENCODING: req.headers['content-encoding'] }
          : {}),
        ...(req.headers['git-protocol'] ? { GIT_PROTOCOL: String(req.headers['git-protocol']) } : {}),
      },
      stdio: ['pipe', 'pipe', 'ignore'],
    });
    req.pipe(cgi.stdin);
    // a CGI answer: headers (`Status: 200 OK`, …), a blank line, then the body
    let head = Buffer.alloc(0);
    let sent = false;
    cgi.stdout.on('data', (chunk: Buffer) => {
      if (sent) return void res.write(chunk);
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf('\r\n\r\n');
      const endLf = end < 0 ? head.indexOf('\n\n') : -1;
      if (end < 0 && endLf < 0) return;
      const cut = end >= 0 ? end : endLf;
      const sep = end >= 0 ? 4 : 2;
      const headers: Record<string, string> = {};
      let status = 200;
      for (const line of head.subarray(0, cut).toString('latin1').split(/\r?\n/)) {
        const i = line.indexOf(':');
        if (i < 0) continue;
        const k = line.slice(0, i).trim();
        const v = line.slice(i + 1).trim();
        if (k.toLowerCase() === 'status') status = Number(v.split(' ')[0]) || 200;
        else headers[k] = v;
      }
      res.writeHead(status, headers);
      sent = true;
      res.write(head.subarray(cut + sep));
    });
    cgi.on('close', () => {
      if (!sent) res.writeHead(500);
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  return {
    url,
    cloneUrl: (repo) => `${url}/${repo}.git`,
    requests,
    async commit(repo, files, message = 'test commit') {
      const dir = join(root, `${repo}.git`);
      mkdirSync(dir, { recursive: true });
      try {
        await git(dir, 'rev-parse', '--git-dir');
      } catch {
        await git(dir, 'init', '-q', '-b', 'main');
        // GitHub serves any commit of the repository by its SHA (`git fetch <url> <sha>`)
        await git(dir, 'config', 'uploadpack.allowAnySHA1InWant', 'true');
        await git(dir, 'config', 'http.receivepack', 'false');
      }
      for (const [path, text] of Object.entries(files)) {
        mkdirSync(dirname(join(dir, path)), { recursive: true });
        writeFileSync(join(dir, path), text, { mode: 0o755 });
      }
      await git(dir, 'add', '-A');
      await git(dir, 'commit', '-q', '--allow-empty', '-m', message);
      return git(dir, 'rev-parse', 'HEAD');
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
