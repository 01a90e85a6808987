import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createApiToken } from '../../functions/auth/tokens.ts';
import type { RunningController } from '../../functions/node-server.ts';
import { adoptAll } from '../../scripts/sim/ledger.ts';
import { startTestController } from '../helpers/controller.ts';
import { heardAnHourAgo } from './cli-harness.ts';

/**
 * The series the alert rules need beyond what /metrics had (functions/metrics/alert-rules.yml,
 * docs/metrics.md "Alerts"), read from a controller's `/metrics` after the real commands:
 * `spark_home_service_restore_failures` (a Deckard restore failing, then quarantined, then cleared
 * by an operator) and `spark_ledger_write_errors_total` (a ledger whose `-wal` was made immutable,
 * `chattr +i`, as in ledger-unavailable.test.ts: the tests run as root, for whom file modes do not
 * matter).
 */

let c: (RunningController & { dir: string }) | null = null;
const immutable: string[] = [];
afterEach(async () => {
  if (immutable.length) execFileSync('chattr', ['-i', ...immutable.splice(0)]);
  await c?.close();
  c = null;
});

const config = {
  hosts: [{ id: 'spark-1', homeService: 'deckard' }, { id: 'spark-2' }],
  timings: { restoreRetries: 2 },
};

/** The value of one sample of `/metrics`, by its exact series text; NaN when absent. */
async function sample(series: string): Promise<number> {
  const text = await (await c!.app.request('/metrics')).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line ? Number(line.slice(series.length + 1)) : Number.NaN;
}

describe('series for the alert rules', () => {
  it('every alert event type is exported at 0 before the first one, so increase() sees the first', async () => {
    c = await startTestController({ config, listen: false });
    for (const type of [
      'alert.restore_failed',
      'alert.foreign_job',
      'alert.pair_node_lost',
      'alert.emergency_terminate',
    ])
      expect(await sample(`spark_ledger_events_total{type="${type}"}`), type).toBe(0);
  });

  it('spark_home_service_restore_failures counts failed restores until one passes or an operator clears the quarantine', async () => {
    c = await startTestController({ config, listen: false });
    const { ledger } = c;
    await adoptAll(ledger);
    const series = 'spark_home_service_restore_failures{host="spark-1",service="deckard"}';
    expect(await sample(series)).toBe(0);
    // the home service is being restored (after a lease lent it)
    await ledger.write(async (tx, now) => {
      const host = (await ledger.getHost(tx, 'spark-1'))!;
      await ledger.setHostPhase(tx, now, host, 'restoring', 'test: restoring', 'test');
    });
    await ledger.recordRestore('spark-1', false, 'model-ready health 503', 'agent:spark-1');
    expect(await sample(series)).toBe(1);
    await ledger.recordRestore('spark-1', false, 'model-ready health 503', 'agent:spark-1');
    await ledger.recordRestore('spark-1', false, 'model-ready health 503', 'agent:spark-1');
    expect((await ledger.getHost(undefined, 'spark-1'))?.phase).toBe('quarantined');
    expect(await sample(series)).toBe(3);
    expect(await sample('spark_host_state{host="spark-1",state="quarantined"}')).toBe(1);
    await ledger.clearQuarantine('spark-1', 'api:ops');
    expect(await sample(series)).toBe(0);
    await ledger.recordRestore('spark-1', true, 'model-ready', 'agent:spark-1');
    expect(await sample(series)).toBe(0);
  });

  it('spark_ledger_write_errors_total counts writes the ledger could not take, by cause', async () => {
    c = await startTestController({ config, listen: false });
    const token = (await createApiToken(c.ledger, { name: 'dev', scopes: ['develop'] }, 'test')).token;
    // the fleet's backends known, so the development request reaches the ledger (ADR 0176)
    await heardAnHourAgo(c.ledger);
    expect(await sample('spark_ledger_write_errors_total{cause="storage"}')).toBe(0);
    expect(await sample('spark_ledger_write_errors_total{cause="busy"}')).toBe(0);
    // a refused command is no ledger error
    const refused = await c.app.request('/api/v1/reservations', {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ host: 'spark-9' }),
    });
    expect(refused.status).toBeGreaterThanOrEqual(400);
    expect(refused.status).toBeLessThan(500);
    expect(await sample('spark_ledger_write_errors_total{cause="storage"}')).toBe(0);

    const wal = join(c.dir, 'spark.db-wal');
    execFileSync('chattr', ['+i', wal]);
    immutable.push(wal);
    for (let i = 0; i < 2; i++) {
      const res = await c.app.request('/api/v1/reservations', {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ topology: 'single' }),
      });
      expect(res.status).toBe(503);
    }
    expect(await sample('spark_ledger_write_errors_total{cause="storage"}')).toBeGreaterThanOrEqual(2);
    expect(await sample('spark_ledger_write_errors_total{cause="busy"}')).toBe(0);
  });
});
