import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ConfigError, defaultConfig, parseConfig, parseConfigText } from '../../core/config.ts';
import { settingsFromEnv } from '../../functions/settings.ts';
import { configJsonSchema } from '../../scripts/gen-config-schema.ts';

describe('configuration', () => {
  it('defaults to the two-Spark fleet of the design', () => {
    const c = defaultConfig();
    expect(c.hosts).toEqual([
      { id: 'spark-1', pool: 'spark', gpus: 1, homeService: 'deckard' },
      { id: 'spark-2', pool: 'spark', gpus: 1, homeService: null },
    ]);
    expect(c.preferHosts).toEqual(['spark-2']);
    expect(c.priorities).toEqual({
      development: 100,
      deckard: 90,
      manual: 80,
      merge: 70,
      benchmark: 50,
      background: 20,
    });
    expect(c.budgets).toEqual({ maxPrs: 2, maxGpusPerPr: 4, maxGpus: 8 });
    expect(c.timings.offlineAfterS).toBe(40);
    expect(c.timings.heartbeatIntervalS).toBe(10);
    expect(c.listen).toEqual({ host: '127.0.0.1', port: 8787 });
    expect(c.ledgerUrl).toBe('file:./data/spark.db');
  });

  it('accepts any number of hosts and pools', () => {
    const c = parseConfig({
      hosts: Array.from({ length: 12 }, (_, i) => ({ id: `gpu-${i}`, pool: i < 6 ? 'a' : 'b', gpus: 2 })),
      pools: { a: { runnerLabel: 'pool-a' }, b: { runnerLabel: 'pool-b' } },
      preferHosts: [],
    });
    expect(c.hosts).toHaveLength(12);
  });

  it('says what to fix, naming every bad field', () => {
    let err: unknown;
    try {
      parseConfig(
        {
          hosts: [{ id: 'Spark 1' }, { id: 'spark-2', pool: 'nope' }, { id: 'spark-2' }],
          budgets: { maxPrs: 0 },
          timings: { heartbeatIntervalS: 50, offlineAfterS: 40 },
          surprise: true,
        },
        'spark.config.json',
      );
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    const msg = (err as Error).message;
    expect(msg).toContain('Invalid configuration in spark.config.json');
    expect(msg).toMatch(/hosts\.0\.id: host ids are lower-case/);
    expect(msg).toMatch(/hosts\.1\.pool: pool "nope" is not defined under "pools"/);
    expect(msg).toMatch(/hosts\.2\.id: duplicate host id "spark-2"/);
    expect(msg).toMatch(/budgets\.maxPrs/);
    expect(msg).toMatch(/offlineAfterS must be longer than heartbeatIntervalS/);
    expect(msg).toMatch(/surprise/);
  });

  it('reports a JSON syntax error as a config error', () => {
    expect(() => parseConfigText('{ "hosts": [', 'spark.config.json')).toThrow(
      /spark\.config\.json[\s\S]*not valid JSON/,
    );
  });

  it('rejects a bad ledger URL from the environment with a message that says what to fix', () => {
    expect(() => settingsFromEnv({ SPARK_LEDGER_URL: 'x' }, null)).toThrow(
      "Invalid SPARK_LEDGER_URL 'x': expected file:, libsql:, http(s): or ws(s):",
    );
  });

  it('the Node tick and admission pass periods default to 1 s and 2 s; a bad value says what to fix', () => {
    expect(settingsFromEnv({}, null)).toMatchObject({ tickMs: 1000, admissionIntervalMs: 2000 });
    expect(settingsFromEnv({ SPARK_TICK_MS: '200', SPARK_ADMISSION_INTERVAL_MS: '500' }, null)).toMatchObject(
      { tickMs: 200, admissionIntervalMs: 500 },
    );
    expect(() => settingsFromEnv({ SPARK_TICK_MS: '0' }, null)).toThrow(
      'SPARK_TICK_MS must be a positive whole number of milliseconds, e.g. 1000',
    );
    expect(() => settingsFromEnv({ SPARK_ADMISSION_INTERVAL_MS: '2s' }, null)).toThrow(
      'SPARK_ADMISSION_INTERVAL_MS must be a positive whole number of milliseconds, e.g. 2000',
    );
  });

  it('the example config is valid', () => {
    const c = parseConfigText(readFileSync('spark.config.example.json', 'utf8'), 'spark.config.example.json');
    expect(c.schedules[0]).toMatchObject({ repo: 'acme/iron', kind: 'benchmark' });
  });

  it('the committed JSON Schema matches the zod schema (npm run config:schema)', () => {
    expect(readFileSync('spark.config.schema.json', 'utf8')).toBe(configJsonSchema());
  });
});
