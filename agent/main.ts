/**
 * `npm run agent -- --config /etc/spark-agent/agent.json`: the relay agent on a Spark host.
 * Outbound only: it polls the controller and opens no port. SIGTERM/SIGINT stop it; a runner it
 * started keeps running and is picked up again by the next start (see docs/agent.md).
 */

import { existsSync, mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { Agent } from './agent.ts';
import { type AgentConfig, AgentConfigError, loadAgentConfig, readAgentToken } from './config.ts';
import { assertPrivate, assertWorkRoot, resolveRunnerAccount } from './host/account.ts';
import { checkSandbox } from './host/sandbox.ts';
import { type AgentLogger, createAgentLogger } from './log.ts';
import type { RunnerAccount } from './runner.ts';

const USAGE = 'usage: spark-agent --config FILE';

function parseArgs(argv: string[]): { config: string } {
  let config: string | null = null;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--config') config = argv[++i] ?? null;
    else if (a.startsWith('--config=')) config = a.slice('--config='.length);
    else if (a === '--help' || a === '-h') {
      console.log(USAGE);
      process.exit(0);
    } else throw new AgentConfigError(`unknown argument "${a}"; ${USAGE}`);
  }
  if (!config) throw new AgentConfigError(`missing --config FILE; ${USAGE}`);
  return { config };
}

/**
 * The trust boundary on the host: the runner user exists and is not the agent,
 * and what the agent keeps (config, token, state) is reachable by the agent's user alone.
 */
function checkHost(cfg: AgentConfig, configPath: string, log: AgentLogger): RunnerAccount | null {
  // everything the agent creates (state file, run dirs, logs) is its own alone
  process.umask(0o077);
  const stateDir = dirname(cfg.stateFile);
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  if (!cfg.runner.user) {
    log.warn(
      "runner.user is null: the job runs as the agent's own user and can read its token (development only)",
    );
    return null;
  }
  const account: RunnerAccount = { ...resolveRunnerAccount(cfg.runner.user), helper: cfg.runner.helper };
  assertPrivate(configPath, 'agent config');
  assertPrivate(cfg.tokenFile, 'agent token file');
  assertPrivate(stateDir, 'state directory', true);
  if (existsSync(cfg.stateFile)) assertPrivate(cfg.stateFile, 'state file');
  assertWorkRoot(cfg.workRoot);
  // the helper agrees on the runner user, the work root and the runner dir (ADR 0155)
  checkSandbox(cfg, account);
  return account;
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const cfg = loadAgentConfig(args.config);
  const log = createAgentLogger(cfg.logLevel, cfg.hostId);
  const account = checkHost(cfg, args.config, log);
  const token = readAgentToken(cfg);
  const agent = new Agent(cfg, token, log, { account });
  const stop = (signal: string) => {
    log.info('stopping', { signal });
    agent.stop();
  };
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));
  await agent.run();
}

main().then(
  () => process.exit(0),
  (e) => {
    if (e instanceof AgentConfigError) {
      console.error(`spark-agent: ${e.message}`);
      process.exit(e.exitCode);
    }
    console.error(`spark-agent failed: ${(e as Error)?.stack ?? e}`);
    process.exit(1);
  },
);
