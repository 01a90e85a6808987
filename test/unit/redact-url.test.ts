import { describe, expect, it } from 'vitest';
import { redactUrl } from '../../core/config.ts';
import { settingsFromEnv } from '../../functions/settings.ts';

/** URLs in logs and errors lose query strings and userinfo. */
describe('redactUrl', () => {
  it.each([
    ['libsql://db.example.turso.io?authToken=SECRET', 'libsql://db.example.turso.io'],
    ['https://user:SECRET@sqld.example:8080/v2?authToken=SECRET#frag', 'https://sqld.example:8080/v2'],
    ['file:/var/lib/spark/spark.db?authToken=SECRET', 'file:///var/lib/spark/spark.db'],
    ['file:data/spark.db', 'file:data/spark.db'],
    ['not a url?authToken=SECRET', 'not a url'],
    ['//user:SECRET@host/x', '//host/x'],
  ])('%s → %s', (raw, want) => {
    expect(redactUrl(raw)).toBe(want);
    expect(redactUrl(raw)).not.toContain('SECRET');
  });

  it('an invalid ledger URL is refused without echoing its secrets', () => {
    expect(() =>
      settingsFromEnv({ SPARK_LEDGER_URL: 'mysql://root:SECRET@db?authToken=SECRET' }, null),
    ).toThrow(/Invalid SPARK_LEDGER_URL 'mysql:\/\/db\/?'/);
    try {
      settingsFromEnv({ SPARK_LEDGER_URL: 'mysql://root:SECRET@db?authToken=SECRET' }, null);
    } catch (e) {
      expect(String((e as Error).message)).not.toContain('SECRET');
    }
  });
});
