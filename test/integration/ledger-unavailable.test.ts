import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createApiToken } from '../../functions/auth/tokens.ts';
import { silentLogger } from '../../functions/log.ts';
import { startController } from '../../functions/node-server.ts';
import { settingsFromEnv } from '../../functions/settings.ts';
import { makeTestLedger, tempDir } from '../../scripts/sim/ledger.ts';
import { startTestController } from '../helpers/controller.ts';
import { heardAnHourAgo } from './cli-harness.ts';

/**
 * what really fails when the ledger cannot be written. The tests run as root,
 * for whom file modes do not matter, so the files are made immutable (`chattr +i`, ext4/xfs):
 * an immutable `-wal` under a running controller makes SQLite answer `SQLITE_IOERR` on the next
 * write; an immutable database file and directory make a fresh connection `SQLITE_READONLY`.
 * Every path made immutable is made mutable again after each test.
 */

const immutable: string[] = [];
function chattr(flag: '+i' | '-i', paths: string[]) {
  execFileSync('chattr', [flag, ...paths]);
  if (flag === '+i') immutable.push(...paths);
}
afterEach(() => {
  if (immutable.length) chattr('-i', immutable.splice(0));
});

const config = { hosts: [{ id: 'spark-1', homeService: 'deckard' }, { id: 'spark-2' }] };

describe('a ledger that cannot be written', () => {
  it('answers 503 ledger_unavailable (never 500), writes nothing, and /healthz turns 503', async () => {
    const c = await startTestController({ config, listen: false });
    try {
      const token = (await createApiToken(c.ledger, { name: 'dev', scopes: ['develop'] }, 'test')).token;
      // the fleet's backends known, so the development request reaches the ledger (ADR 0176)
      await heardAnHourAgo(c.ledger);
      const healthy = await c.app.request('/healthz');
      expect(await healthy.json()).toMatchObject({ ok: true, writable: true });
      const before = (await c.ledger.store.client.execute('SELECT count(*) AS n FROM reservations')).rows[0]!
        .n;
      const wal = join(c.dir, 'spark.db-wal');
      expect(existsSync(wal)).toBe(true);
      chattr('+i', [wal]);

      const res = await c.app.request('/api/v1/reservations', {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ topology: 'single' }),
      });
      const body = (await res.json()) as { error: { code: string; message: string } };
      expect(res.status, JSON.stringify(body)).toBe(503);
      expect(body.error.code).toBe('ledger_unavailable');
      expect(body.error.message).not.toMatch(/SQLITE|\/tmp\//);
      expect(res.headers.get('retry-after')).toBe('30');

      // the health check's write probe sees it (cached for a few seconds: a new controller app
      // on the same ledger would be the next one to probe; this one probed a moment ago)
      const { createApp, WRITE_PROBE_TTL_MS } = await import('../../functions/app.ts');
      expect(WRITE_PROBE_TTL_MS).toBeGreaterThan(0);
      const fresh = createApp(c.ctx, []);
      const health = await fresh.request('/healthz');
      expect(health.status).toBe(503);
      expect(await health.json()).toMatchObject({ error: { code: 'ledger_unavailable' } });

      chattr('-i', immutable.splice(0));
      const after = (await c.ledger.store.client.execute('SELECT count(*) AS n FROM reservations')).rows[0]!
        .n;
      expect(after).toBe(before);
    } finally {
      if (immutable.length) chattr('-i', immutable.splice(0));
      await c.close();
    }
  });

  it('the controller refuses to start on a read-only ledger, saying what to fix', async () => {
    const { dir, cleanup } = tempDir('spark-ro-');
    try {
      const url = `file:${join(dir, 'spark.db')}`;
      const seed = await makeTestLedger({ url, config });
      await seed.ledger.checkpointWal();
      seed.ledger.store.close();
      chattr('+i', [join(dir, 'spark.db'), dir]);
      const settings = settingsFromEnv(
        { SPARK_LEDGER_URL: url },
        { text: JSON.stringify({ ...config, listen: { host: '127.0.0.1', port: 0 } }), source: 'test' },
      );
      await expect(startController({ settings, log: silentLogger, noListen: true })).rejects.toThrow(
        /cannot be written \(SQLITE_READONLY[\s\S]*refuses to start: make the file/,
      );
    } finally {
      if (immutable.length) chattr('-i', immutable.splice(0));
      cleanup();
    }
  });
});
