import { join } from 'node:path';
import type { SparkConfigInput } from '../../core/config.ts';
import type { AppModule } from '../../functions/app.ts';
import type { Clock } from '../../functions/ledger/ledger.ts';
import { silentLogger } from '../../functions/log.ts';
import { appModules } from '../../functions/modules.ts';
import { type RunningController, startController } from '../../functions/node-server.ts';
import { settingsFromEnv } from '../../functions/settings.ts';
import { tempDir } from '../../scripts/sim/ledger.ts';

/**
 * Starts a real controller in this process on an ephemeral loopback port with a fresh libSQL
 * file ledger. `env` are SPARK_* variables (e.g. SPARK_WEBHOOK_SECRET).
 */
export async function startTestController(
  opts: {
    config?: SparkConfigInput;
    env?: Record<string, string>;
    modules?: readonly AppModule[];
    clock?: Clock;
    fetch?: typeof fetch;
    listen?: boolean;
    ledgerUrl?: string;
    /** Safety-net timer for admission passes; events trigger passes regardless. */
    admissionIntervalMs?: number;
  } = {},
): Promise<RunningController & { dir: string }> {
  const { dir, cleanup } = tempDir();
  const config = { ...(opts.config ?? {}), listen: { host: '127.0.0.1', port: 0 } };
  const settings = settingsFromEnv(
    { SPARK_LEDGER_URL: opts.ledgerUrl ?? `file:${join(dir, 'spark.db')}`, ...(opts.env ?? {}) },
    { text: JSON.stringify(config), source: 'test config' },
  );
  const c = await startController({
    settings,
    modules: opts.modules ?? appModules,
    log: silentLogger,
    ...(opts.clock ? { clock: opts.clock } : {}),
    ...(opts.fetch ? { fetch: opts.fetch } : {}),
    noListen: opts.listen === false,
    ...(opts.admissionIntervalMs ? { admissionIntervalMs: opts.admissionIntervalMs } : {}),
  });
  return {
    ...c,
    dir,
    async close() {
      await c.close();
      cleanup();
    },
  };
}
