import { generateKeyPairSync } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { ConfigError, githubConfigProblems, parseConfig, runnerGroupIdOf } from '../../core/config.ts';
import { settingsFromEnv } from '../../functions/settings.ts';

/**
 * One coherent default (docs/github-app.md, ADR 0130): organization runners in a runner group the
 * operator names; with the App configured and no group, the controller refuses to start and says
 * what to set. Repository runners remain an option and need no group.
 */

const key = generateKeyPairSync('rsa', {
  modulusLength: 1024,
  privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
  publicKeyEncoding: { type: 'spki', format: 'pem' },
}).privateKey;
const app = { SPARK_GITHUB_APP_ID: '42', SPARK_GITHUB_PRIVATE_KEY: key };
const cfg = (github: Record<string, unknown>) => ({
  text: JSON.stringify({ github }),
  source: 'spark.config.json',
});

describe('runner scope default', () => {
  it('defaults to organization runners; the group id is the operator’s', () => {
    expect(parseConfig({}).github.runnerScope).toBe('org');
    expect(parseConfig({}).github.runnerGroupId).toBeUndefined();
    expect(githubConfigProblems(parseConfig({}))[0]).toMatch(
      /^github\.runnerGroupId: required with github\.runnerScope "org" \(the default\).*runner group.*or set github\.runnerScope to "repo"/,
    );
    expect(githubConfigProblems(parseConfig({ github: { runnerGroupId: 7 } }))).toEqual([]);
    expect(githubConfigProblems(parseConfig({ github: { runnerScope: 'repo' } }))).toEqual([]);
    expect(runnerGroupIdOf(parseConfig({ github: { runnerGroupId: 7 } }))).toBe(7);
    // repository runners join the "Default" group
    expect(runnerGroupIdOf(parseConfig({ github: { runnerScope: 'repo' } }))).toBe(1);
  });

  it('with the App configured and no group id, the settings refuse to start, naming the fix', () => {
    let err: unknown;
    try {
      settingsFromEnv(app, cfg({}));
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).problems).toEqual(githubConfigProblems(parseConfig({})));
    expect((err as ConfigError).message).toContain('spark.config.json');
    expect(settingsFromEnv(app, cfg({ runnerGroupId: 3 })).config.github.runnerGroupId).toBe(3);
    expect(settingsFromEnv(app, cfg({ runnerScope: 'repo' })).config.github.runnerScope).toBe('repo');
    // without the App nothing is registered: no configuration still starts
    expect(settingsFromEnv({}, null).config.github.runnerScope).toBe('org');
  });
});
