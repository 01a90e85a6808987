#!/usr/bin/env -S npx tsx
/**
 * `npm start`: the controller on Node with the embedded libSQL ledger (./data/spark.db).
 * Reads SPARK_CONFIG (default ./spark.config.json when present) and SPARK_* variables, from the
 * environment and the secrets file (SPARK_SECRETS_FILE, default ./spark.secrets.env when present),
 * through the settings modules (functions/settings.ts, functions/secrets-file.ts): this entry hands
 * them `process.env` and reads no variable itself.
 */
import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { ConfigError, redactUrl } from '../core/config.ts';
import { createLogger } from './log.ts';
import { startController } from './node-server.ts';
import { withSecretsFile } from './secrets-file.ts';
import { EnvSchema, nodeConfigPath, settingsFromEnv } from './settings.ts';

async function main() {
  // every file the controller creates (ledger, -wal, -shm) is its user's alone
  process.umask(0o077);
  const configPath = nodeConfigPath(process.env, existsSync);
  let configText: { text: string; source: string } | null = null;
  if (configPath) {
    const abs = resolve(configPath);
    if (!existsSync(abs)) throw new ConfigError(configPath, [`file not found (SPARK_CONFIG=${configPath})`]);
    configText = { text: readFileSync(abs, 'utf8'), source: configPath };
  }
  // the secrets file (create-app writes it) under the environment: docs/github-app.md
  const secrets = withSecretsFile(process.env, Object.keys(EnvSchema.shape));
  const settings = settingsFromEnv(secrets.env, configText);
  const log = createLogger(settings.logLevel);
  const c = await startController({
    settings,
    log,
    tickMs: settings.tickMs,
    admissionIntervalMs: settings.admissionIntervalMs,
  });
  log.info('controller listening', {
    url: c.url,
    ledger: redactUrl(settings.ledgerUrl),
    config: configPath ?? 'built-in defaults',
    secretsFile: secrets.source,
  });
  console.log(`Spark controller listening on ${c.url} (dashboard ${c.url}/, health ${c.url}/healthz)`);
  const shutdown = async (signal: string) => {
    log.info('shutting down', { signal });
    await c.close();
    process.exit(0);
  };
  process.once('SIGINT', () => void shutdown('SIGINT'));
  process.once('SIGTERM', () => void shutdown('SIGTERM'));
}

main().catch((e) => {
  if (e instanceof ConfigError) {
    console.error(e.message);
    process.exit(2);
  }
  if ((e as NodeJS.ErrnoException)?.code === 'EADDRINUSE') {
    // a second `npm start` on the same machine: say which knob moves it
    console.error(
      `spark controller failed to start: ${(e as Error).message}. Another process (maybe another controller) ` +
        'listens on that port: stop it, or choose a port with SPARK_PORT=8788 npm start.',
    );
    process.exit(1);
  }
  console.error(`spark controller failed to start: ${(e as Error)?.message ?? e}`);
  process.exit(1);
});
