#!/usr/bin/env -S npx tsx
/**
 * `npm run deploy`: applies the ledger migrations to the remote libSQL database, then deploys
 * the Worker with `wrangler deploy` (extra arguments are passed to wrangler, e.g.
 * `npm run deploy -- --dry-run`). Migrations run first and are idempotent, so a redeploy while
 * leases are active loses nothing: the ledger is authoritative, and the outbox and sweeps resume
 * on the next cron tick.
 *
 * Reads SPARK_LEDGER_URL and SPARK_LEDGER_AUTH_TOKEN (from the environment scripts/settings.ts hands it).
 * `--migrate-only` stops after the migrations (also accepts a local file: ledger, for rehearsals).
 */
import { spawnSync } from 'node:child_process';
import { EXIT, ExitError } from '../core/errors.ts';
import { migrateLedgerAt } from '../functions/ledger/deploy-migrations.ts';
import { scriptEnv } from './settings.ts';

/** A deployment the operator can fix (missing or bad settings): one line, exit code 2. */
class DeployError extends ExitError {
  constructor(message: string) {
    super(EXIT.usage, message);
  }
}

function readTarget(
  env: Readonly<Record<string, string | undefined>>,
  migrateOnly: boolean,
): { url: string; authToken: string | undefined } {
  const url = env.SPARK_LEDGER_URL?.trim();
  const authToken = env.SPARK_LEDGER_AUTH_TOKEN?.trim() || undefined;
  if (!url) {
    throw new DeployError(
      'SPARK_LEDGER_URL is not set: export the remote libSQL URL the Worker uses (libsql://<db>.turso.io or https://…), and SPARK_LEDGER_AUTH_TOKEN',
    );
  }
  if (!/^(libsql:|https?:|wss?:|file:)/.test(url)) {
    throw new DeployError(
      `Invalid SPARK_LEDGER_URL '${url.replace(/\/\/[^@/]*@/, '//')}': expected libsql:, https:, or wss:`,
    );
  }
  if (url.startsWith('file:') && !migrateOnly) {
    throw new DeployError(
      `SPARK_LEDGER_URL is a local file (${url}); a Worker can only reach a remote libSQL database. Use --migrate-only to rehearse migrations on a file.`,
    );
  }
  const local = url.startsWith('file:') || /^[a-z]+:\/\/(127\.0\.0\.1|localhost)(:|\/|$)/.test(url);
  if (!authToken && !local) {
    throw new DeployError(
      'SPARK_LEDGER_AUTH_TOKEN is not set: create one for the ledger database (e.g. `turso db tokens create <db>`) and export it',
    );
  }
  return { url, authToken };
}

async function main(argv: string[]): Promise<number> {
  const migrateOnly = argv.includes('--migrate-only');
  const wranglerArgs = argv.filter((a) => a !== '--migrate-only');
  const target = readTarget(scriptEnv(), migrateOnly);
  let applied: string[];
  try {
    applied = await migrateLedgerAt(target);
  } catch (e) {
    throw new DeployError(
      `could not migrate the ledger at ${target.url.replace(/\/\/[^@/]*@/, '//')}: ${(e as Error).message}`,
    );
  }
  console.log(
    applied.length ? `ledger migrations applied: ${applied.join(', ')}` : 'ledger schema is up to date',
  );
  if (migrateOnly) return 0;
  const r = spawnSync(
    process.execPath,
    ['node_modules/wrangler/bin/wrangler.js', 'deploy', ...wranglerArgs],
    {
      stdio: 'inherit',
    },
  );
  if (r.status !== 0)
    console.error(
      'wrangler deploy failed; the ledger is already migrated, re-run `npm run deploy` after fixing it',
    );
  return r.status ?? 1;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e) => {
    console.error(e instanceof DeployError ? `deploy: ${e.message}` : e);
    process.exit(e instanceof DeployError ? e.exitCode : 1);
  },
);
