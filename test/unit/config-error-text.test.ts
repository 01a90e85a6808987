import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfig } from '../../core/config.ts';

/**
 * What an operator reads when the controller or the agent refuses its configuration: the process
 * exits with the error (`ConfigError: Invalid configuration in <file>:` and one line per problem),
 * so the name, the source and the layout are part of the message.
 */

function thrown(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return e as ConfigError;
  }
  throw new Error('accepted');
}

describe('configuration error text', () => {
  it('prints as ConfigError with the file and one indented line per problem', () => {
    const e = thrown(() =>
      parseConfig({ hosts: [{ id: 'spark-1', pool: 'gpu' }], preferHosts: ['spark-9'] }, 'spark.config.json'),
    );
    expect(String(e)).toBe(
      [
        'ConfigError: Invalid configuration in spark.config.json:',
        '  - hosts.0.pool: pool "gpu" is not defined under "pools" (defined: spark)',
        '  - preferHosts.0: preferHosts names unknown host "spark-9"',
      ].join('\n'),
    );
    expect(e.stack?.split('\n')[0]).toBe('ConfigError: Invalid configuration in spark.config.json:');
  });

  it('names "config" as the source when the caller gives none', () => {
    const e = thrown(() => parseConfig({ hosts: [] }));
    expect(e.source).toBe('config');
    expect(e.message).toMatch(/^Invalid configuration in config:\n {2}- hosts: /);
  });

  it('lists every defined pool when a host names another', () => {
    const e = thrown(() => parseConfig({ hosts: [{ id: 'spark-1', pool: 'gpu' }], pools: { a: {}, b: {} } }));
    expect(e.problems).toContain('hosts.0.pool: pool "gpu" is not defined under "pools" (defined: a, b)');
  });
});
