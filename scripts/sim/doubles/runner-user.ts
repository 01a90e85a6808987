import { execFile } from 'node:child_process';
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** A real, unprivileged, uniquely named system user made for one test host (the runner user of). */
export interface TestUser {
  name: string;
  uid: number;
  gid: number;
  /** Its home, made by useradd as for `spark-runner` (docs/agent.md): where a job's global git config lands. */
  home: string;
  /** Ends what still runs as this user (by pid) and deletes it with its group. */
  remove(): Promise<void>;
}

let counter = 0;

/** Whether this process may create users (root; CI runs as root). */
export const canCreateUsers = (): boolean => process.getuid?.() === 0;

async function retrying(argv: string[]): Promise<void> {
  // useradd/userdel lock /etc/passwd; parallel test files may hold it for a moment (exit 10)
  for (let attempt = 0; ; attempt++) {
    try {
      await run(argv[0]!, argv.slice(1));
      return;
    } catch (e) {
      const code = (e as { code?: number }).code;
      if (attempt >= 40 || (code !== 10 && code !== 1)) throw e;
      await new Promise((r) => setTimeout(r, 50 + Math.random() * 100));
    }
  }
}

/** Live processes whose real or effective uid is `uid` (zombies excluded). */
export function pidsOfUid(uid: number): number[] {
  const out: number[] = [];
  for (const p of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const s = readFileSync(`/proc/${p}/status`, 'utf8');
      if (/^State:\s+[ZX]/m.test(s)) continue;
      const m = /^Uid:\s+(\d+)\s+(\d+)/m.exec(s);
      if (m && (Number(m[1]) === uid || Number(m[2]) === uid)) out.push(Number(p));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/**
 * `useradd --system --create-home` a user named `spark-t<pid>-<n>` with its home under /var/lib and
 * no login shell — what an operator does for `spark-runner` (docs/agent.md), made unique so
 * parallel test files never share one.
 */
export async function createTestUser(): Promise<TestUser> {
  if (!canCreateUsers()) {
    throw new Error(
      'creating a runner user needs root (CI runs as root): run the agent tests as root so the test setup can useradd',
    );
  }
  const name = `spark-t${process.pid}-${counter++}`;
  const home = `/var/lib/${name}`;
  await retrying([
    'useradd',
    '--system',
    '--create-home',
    '--home-dir',
    home,
    '--shell',
    '/usr/sbin/nologin',
    name,
  ]);
  const { stdout } = await run('getent', ['passwd', name]);
  const f = stdout.trim().split(':');
  const uid = Number(f[2]);
  const gid = Number(f[3]);
  return {
    name,
    uid,
    gid,
    home,
    async remove() {
      for (const pid of pidsOfUid(uid)) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      await retrying(['userdel', '--force', '--remove', name]).catch(() => undefined);
      // userdel --remove may leave a home it did not make from skel (files of other owners)
      rmSync(home, { recursive: true, force: true });
    },
  };
}
