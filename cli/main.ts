import { Argument, Command, CommanderError } from 'commander';
import pkg from '../package.json' with { type: 'json' };
import { createApiClient } from './client.ts';
import {
  type CommandContext,
  type CommandIo,
  cmdAttach,
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
  cmdReserve,
  cmdStatus,
  cmdToken,
  cmdWhoami,
  type Flags,
} from './commands.ts';
import { cmdDeliveries } from './deliveries.ts';
import { cmdDeckardDrill } from './drill.ts';
import { CliError, EXIT, usageError } from './errors.ts';
import { resolveSettings } from './settings.ts';

export const VERSION = pkg.version;

const FOOTER = `
Configuration: flags, then SPARK_URL / SPARK_TOKEN, then ~/.config/sparkctl/config.json
({"url": "...", "token": "..."}; SPARKCTL_CONFIG or --config picks another file).
The URL is the controller's root (http://127.0.0.1:8787), not its /api path.

Exit codes: 0 ok, 1 failed, 2 usage, 3 controller unreachable, 4 bad token (401),
5 forbidden (403), 6 not found, 7 conflict, 8 timed out, 130 interrupted.
Run sparkctl help COMMAND (or sparkctl COMMAND --help) for a command's own options.`;

const JSON_HELP = 'print the answer as JSON (the shapes in core/protocol/api.ts)';

/** Commander's error text as one sparkctl line: `sparkctl: reserve: unknown option '--pari' (Did you mean --pair?)`. */
function errorLine(text: string, path: string): string {
  const message = text
    .replace(/^error: /, '')
    .trim()
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean)
    .join(' ');
  const hint = path ? `sparkctl ${path} --help lists what it takes` : 'sparkctl --help lists the commands';
  return `sparkctl: ${path ? `${path}: ` : ''}${message} (${hint})`;
}

/** A (sub)command whose errors name it and point at its own help. */
function sub(parent: Command, name: string, description: string): Command {
  const c = parent.command(name).description(description);
  const path = [...pathOf(parent), name].join(' ');
  return c.configureOutput({ outputError: (text, write) => write(`${errorLine(text, path)}\n`) });
}

function pathOf(c: Command): string[] {
  const names: string[] = [];
  for (let x: Command | null = c; x?.parent; x = x.parent) names.unshift(x.name());
  return names;
}

type Action = (ctx: CommandContext) => Promise<number>;

/**
 * The command tree (commander@14): every command declares only its own options and arguments;
 * unknown options (with a suggestion), missing and extra arguments are usage errors (exit 2).
 */
