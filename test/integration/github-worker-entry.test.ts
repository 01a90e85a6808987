import { describe, expect, it } from 'vitest';
import worker from '../../functions/worker.ts';

/** The Worker entry's own checks, called the way workerd calls it. */
describe('Worker entry configuration', () => {
  const exec = { waitUntil: () => undefined, passThroughOnException: () => undefined, props: {} };

  it('an unset SPARK_LEDGER_URL says so, instead of naming the Node default file', async () => {
    for (const env of [{}, { SPARK_LEDGER_URL: '  ' }]) {
      const res = await worker.fetch(new Request('http://worker.test/healthz'), env, exec);
      expect(res.status).toBe(500);
      const body = (await res.json()) as { error: { code: string; message: string } };
      expect(body.error.code).toBe('misconfigured');
      expect(body.error.message).toMatch(/^SPARK_LEDGER_URL is not set: a Worker needs a remote libSQL URL/);
      expect(body.error.message).not.toContain('file:');
    }
  });

  it('a file: ledger is refused with what to set instead', async () => {
    const res = await worker.fetch(
      new Request('http://worker.test/healthz'),
      { SPARK_LEDGER_URL: 'file:./data/spark.db' },
      exec,
    );
    expect(res.status).toBe(500);
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(
      /^SPARK_LEDGER_URL is 'file:\.\/data\/spark\.db': a Worker needs a remote libSQL URL/,
    );
  });
});
