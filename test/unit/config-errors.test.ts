import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfig, parseConfigText } from '../../core/config.ts';

/** Every configuration mistake is named with its path and what to write instead. */

function problems(input: unknown): string[] {
  try {
    parseConfig(input, 'spark.config.json');
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    expect((e as ConfigError).source).toBe('spark.config.json');
    return (e as ConfigError).problems;
  }
  throw new Error('accepted');
}

describe('configuration errors', () => {
  it('a host id, pool and preference that do not fit', () => {
    expect(
      problems({ hosts: [{ id: 'spark-1', pool: 'gpu' }], pools: {}, preferHosts: ['spark-9'] }),
    ).toEqual([
      'hosts.0.pool: pool "gpu" is not defined under "pools" (defined: none)',
      'preferHosts.0: preferHosts names unknown host "spark-9"',
    ]);
    expect(problems({ hosts: [{ id: 'spark-1', pool: 'gpu' }], preferHosts: [] })).toEqual([
      'hosts.0.pool: pool "gpu" is not defined under "pools" (defined: spark)',
    ]);
    expect(problems({ hosts: [{ id: '-x' }], preferHosts: [] })[0]).toMatch(
      /^hosts\.0\.id: host ids are lower-case/,
    );
    expect(problems({ hosts: [] })[0]).toMatch(/^hosts: /);
    expect(problems({ hosts: [{ id: 'spark-1', gpus: 0 }], preferHosts: [] })[0]).toMatch(
      /^hosts\.0\.gpus: /,
    );
  });

  it('a ledger URL of another kind', () => {
    expect(problems({ ledgerUrl: 'postgres://db' })).toEqual([
      'ledgerUrl: expected a file:, libsql:, http(s): or ws(s): URL',
    ]);
    for (const ledgerUrl of [
      'file:x.db',
      'libsql://db.example',
      'https://db.example',
      'http://127.0.0.1:8080',
      'wss://db',
      'ws://db',
    ])
      expect(parseConfig({ ledgerUrl }).ledgerUrl).toBe(ledgerUrl);
    expect(problems({ ledgerUrl: 'x-file:a' })).toHaveLength(1);
  });

  it('schedules: owner/name, a cron, benchmark or background work', () => {
    expect(problems({ schedules: [{ repo: 'acme', cron: '0 3 * * *' }] })).toEqual([
      'schedules.0.repo: expected "owner/name"',
    ]);
    expect(problems({ schedules: [{ repo: 'acme/iron/x', cron: '0 3 * * *' }] })).toHaveLength(1);
    expect(problems({ schedules: [{ repo: 'acme/iron', cron: '' }] })[0]).toMatch(/^schedules\.0\.cron: /);
    expect(parseConfig({ schedules: [{ repo: 'acme/iron', cron: '0 3 * * *' }] }).schedules).toEqual([
      { repo: 'acme/iron', cron: '0 3 * * *', kind: 'benchmark', suite: 'performance', topology: 'single' },
    ]);
  });

  it('GitHub settings default to the App setup docs/github-app.md describes', () => {
    expect(parseConfig({}).github).toEqual({
      apiUrl: 'https://api.github.com',
      gitUrl: 'https://github.com',
      appId: null,
      workflow: 'spark-pr-test.yml',
      labels: { test: 'spark-test', long: 'spark-test-long', pair: 'spark-pair-test' },
      requiredPermission: ['maintain', 'admin'],
      permissionCacheS: 60,
      // organization runners in a group the operator names (docs/adr/0130)
      runnerScope: 'org',
      checkName: 'Spark test',
      fleetLabel: 'waffuru-spark',
    });
    expect(parseConfig({ github: { appId: '123' } }).github.appId).toBe('123');
    expect(problems({ github: { appId: '12a' } })[0]).toMatch(/^github\.appId: /);
    expect(problems({ github: { requiredPermission: [] } })[0]).toMatch(/^github\.requiredPermission: /);
  });

  it('timings default to the design and heartbeats must come faster than offline', () => {
    expect(parseConfig({}).timings).toEqual({
      heartbeatIntervalS: 10,
      offlineAfterS: 40,
      runnerPickupTimeoutS: 600,
      runnerRetries: 3,
      taskStartTimeoutS: 1200,
      queueTimeoutS: 21600,
      ciLeaseTtlS: 300,
      devLeaseDefaultTtlS: 14400,
      devLeaseMaxTtlS: 86400,
      restoreRetries: 3,
      restoreBackoffS: 30,
      restoreHealthTimeoutS: 600,
    });
    expect(problems({ timings: { heartbeatIntervalS: 40, offlineAfterS: 40 } })).toEqual([
      'timings.offlineAfterS: offlineAfterS must be longer than heartbeatIntervalS, or every host flaps offline',
    ]);
  });

  it("the task-start timeout is whole seconds within the clone token's hour (ADR 0120)", () => {
    expect(parseConfig({ timings: { taskStartTimeoutS: 90 } }).timings.taskStartTimeoutS).toBe(90);
    expect(problems({ timings: { taskStartTimeoutS: 3601 } })).toEqual([
      "timings.taskStartTimeoutS: at most 3600 s: a CI task's clone token lives one hour from the grant, so a task dstack starts later cannot fetch its commit",
    ]);
    expect(problems({ timings: { taskStartTimeoutS: 0 } })[0]).toMatch(/^timings\.taskStartTimeoutS: /);
    expect(problems({ timings: { taskStartTimeoutS: 1.5 } })[0]).toMatch(/^timings\.taskStartTimeoutS: /);
  });

  it('unknown keys and syntax errors', () => {
    expect(problems({ budget: {} })[0]).toMatch(/^\(root\): .*budget/);
    expect(() => parseConfigText('[', 'x.json')).toThrow(
      'Invalid configuration in x.json:\n  - not valid JSON:',
    );
    expect(parseConfigText('{}', 'x.json').hosts).toHaveLength(2);
    expect(parseConfig(null).budgets).toEqual({ maxPrs: 2, maxGpusPerPr: 4, maxGpus: 8 });
  });
});
