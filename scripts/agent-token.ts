/**
 * First-setup bootstrap for agent tokens, talking to the ledger file directly (same settings as
 * `npm start`: SPARK_CONFIG or ./spark.config.json, SPARK_LEDGER_URL). Once the controller runs,
 * operators use `POST /api/v1/hosts/:id/agent-tokens` instead.
 *
 *   npm run agent-token -- create spark-2      prints the token once (store it in the agent's token file)
 *   npm run agent-token -- list                 token ids, hosts, created/revoked (never the token)
 *   npm run agent-token -- revoke agt-…         revokes one token
 */
import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { ConfigError } from '../core/config.ts';
import { createAgentToken, revokeAgentToken } from '../functions/auth/tokens.ts';
import { ApiError } from '../functions/errors.ts';
import { silentLogger } from '../functions/log.ts';
import { openNodeLedger } from '../functions/node-server.ts';
import { nodeConfigPath, settingsFromEnv } from '../functions/settings.ts';
import { operatorName, scriptEnv } from './settings.ts';

const USAGE = 'usage: npm run agent-token -- create HOST | list | revoke TOKEN_ID';

async function main(argv: string[]): Promise<number> {
  const [cmd, arg] = argv;
  if (!cmd || (cmd !== 'list' && !arg) || !['create', 'list', 'revoke'].includes(cmd)) {
    console.error(USAGE);
    return 2;
  }
  const configPath = nodeConfigPath(scriptEnv(), existsSync);
  if (configPath && !existsSync(resolve(configPath))) {
    console.error(`config file ${configPath} not found (SPARK_CONFIG)`);
    return 2;
  }
  const settings = settingsFromEnv(
    scriptEnv(),
    configPath ? { text: readFileSync(resolve(configPath), 'utf8'), source: configPath } : null,
  );
  const ledger = await openNodeLedger(settings, { log: silentLogger });
  try {
    if (cmd === 'create') {
      const created = await createAgentToken(ledger, arg!, `local:${operatorName()}`);
      console.error(
        `agent token ${created.id} for ${created.hostId} (shown once; only its SHA-256 is kept):`,
      );
      console.log(created.token);
    } else if (cmd === 'revoke') {
      await revokeAgentToken(ledger, arg!, `local:${operatorName()}`);
      console.error(`agent token ${arg} revoked`);
    } else {
      for (const row of await ledger.tokens.listAgentTokens()) {
        const state = row.revokedAt ? `revoked ${new Date(row.revokedAt).toISOString()}` : 'active';
        console.log(`${row.id}\t${row.hostId}\tcreated ${new Date(row.createdAt).toISOString()}\t${state}`);
      }
    }
    return 0;
  } finally {
    ledger.store.close();
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e) => {
    if (e instanceof ConfigError) console.error(e.message);
    else if (e instanceof ApiError) console.error(`agent-token: ${e.message}`);
    else console.error(`agent-token failed: ${(e as Error)?.message ?? e}`);
    process.exit(e instanceof ApiError && e.status === 404 ? 3 : 1);
  },
);
