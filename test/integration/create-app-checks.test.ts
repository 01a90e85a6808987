import { chmodSync, existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ConfigError } from '../../core/config.ts';
import { withSecretsFile } from '../../functions/secrets-file.ts';
import { EnvSchema } from '../../functions/settings.ts';
import { runCreateApp } from '../../scripts/create-app/main.ts';
import { checkPublicUrl } from '../../scripts/create-app/options.ts';
import { tempDir } from '../../scripts/sim/ledger.ts';

/**
 * What `create-app` refuses before it opens a port or sends anything to GitHub (exit 2, one line
 * naming the fix), how it gives up waiting, and how `npm start` reads the secrets file it writes
 * (functions/secrets-file.ts).
 */

let dir: { dir: string; cleanup: () => void };
beforeEach(() => {
  dir = tempDir('spark-create-app-checks-');
});
afterEach(() => dir.cleanup());

async function run(args: string[], env: Record<string, string> = {}) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCreateApp(
    args,
    { out: (t) => out.push(t), err: (t) => err.push(t) },
    { SPARK_SECRETS_FILE: join(dir.dir, 'spark.secrets.env'), ...env },
  );
  return { code, out: out.join('\n'), err: err.join('\n') };
}

const KNOWN = Object.keys(EnvSchema.shape);

describe('create-app refuses before anything is created', () => {
  it('a public URL GitHub would send the webhook secret to in the clear', async () => {
    const r = await run(['--org', 'acme', '--public-url', 'http://spark.example.org']);
    expect(r).toMatchObject({ code: 2, out: '' });
    expect(r.err).toBe(
      "create-app: invalid --public-url 'http://spark.example.org': GitHub sends webhooks with the App's secret to it, so it must be https (plain http only on loopback)",
    );
    expect(checkPublicUrl('http://127.0.0.1:8787/')).toBe('http://127.0.0.1:8787');
    expect(checkPublicUrl('https://ops.example.org/spark/')).toBe('https://ops.example.org/spark');
    expect(() => checkPublicUrl('https://u:p@spark.example.org')).toThrow(/no credentials/);
    expect((await run(['--org', 'acme'])).err).toMatch(/give --public-url https:\/\/CONTROLLER/);
  });

  it('an account that does not fit the runner scope, or a scope the config does not use', async () => {
    const user = await run(['--user', '--public-url', 'https://spark.example.org']);
    expect(user.code).toBe(2);
    expect(user.err).toMatch(/organization runners .* need an organization: give --org ORG/);
    const config = join(dir.dir, 'spark.config.json');
    writeFileSync(config, JSON.stringify({ github: { runnerGroupId: 2 } }));
    const mismatch = await run(
      ['--org', 'acme', '--public-url', 'https://spark.example.org', '--runner-scope', 'repo'],
      { SPARK_CONFIG: config },
    );
    expect(mismatch.code).toBe(2);
    expect(mismatch.err).toMatch(
      /--runner-scope repo does not match github.runnerScope "org" in .*spark\.config\.json: the controller could not use that App/,
    );
    expect((await run(['--org', 'acme', '--user', '--public-url', 'https://x.example'])).err).toMatch(
      /name the account that will own the App/,
    );
    expect((await run(['--org', 'bad_org', '--public-url', 'https://x.example'])).err).toMatch(
      /invalid --org/,
    );
  });

  it('a name GitHub would refuse (over 34 characters); a default name that fits', async () => {
    const long = await run(['--org', 'acme', '--public-url', 'https://x.example', '--name', 'x'.repeat(35)]);
    expect(long).toMatchObject({ code: 2 });
    expect(long.err).toMatch(/GitHub takes 1 to 34 characters, unique across GitHub/);
  });

  it('an App already in the secrets file, unless --force; a file it could not rewrite', async () => {
    const file = join(dir.dir, 'spark.secrets.env');
    writeFileSync(file, 'SPARK_GITHUB_APP_ID="77"\n', { mode: 0o600 });
    const r = await run(['--org', 'acme', '--public-url', 'https://spark.example.org']);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/already holds a GitHub App \(SPARK_GITHUB_APP_ID=77\): --force replaces it/);
    // a value the file's format cannot carry back stops the run before GitHub creates anything
    writeFileSync(file, `SPARK_LEDGER_AUTH_TOKEN='a"b'\n`, { mode: 0o600 });
    const odd = await run(['--org', 'acme', '--public-url', 'https://spark.example.org', '--force']);
    expect(odd.code).toBe(2);
    expect(odd.err).toMatch(/cannot be rewritten: SPARK_LEDGER_AUTH_TOKEN: a value with quotes/);
  });

  it('gives up when no App is created in time (exit 8), storing nothing', async () => {
    const r = await run([
      '--org',
      'acme',
      '--public-url',
      'https://spark.example.org',
      '--github-url',
      'https://github.example',
      '--api-url',
      'https://github.example/api/v3',
      '--timeout',
      '1s',
    ]);
    expect(r.code).toBe(8);
    expect(r.out).toMatch(
      /^Open http:\/\/127\.0\.0\.1:\d+\/ in a browser signed in to GitHub as an owner of acme:/m,
    );
    expect(r.err).toMatch(/no App was created within 1s \(GitHub's code lives one hour\)/);
    expect(existsSync(join(dir.dir, 'spark.secrets.env'))).toBe(false);
  });
});

describe('the secrets file npm start reads', () => {
  it('sits under the environment, which wins; only its owner may read it; only known variables', () => {
    const file = join(dir.dir, 'spark.secrets.env');
    writeFileSync(file, 'SPARK_GITHUB_APP_ID="12"\nSPARK_WEBHOOK_SECRET="from-file"\n', { mode: 0o600 });
    const { env, source } = withSecretsFile(
      { SPARK_SECRETS_FILE: file, SPARK_WEBHOOK_SECRET: 'from-env' },
      KNOWN,
    );
    expect(source).toBe(file);
    expect(env).toMatchObject({ SPARK_GITHUB_APP_ID: '12', SPARK_WEBHOOK_SECRET: 'from-env' });

    chmodSync(file, 0o644);
    expect(() => withSecretsFile({ SPARK_SECRETS_FILE: file }, KNOWN)).toThrow(ConfigError);
    expect(() => withSecretsFile({ SPARK_SECRETS_FILE: file }, KNOWN)).toThrow(
      /readable by others \(mode 0644\): .*chmod 600/,
    );
    chmodSync(file, 0o600);
    writeFileSync(file, 'SPARK_WEBHOK_SECRET="typo"\n');
    expect(() => withSecretsFile({ SPARK_SECRETS_FILE: file }, KNOWN)).toThrow(
      /SPARK_WEBHOK_SECRET: not a variable the controller reads/,
    );
    expect(() => withSecretsFile({ SPARK_SECRETS_FILE: join(dir.dir, 'missing.env') }, KNOWN)).toThrow(
      /file not found \(SPARK_SECRETS_FILE=/,
    );
  });
});
