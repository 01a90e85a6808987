import { execFile } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REVOKE_ATTEMPTS, REVOKE_FUNCTIONS, TASK_MARK } from '../../agent/executor/ci-task.ts';

/**
 * The CI task's clone-token revoke (ADR 0115), run as the task runs it: the real shell functions
 * under /bin/sh, the real curl or GNU wget of this machine, against a real HTTP server on
 * loopback that plays GitHub's `DELETE /installation/token` (204, or whatever a case needs).
 * Each client runs through a shim that records its argv, so "the token never reaches argv" is
 * checked on what was really executed.
 */

const TOKEN = `ghs_${'5a'.repeat(18)}`;
let root = '';

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'spark-revoke-'));
});
afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

interface Stub {
  url: string;
  seen: { method: string; path: string; authorization: string | undefined }[];
  close(): Promise<void>;
}

/** GitHub's revoke endpoint for one case: answers `answers` in turn, then 204. */
async function stub(answers: number[] = []): Promise<Stub> {
  const seen: Stub['seen'] = [];
  const server: Server = createServer((req, res) => {
    seen.push({ method: req.method ?? '', path: req.url ?? '', authorization: req.headers.authorization });
    req.resume();
    res.writeHead(answers.shift() ?? 204);
    res.end();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/api/v3/installation/token`,
    seen,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

/** A PATH holding only what the functions use, plus shims for the named HTTP clients. */
function pathWith(clients: ('curl' | 'wget')[]): { bin: string; argv: string } {
  const bin = mkdtempSync(join(root, 'bin-'));
  for (const tool of ['grep', 'mktemp', 'sed', 'tail', 'rm', 'sleep']) {
    const real = ['/usr/bin', '/bin'].map((d) => join(d, tool)).find((p) => existsSync(p));
    if (!real) throw new Error(`${tool} is not installed here`);
    symlinkSync(real, join(bin, tool));
  }
  const argv = join(bin, 'argv.log');
  for (const c of clients) {
    const real = ['/usr/bin', '/bin'].map((d) => join(d, c)).find((p) => existsSync(p));
    if (!real) throw new Error(`${c} is not installed here`);
    writeFileSync(join(bin, c), `#!/bin/sh\nprintf '%s\\n' "$0 $*" >> "${argv}"\nexec "${real}" "$@"\n`);
    chmodSync(join(bin, c), 0o755);
  }
  return { bin, argv };
}

async function revoke(
  url: string,
  clients: ('curl' | 'wget')[],
  env: Record<string, string | undefined> = {},
): Promise<{ code: number; out: string; argv: string; tmp: string[] }> {
  const { bin, argv } = pathWith(clients);
  const tmp = mkdtempSync(join(root, 'tmp-'));
  const program = `say() { printf '${TASK_MARK} %s\\n' "$*"; }\n${REVOKE_FUNCTIONS}\nrevoke_token`;
  const full: Record<string, string> = { PATH: bin, TMPDIR: tmp, SPARK_CLONE_TOKEN: TOKEN };
  if (!('SPARK_REVOKE_URL' in env)) full.SPARK_REVOKE_URL = url;
  for (const [k, v] of Object.entries(env)) if (v !== undefined) full[k] = v;
  const { code, out } = await new Promise<{ code: number; out: string }>((resolve) => {
    execFile('/bin/sh', ['-c', program], { env: full }, (err, stdout, stderr) => {
      resolve({ code: err ? Number((err as { code?: unknown }).code ?? 1) : 0, out: stdout + stderr });
    });
  });
  return { code, out, argv: existsSync(argv) ? readFileSync(argv, 'utf8') : '', tmp: readdirSync(tmp) };
}

// concurrent: two cases wait out the retry backoff (2 s + 4 s); each has its own stub and dirs
describe.concurrent('the CI task revokes its clone token (DELETE /installation/token)', {
  timeout: 60_000,
}, () => {
  it('curl: one DELETE with the token as Bearer, 204 → revoked; the token is never in argv', async () => {
    const gh = await stub();
    const r = await revoke(gh.url, ['curl', 'wget']);
    await gh.close();
    expect(r.code, r.out).toBe(0);
    expect(r.out).toBe(`${TASK_MARK} clone token revoked: HTTP 204 from ${gh.url} (curl)\n`);
    expect(gh.seen).toEqual([
      { method: 'DELETE', path: '/api/v3/installation/token', authorization: `Bearer ${TOKEN}` },
    ]);
    expect(r.argv).toContain('-X DELETE -H @-');
    expect(r.argv).not.toContain(TOKEN);
  });

  it('GNU wget when there is no curl: the header from a private file, removed right after', async () => {
    const gh = await stub();
    const r = await revoke(gh.url, ['wget']);
    await gh.close();
    expect(r.code, r.out).toBe(0);
    expect(r.out).toBe(`${TASK_MARK} clone token revoked: HTTP 204 from ${gh.url} (wget)\n`);
    expect(gh.seen).toEqual([
      { method: 'DELETE', path: '/api/v3/installation/token', authorization: `Bearer ${TOKEN}` },
    ]);
    expect(r.argv).toContain('--method=DELETE');
    expect(r.argv).not.toContain(TOKEN);
    expect(r.tmp).toEqual([]);
  });

  it('a 5xx is tried again; only 204 counts, a 401 is final', async () => {
    const flaky = await stub([502]);
    const again = await revoke(flaky.url, ['curl']);
    await flaky.close();
    expect(again.code, again.out).toBe(0);
    expect(flaky.seen).toHaveLength(2);
    expect(again.out).toContain('clone token revoked: HTTP 204');

    const refusing = await stub([401]);
    const refused = await revoke(refusing.url, ['curl']);
    await refusing.close();
    expect(refused.code).toBe(1);
    expect(refusing.seen).toHaveLength(1);
    expect(refused.out).toBe(
      `${TASK_MARK} clone token revoke failed: HTTP 401 from ${refusing.url} after 1 attempt(s) (curl); the script did not run\n`,
    );
  });

  it(`GitHub down: ${REVOKE_ATTEMPTS} attempts, then it fails closed with the status`, async () => {
    const down = await stub([500, 500, 500, 500]);
    const r = await revoke(down.url, ['wget']);
    await down.close();
    expect(r.code).toBe(1);
    expect(down.seen).toHaveLength(REVOKE_ATTEMPTS);
    expect(r.out).toBe(
      `${TASK_MARK} clone token revoke failed: HTTP 500 from ${down.url} after ${REVOKE_ATTEMPTS} attempt(s) (wget); the script did not run\n`,
    );
  });

  it('nothing listening: no answer is said as such, after the same attempts', async () => {
    const gone = await stub();
    await gone.close();
    const r = await revoke(gone.url, ['curl']);
    expect(r.code).toBe(1);
    expect(r.out).toBe(
      `${TASK_MARK} clone token revoke failed: no answer from ${gone.url} after ${REVOKE_ATTEMPTS} attempt(s) (curl); the script did not run\n`,
    );
  });

  it('neither curl nor wget, or no revoke URL: fails closed naming the fix, asks nothing', async () => {
    const gh = await stub();
    const none = await revoke(gh.url, []);
    expect(none.code).toBe(1);
    expect(none.out).toBe(
      `${TASK_MARK} clone token revoke failed: the task image has neither curl nor GNU wget; install curl in the image (the token must be dead before the repository's code runs); the script did not run\n`,
    );
    const noUrl = await revoke(gh.url, ['curl'], { SPARK_REVOKE_URL: undefined });
    await gh.close();
    expect(noUrl.code).toBe(1);
    expect(noUrl.out).toContain('the controller handed over no revoke URL (upgrade the controller)');
    expect(gh.seen).toEqual([]);
  });
});
