/**
 * `npm run agent -- --config /etc/spark-agent/agent.json`: the relay agent on a Spark host.
 * Outbound only: it polls the controller and opens no port. SIGTERM/SIGINT stop it; a runner it
 * started keeps running and is picked up again by the next start (see docs/agent.md).
 */

import { Agent } from './agent.ts';
import { AgentConfigError, loadAgentConfig, readAgentToken } from './config.ts';
import { createAgentLogger } from './log.ts';

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

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const cfg = loadAgentConfig(args.config);
  const token = readAgentToken(cfg);
  const log = createAgentLogger(cfg.logLevel, cfg.hostId);
  const agent = new Agent(cfg, token, log);
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
