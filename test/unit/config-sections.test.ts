import { describe, expect, it } from 'vitest';
import {
  ConfigError,
  DEFAULT_MAX_CONCURRENT_LEASES,
  defaultConfig,
  fleetLabelOf,
  parseConfig,
  redactUrl,
  tokenLimitFor,
} from '../../core/config.ts';

/**
 * The newer config sections as an operator meets them: the defaults an empty section gives, and
 * the error (path: what to fix) a wrong value gives — token limits for development work, the fleet label of JIT runners, and URLs cut for logs.
 */

function problems(input: unknown): string[] {
  try {
    parseConfig(input, 'spark.config.json');
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return (e as ConfigError).problems;
  }
  throw new Error('accepted');
}

const DAY = 24 * 3600;

describe('tokenLimits', () => {
  it('with no section every token may hold 4 hosts, for the global maximum TTL, on every host', () => {
    expect(tokenLimitFor(defaultConfig(), 'alice')).toEqual({
      maxConcurrentLeases: DEFAULT_MAX_CONCURRENT_LEASES,
      maxTtlS: DAY,
      hosts: null,
    });
    expect(DEFAULT_MAX_CONCURRENT_LEASES).toBe(4);
  });

  it('the default applies to every token; a byName entry overrides it field by field', () => {
    const cfg = parseConfig({
      tokenLimits: {
        default: { maxConcurrentLeases: 2, maxTtlS: 3600, hosts: ['spark-2'] },
        byName: {
          bob: { maxConcurrentLeases: 1 },
          carol: { maxTtlS: 600 },
          dave: { hosts: ['spark-1'] },
          erin: { maxConcurrentLeases: 0, maxTtlS: 7200, hosts: ['spark-1', 'spark-2'] },
        },
      },
    });
    expect(tokenLimitFor(cfg, 'alice')).toEqual({
      maxConcurrentLeases: 2,
      maxTtlS: 3600,
      hosts: ['spark-2'],
    });
    expect(tokenLimitFor(cfg, 'bob')).toEqual({ maxConcurrentLeases: 1, maxTtlS: 3600, hosts: ['spark-2'] });
    expect(tokenLimitFor(cfg, 'carol')).toEqual({ maxConcurrentLeases: 2, maxTtlS: 600, hosts: ['spark-2'] });
    expect(tokenLimitFor(cfg, 'dave')).toEqual({ maxConcurrentLeases: 2, maxTtlS: 3600, hosts: ['spark-1'] });
    // 0 is a limit (no development work), not "unset"
    expect(tokenLimitFor(cfg, 'erin')).toEqual({
      maxConcurrentLeases: 0,
      maxTtlS: 7200,
      hosts: ['spark-1', 'spark-2'],
    });
  });

  it('only a byName entry by that exact name applies (not an inherited object property)', () => {
    const cfg = parseConfig({ tokenLimits: { default: { maxConcurrentLeases: 3 } } });
    for (const name of ['constructor', 'toString', '__proto__']) {
      expect(tokenLimitFor(cfg, name), name).toEqual({ maxConcurrentLeases: 3, maxTtlS: DAY, hosts: null });
    }
  });

  it('a byName entry without a field falls back to the default, then to the built-in value', () => {
    const cfg = parseConfig({ tokenLimits: { byName: { bob: { hosts: ['spark-1'] } } } });
    expect(tokenLimitFor(cfg, 'bob')).toEqual({ maxConcurrentLeases: 4, maxTtlS: DAY, hosts: ['spark-1'] });
  });

  it('a maximum TTL may equal the global bound but not exceed it', () => {
    const at = parseConfig({
      timings: { devLeaseMaxTtlS: 7200 },
      tokenLimits: { default: { maxTtlS: 7200 } },
    });
    expect(tokenLimitFor(at, 'alice').maxTtlS).toBe(7200);
    expect(
      problems({
        timings: { devLeaseMaxTtlS: 7200 },
        tokenLimits: {
          default: { maxTtlS: 7201 },
          byName: { bob: { maxTtlS: 3600 }, carol: { maxTtlS: 9000 } },
        },
      }),
    ).toEqual([
      'tokenLimits.default.maxTtlS: maxTtlS 7201 exceeds timings.devLeaseMaxTtlS (7200); lower it or raise the global bound',
      'tokenLimits.byName.carol.maxTtlS: maxTtlS 9000 exceeds timings.devLeaseMaxTtlS (7200); lower it or raise the global bound',
    ]);
  });

  it('hosts a token may use must be configured hosts, each named where it is written', () => {
    expect(
      problems({
        tokenLimits: { default: { hosts: ['spark-9'] }, byName: { bob: { hosts: ['spark-1', 'spark-7'] } } },
      }),
    ).toEqual([
      'tokenLimits.default.hosts.0: unknown host "spark-9" (hosts: spark-1, spark-2)',
      'tokenLimits.byName.bob.hosts.1: unknown host "spark-7" (hosts: spark-1, spark-2)',
    ]);
  });
});

describe('repositories', () => {
  it('a key must be exactly "owner/name": no path before or after it', () => {
    expect(problems({ repositories: { 'acme/iron/extra': {}, 'github.com/acme/iron': {} } })).toEqual([
      'repositories.acme/iron/extra: "acme/iron/extra" is not a repository: expected "owner/name"',
      'repositories.github.com/acme/iron: "github.com/acme/iron" is not a repository: expected "owner/name"',
    ]);
  });

  it('a very long wrong key is quoted only up to 100 characters', () => {
    const key = `acme/${'x'.repeat(150)}/tail`;
    const [problem] = problems({ repositories: { [key]: {} } });
    expect(problem).toBe(
      `repositories.${key}: "${key.slice(0, 100)}" is not a repository: expected "owner/name"`,
    );
  });
});

describe('fleet label', () => {
  it('a pool with its own runner label uses it; any other pool, known or not, the github fleet label', () => {
    const cfg = parseConfig({
      hosts: [
        { id: 'gpu-1', pool: 'a' },
        { id: 'gpu-2', pool: 'b' },
      ],
      preferHosts: [],
      pools: { a: { runnerLabel: 'pool-a' }, b: {} },
      github: { fleetLabel: 'acme-gpu' },
    });
    expect(fleetLabelOf(cfg, 'a')).toBe('pool-a');
    expect(fleetLabelOf(cfg, 'b')).toBe('acme-gpu');
    expect(fleetLabelOf(cfg, 'gone')).toBe('acme-gpu');
    expect(fleetLabelOf(defaultConfig(), 'spark')).toBe('waffuru-spark');
  });

  it('a fleet label that cannot be a runs-on label is refused with what a label may contain', () => {
    expect(problems({ github: { fleetLabel: 'spark fleet' } })).toEqual([
      'github.fleetLabel: a runner label is letters, digits, ".", "_" and "-"',
    ]);
  });
});

describe('URLs in logs', () => {
  it('a user name alone (a token in the user part) is cut too', () => {
    expect(redactUrl('https://ghp_SECRET@sqld.example/v2')).toBe('https://sqld.example/v2');
    expect(redactUrl('libsql://:SECRET@db.example')).toBe('libsql://db.example');
  });
});