function buildProgram(
  io: CommandIo,
  env: Record<string, string | undefined>,
  done: (code: number) => void,
): Command {
  const program = new Command('sparkctl')
    .description(`sparkctl ${VERSION}: reserve Spark GPU hosts through the controller's queue`)
    .version(VERSION, '-V, --version', 'print the version')
    .option('--url <url>', 'controller root URL (SPARK_URL; default http://127.0.0.1:8787)')
    .option('--token <token>', 'API token (SPARK_TOKEN)')
    .option('--config <file>', 'sparkctl config file (SPARKCTL_CONFIG)')
    .helpOption('-h, --help', 'show help')
    .helpCommand('help [command]', "show a command's help")
    .showSuggestionAfterError(true)
    .configureHelp({ showGlobalOptions: true })
    .exitOverride()
    .configureOutput({
      writeOut: (s) => io.out(s.replace(/\n$/, '')),
      writeErr: (s) => io.err(s.replace(/\n$/, '')),
      outputError: (text, write) => write(`${errorLine(text, '')}\n`),
    })
    .addHelpText('after', FOOTER);

  const withApi = (fn: Action) =>
    async function (this: Command) {
      const g = this.optsWithGlobals() as { url?: string; token?: string; config?: string };
      const settings = resolveSettings({ url: g.url, token: g.token, config: g.config }, env);
      const flags: Flags = { ...(this.opts() as Flags) };
      const args = (this.processedArgs as (string | undefined)[]).filter((a): a is string => a != null);
      done(await fn({ client: createApiClient(settings), settings, io, flags, args }));
    };

  // ------------------------------------------------------------ developers
  sub(program, 'reserve', 'request a development reservation (priority 100)')
    .option('--pair', 'two hosts, atomically')
    .option('--host <id>', 'one named host, e.g. spark-1 (single topology)')
    .option('--ttl <duration>', 'lease length, e.g. 2h, 90m, 1h30m (default: the configured default)')
    .option('--wait', 'follow it until the lease is usable (Ctrl-C while queued cancels it)')
    .option(
      '--timeout <duration>',
      'with --wait: stop waiting after this long (exit 8); the request stays queued',
    )
    .option('--json', JSON_HELP)
    .action(withApi(cmdReserve));
  sub(program, 'attach', "print the command that attaches to a development lease's dstack environment")
    .argument('<id>', 'reservation id, e.g. r-12')
    .option('--json', JSON_HELP)
    .action(withApi(cmdAttach));
  sub(program, 'status', 'one reservation in detail, or your open ones')
    .argument('[id]', 'reservation id, e.g. r-12')
    .option('--all', "everyone's open reservations")
    .option('--json', JSON_HELP)
    .action(withApi(cmdStatus));
  sub(program, 'queue', 'waiting work with positions and why it waits, and active work')
    .option('--json', JSON_HELP)
    .action(withApi(cmdQueue));
  sub(program, 'fleet', 'hosts, their state and Deckard health')
    .option('--json', JSON_HELP)
    .action(withApi(cmdFleet));
  sub(program, 'history', 'the audit history of a reservation')
    .argument('<id>', 'reservation id')
    .option('--json', JSON_HELP)
    .action(withApi(cmdHistory));
  sub(program, 'renew', 'extend a development lease (up to the configured maximum from its grant)')
    .argument('<id>', 'reservation id')
    .option('--ttl <duration>', "new lease length from now, e.g. 4h (default: the reservation's own)")
    .option('--json', JSON_HELP)
    .action(withApi(cmdRenew));
  sub(program, 'release', 'release; waits until the agent confirms termination and cleanup')
    .argument('<id>', 'reservation id')
    .option('--no-wait', 'return once the release is recorded')
    .option('--timeout <duration>', 'stop waiting for the cleanup confirmation after this long (exit 8)')
    .option('--json', JSON_HELP)
    .action(
      withApi((ctx) => {
        // commander's --no-wait is `wait: false`; the command reads the flag by its name
        const { wait, ...rest } = ctx.flags as Flags & { wait?: boolean };
        return cmdRelease({ ...ctx, flags: { ...rest, 'no-wait': wait === false } });
      }),
    );
  sub(program, 'cancel', 'withdraw a queued reservation (granted work: release it)')
    .argument('<id>', 'reservation id')
    .option('--json', JSON_HELP)
    .action(withApi(cmdCancel));
  sub(program, 'whoami', 'the token in use and its scopes')
    .option('--json', JSON_HELP)
    .action(withApi(cmdWhoami));

  // ------------------------------------------------------------ operators
  sub(program, 'host', 'adopt, unadopt or clear the quarantine of a host (operate scope)')
    .addArgument(new Argument('<action>', 'what to do').choices(['adopt', 'unadopt', 'clear-quarantine']))
    .argument('<host>', 'host id, e.g. spark-2')
    .option('--json', JSON_HELP)
    .action(withApi(cmdHost));

  const token = sub(program, 'token', 'API tokens (operate scope; emergency to mint emergency)');
  sub(token, 'create', 'create a token (shown once)')
    .requiredOption('--name <name>', 'a name for the token, e.g. alice-laptop')
    .requiredOption('--scopes <list>', 'comma list of develop, operate, emergency')
    .option('--expires <duration>', 'the token stops working after this long, e.g. 30d, 12h (default: never)')
    .option('--json', JSON_HELP)
    .action(withApi((ctx) => cmdToken({ ...ctx, args: ['create'] })));
  sub(token, 'revoke', 'revoke a token')
    .argument('<id>', 'token id, e.g. tok-1a2b3c4d5e6f')
    .option('--json', JSON_HELP)
    .action(withApi((ctx) => cmdToken({ ...ctx, args: ['revoke', ...ctx.args] })));
  sub(token, 'list', 'list the tokens')
    .option('--json', JSON_HELP)
    .action(withApi((ctx) => cmdToken({ ...ctx, args: ['list'] })));

  const deckard = sub(program, 'deckard', 'the home inference service');
  sub(deckard, 'start', 'explicit Deckard start (priority 90) on its home host')
    .option('--host <id>', 'the home-service host (default: the configured one)')
    .option('--json', JSON_HELP)
    .action(withApi((ctx) => cmdDeckard({ ...ctx, args: ['start'] })));
  sub(
    deckard,
    'drill',
    'restore drill: lend Deckard through a short development lease, release it, wait for its model-ready check',
  )
    .option('--host <id>', 'the home-service host (default: the one host that serves one)')
    .option('--timeout <duration>', 'give up after this long (exit 8; default 30m)')
    .option('--json', 'print the outcome as JSON: {host, service, reservation, restored}')
    .action(withApi(cmdDeckardDrill));

  sub(program, 'recover', 'recover expired or stuck work (refuses a live lease)')
    .argument('<id>', 'reservation id')
    .option('--json', JSON_HELP)
    .action(withApi(cmdRecover));

  const emergency = sub(program, 'emergency', 'break-glass operations (emergency scope)');
  sub(emergency, 'terminate', 'stop active work through its agent, with a recorded reason')
    .argument('<id>', 'reservation id')
    .requiredOption('--reason <text>', 'why (recorded in the history and the alert)')
    .option('--json', JSON_HELP)
    .action(withApi((ctx) => cmdEmergency({ ...ctx, args: ['terminate', ...ctx.args] })));

  const repo = sub(program, 'repo', 'repositories (GitHub integration; needs the GitHub App installed)');
  sub(repo, 'enable', 'enable a repository once every readiness check passes (refuses with each fix)')
    .argument('<repository>', 'OWNER/NAME')
    .option('--pair', 'allow pair (two-host) tests')
    .option(
      '--override <checks>',
      'enable although these checks fail, e.g. hosts,deckard (operator override, recorded in the history)',
    )
    .option('--json', 'print the answer as JSON (the shapes in core/protocol/readiness.ts)')
    .action(withApi(async (ctx) => (await import('./readiness.ts')).cmdRepoEnable(ctx)));

  const deliveries = sub(program, 'deliveries', 'the webhook inbox: waiting, parked and recent deliveries')
    .option('--json', JSON_HELP)
    .action(withApi(cmdDeliveries));
  sub(deliveries, 'retry', 'process a parked delivery again (operate token; audited)')
    .argument('<id>', 'the X-GitHub-Delivery id')
    .option('--json', JSON_HELP)
    .action(withApi((ctx) => cmdDeliveries({ ...ctx, args: ['retry', ...ctx.args] })));

  const doctor = sub(
    program,
    'doctor',
    'provisioning checks of this machine (the in-job doctor, as npm run doctor); doctor github: rollout readiness',
  )
    .option('--model-cache <dir>', 'the managed model cache to check (SPARK_MODEL_CACHE)')
    .option('--imports <list>', 'Python modules that must import, e.g. torch,numpy')
    .option('--soft-imports <list>', 'Python modules whose absence is only a warning')
    .option('--torch <mode>', 'torch check: required or skip')
    .option('--tools <list>', 'commands that must be on PATH (default: ninja,nvcc,c++)')
    .option('--manifest <file>', 'write the provisioning manifest there')
    .option('--source-dir <dir>', 'the checkout to inspect')
    .option('--json', 'print the manifest as JSON')
    .action(async function (this: Command) {
      // the doctor validates its own values (agent/preflight/settings.ts): hand them over as flags
      const argv: string[] = [];
      for (const [key, value] of Object.entries(this.opts() as Record<string, string | boolean>)) {
        const flag = `--${key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
        if (value === true) argv.push(flag);
        else if (typeof value === 'string') argv.push(flag, value);
      }
      const { runDoctorCommand } = await import('./doctor.ts');
      done(await runDoctorCommand(io, argv, env));
    });
  // the controller's rollout readiness, read-only (not this machine's provisioning above)
  sub(doctor, 'github', "the readiness checks enable runs (every enabled repository's, or one's), read-only")
    .argument('[repository]', 'OWNER/NAME (default: every enabled repository)')
    .option('--json', 'print the report as JSON (core/protocol/readiness.ts)')
    .action(async function (this: Command) {
      // commander hands options the parent also declares (--json) to the parent: take it from
      // there, and refuse the parent's own ones, which mean nothing here
      const up = this.parent?.opts() ?? {};
      const foreign = Object.keys(up).filter((k) => k !== 'json' && up[k] !== undefined);
      if (foreign.length)
        throw usageError(
          `doctor github: option '--${foreign[0]!.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}' belongs to sparkctl doctor (this machine's provisioning checks); doctor github takes only [OWNER/NAME] and --json`,
        );
      const { cmdDoctorGithub } = await import('./readiness.ts');
      await withApi((ctx) =>
        cmdDoctorGithub({
          ...ctx,
          flags: { ...ctx.flags, json: ctx.flags.json === true || up.json === true },
        }),
      ).call(this);
    });

  sub(
    program,
    'admin',
    "first-token bootstrap, GitHub App creation and readiness check, run on the controller host in its checkout: hands ARGS to the controller's scripts/admin.ts",
  )
    .usage(
      'token create --name NAME --scopes operate[,emergency] [--expires 30d] [--ledger URL] [--json] | create-app (--org ORG | --user) --public-url URL | check [OWNER/NAME] [--ledger URL] [--json]',
    )
    .argument('[args...]', 'passed to scripts/admin.ts unchanged')
    .allowUnknownOption()
    .action(async function (this: Command) {
      const { runAdmin } = await import('./admin.ts');
      done(await runAdmin(this.args, io, env));
    });

  // ------------------------------------------------------------ agents
  sub(
    program,
    'mcp',
    'serve the MCP tools (reserve, status, queue, fleet, renew, history, release, cancel, deckard_start) on stdio',
  ).action(async function (this: Command) {
    const g = this.optsWithGlobals() as { url?: string; token?: string; config?: string };
    const settings = resolveSettings({ url: g.url, token: g.token, config: g.config }, env);
    const { serveMcp } = await import('./mcp.ts');
    await serveMcp(createApiClient(settings), { pollMs: settings.pollMs, version: VERSION });
    done(EXIT.ok);
  });

  return program;
}

/** Runs one sparkctl invocation; returns the exit code. Never calls process.exit. */
export async function main(
  argv: string[],
  io: CommandIo,
  env: Record<string, string | undefined>,
): Promise<number> {
  let code: number = EXIT.ok;
  try {
    await buildProgram(io, env, (c) => {
      code = c;
    }).parseAsync(argv, { from: 'user' });
    return code;
  } catch (e) {
    if (e instanceof CommanderError) {
      // help and version were printed; everything else is a usage error commander already printed
      // help asked for (`--help`, `help reserve`) and the version exit 0; help shown because
      // something was missing (`sparkctl`, `sparkctl token`) and every parse error are usage errors
      if (e.code === 'commander.helpDisplayed' || e.code === 'commander.version') return EXIT.ok;
      if (e.code === 'commander.help' && e.exitCode === 0) return EXIT.ok;
      return EXIT.usage;
    }
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
