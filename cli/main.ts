import { parseArgs } from 'node:util';
import pkg from '../package.json' with { type: 'json' };
import { createApiClient } from './client.ts';
import {
  type CommandContext,
  type CommandIo,
  cmdCancel,
  cmdDeckard,
  cmdEmergency,
  cmdFleet,
  cmdHistory,
  cmdHost,
  cmdQueue,
  cmdRecover,
  cmdRelease,
  cmdRenew,
  cmdRepo,
  cmdReserve,
  cmdStatus,
  cmdToken,
  cmdWhoami,
  type Flags,
} from './commands.ts';
import { CliError, EXIT, usageError } from './errors.ts';
import { resolveSettings } from './settings.ts';

export const VERSION = pkg.version;

export const HELP = `sparkctl ${VERSION} — reserve Spark GPU hosts through the controller's queue

usage: sparkctl COMMAND [ARGS] [--url URL] [--token TOKEN] [--config FILE] [--json]

developers
  reserve [--pair] [--host spark-1] [--ttl 4h] [--wait] [--timeout 30m]
                         request a development reservation (priority 100); --wait follows it
                         until the lease is usable (Ctrl-C while queued cancels it)
  status [ID] [--all]    one reservation, or your open ones (--all: everyone's)
  queue                  waiting work with positions and why it waits, and active work
  fleet                  hosts, their state and Deckard health
  history ID             the audit history of a reservation
  renew ID [--ttl 4h]    extend a development lease (up to the configured maximum)
  release ID [--no-wait] release; waits until the agent confirms cleanup
  cancel ID              withdraw a queued reservation (granted work: release it)
  whoami                 the token in use and its scopes
operators
  host adopt|unadopt|clear-quarantine HOST
  token create --name NAME --scopes develop[,operate,emergency] | token revoke ID | token list
  deckard start [--host spark-1]        explicit Deckard start (priority 90)
  recover ID                            recover expired or stuck work (refuses a live lease)
  emergency terminate ID --reason TEXT  break-glass stop (needs the emergency scope)
  repo enable OWNER/NAME [--pair]       enable a repository (GitHub integration)
  doctor [--model-cache DIR] [--imports torch,...] [--json]
                                        provisioning checks of this machine (in-job doctor)
  admin token create --name NAME --scopes operate[,emergency] [--ledger file:./data/spark.db]
                                        first token, written straight into the ledger file
agents
  mcp                    serve the MCP tools reserve, status, queue, release, cancel on stdio

configuration: flags, then SPARK_URL / SPARK_TOKEN, then ~/.config/sparkctl/config.json
({"url": "...", "token": "..."}; SPARKCTL_CONFIG or --config picks another file).
exit codes: 0 ok, 1 failed, 2 usage, 3 controller unreachable, 4 bad token (401),
5 forbidden (403), 6 not found, 7 conflict, 8 timed out, 130 interrupted.`;

const OPTIONS = {
  url: { type: 'string' },
  token: { type: 'string' },
  config: { type: 'string' },
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
  version: { type: 'boolean', short: 'V' },
  pair: { type: 'boolean' },
  host: { type: 'string' },
  ttl: { type: 'string' },
  wait: { type: 'boolean' },
  'no-wait': { type: 'boolean' },
  timeout: { type: 'string' },
  all: { type: 'boolean' },
  name: { type: 'string' },
  scopes: { type: 'string' },
  reason: { type: 'string' },
  ledger: { type: 'string' },
} as const;

type Command = (c: CommandContext) => Promise<number>;
const COMMANDS: Record<string, Command> = {
  reserve: cmdReserve,
  status: cmdStatus,
  queue: cmdQueue,
  fleet: cmdFleet,
  history: cmdHistory,
  renew: cmdRenew,
  release: cmdRelease,
  cancel: cmdCancel,
  host: cmdHost,
  token: cmdToken,
  deckard: cmdDeckard,
  recover: cmdRecover,
  emergency: cmdEmergency,
  repo: cmdRepo,
  whoami: cmdWhoami,
};

/** Runs one sparkctl invocation; returns the exit code. Never calls process.exit. */
export async function main(
  argv: string[],
  io: CommandIo,
  env: Record<string, string | undefined>,
): Promise<number> {
  try {
    if (argv[0] === 'doctor') {
      // the doctor has its own options (agent/preflight/settings.ts); hand them over untouched
      const { runDoctorCommand } = await import('./doctor.ts');
      return await runDoctorCommand(io, argv.slice(1), env);
    }
    let parsed: ReturnType<
      typeof parseArgs<{ options: typeof OPTIONS; allowPositionals: true; strict: true }>
    >;
    try {
      parsed = parseArgs({ args: argv, options: OPTIONS, allowPositionals: true, strict: true });
    } catch (e) {
      throw usageError(`${(e as Error).message} (sparkctl --help lists the options)`);
    }
    const { values, positionals } = parsed;
    const [command, ...args] = positionals;
    if (values.version) {
      io.out(VERSION);
      return EXIT.ok;
    }
    if (values.help || !command || command === 'help') {
      io.out(HELP);
      return command || values.help ? EXIT.ok : EXIT.usage;
    }
    const settings = resolveSettings({ url: values.url, token: values.token, config: values.config }, env);
    const flags: Flags = values;

    if (command === 'admin') {
      // the controller's own bootstrap script, as a child process, with the arguments untouched
      const { runAdmin } = await import('./admin.ts');
      return await runAdmin(argv.slice(argv.indexOf('admin') + 1), io, env);
    }
    const client = createApiClient(settings);
    if (command === 'mcp') {
      const { serveMcp } = await import('./mcp.ts');
      await serveMcp(client, { pollMs: settings.pollMs, version: VERSION });
      return EXIT.ok;
    }
    const run = COMMANDS[command];
    if (!run) throw usageError(`unknown command '${command}' (sparkctl --help lists the commands)`);
    return await run({ client, settings, io, flags, args });
  } catch (e) {
    if (e instanceof CliError) {
      io.err(`sparkctl: ${e.message}`);
      return e.exitCode;
    }
    io.err(`sparkctl: internal error: ${(e as Error)?.stack ?? e}`);
    return EXIT.failed;
  }
}

/** Runs sparkctl as this process: real stdout/stderr, SIGINT, exit code. */
export async function runProcess(): Promise<void> {
  const handlers = new Set<() => void>();
  process.on('SIGINT', () => {
    if (handlers.size === 0) process.exit(EXIT.interrupted);
    for (const h of handlers) h();
  });
  const io: CommandIo = {
    out: (t) => process.stdout.write(`${t}\n`),
    err: (t) => process.stderr.write(`${t}\n`),
    onInterrupt(fn) {
      handlers.add(fn);
      return () => handlers.delete(fn);
    },
  };
  const code = await main(process.argv.slice(2), io, process.env);
  // let stdout drain before exiting (piped output is asynchronous)
  process.stdout.write('', () => process.exit(code));
}
