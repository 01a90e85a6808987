import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { createClient } from '@libsql/client';
import { afterEach, describe, expect, it } from 'vitest';
import { tempDir } from '../../scripts/sim/ledger.ts';

/** `npm run deploy` (scripts/deploy.ts) run as a real child process. */
function deploy(args: string[], env: Record<string, string>) {
  const r = spawnSync(process.execPath, ['--import', 'tsx', 'scripts/deploy.ts', ...args], {
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', ...env },
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { code: r.status, out: `${r.stdout}${r.stderr}` };
}

describe('npm run deploy', () => {
  const dirs: Array<() => void> = [];
  afterEach(() => {
    for (const c of dirs.splice(0)) c();
  });

  it('fails with a clear message when the ledger URL or token is missing', () => {
    const none = deploy([], {});
    expect(none.code).toBe(2);
    expect(none.out).toMatch(/deploy: SPARK_LEDGER_URL is not set: export the remote libSQL URL/);
    const noToken = deploy([], { SPARK_LEDGER_URL: 'libsql://spark-ledger.example.turso.io' });
    expect(noToken.code).toBe(2);
    expect(noToken.out).toMatch(/SPARK_LEDGER_AUTH_TOKEN is not set/);
    const file = deploy([], { SPARK_LEDGER_URL: 'file:/tmp/x.db' });
    expect(file.code).toBe(2);
    expect(file.out).toMatch(/a Worker can only reach a remote libSQL database/);
  });

  it('applies migrations once; a second run changes nothing', async () => {
    const { dir, cleanup } = tempDir();
    dirs.push(cleanup);
    const url = `file:${join(dir, 'ledger.db')}`;
    const first = deploy(['--migrate-only'], { SPARK_LEDGER_URL: url });
    expect(first.code).toBe(0);
    expect(first.out).toMatch(/ledger migrations applied: 0000_/);
    const client = createClient({ url });
    await client.execute("INSERT INTO meta (key, value) VALUES ('kept', 'yes')");
    client.close();
    const second = deploy(['--migrate-only'], { SPARK_LEDGER_URL: url });
    expect(second.code).toBe(0);
    expect(second.out).toMatch(/ledger schema is up to date/);
    const again = createClient({ url });
    expect((await again.execute("SELECT value FROM meta WHERE key = 'kept'")).rows[0]?.value).toBe('yes');
    again.close();
  });
});
