import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { CliError, EXIT } from './errors.ts';

/**
 * `sparkctl admin …`: the bootstrap of the very first operate token belongs to the controller
 * (it opens the ledger file directly), so sparkctl only runs the controller's own script,
 * `scripts/admin.ts`, as a child process. The CLI imports nothing from the
 * controller; this is the one place it hands over to it, and only inside a checkout.
 */

/** The script sparkctl hands `admin …` to, relative to the repository root. */
export const ADMIN_SCRIPT = join('scripts', 'admin.ts');

const HINT =
  'run this on the controller host from the repository: npm run admin -- token create --name NAME --scopes operate[,emergency]';

/**
 * The controller checkout this CLI file lives in: the nearest folder above `from` holding this
 * project's package.json and the admin script. The bundled CLI copied to a laptop has none.
 */
export function findRepoRoot(from: string = dirname(fileURLToPath(import.meta.url))): string | null {
  for (let dir = from; ; dir = dirname(dir)) {
    const pkg = join(dir, 'package.json');
    if (existsSync(pkg) && existsSync(join(dir, ADMIN_SCRIPT))) {
      try {
        if ((JSON.parse(readFileSync(pkg, 'utf8')) as { name?: string }).name === 'spark-controller')
          return dir;
      } catch {
        // not our package.json: keep looking upwards
      }
    }
    if (dirname(dir) === dir) return null;
  }
}

export interface AdminIo {
  out(text: string): void;
  err(text: string): void;
}

/**
 * Runs `node --import tsx <root>/scripts/admin.ts ARGS…` in the caller's working directory (so a
 * relative `--ledger file:./data/spark.db` or ./spark.config.json means what it meant before),
 * relays its output line by line as it arrives and returns its exit code.
 */
export async function runAdmin(
  args: readonly string[],
  io: AdminIo,
  env: Record<string, string | undefined>,
  root: string | null = findRepoRoot(),
): Promise<number> {
  if (!root) {
    throw new CliError(
      EXIT.usage,
      `admin needs the controller's checkout (${ADMIN_SCRIPT} not found): ${HINT}`,
    );
  }
  let tsx: string;
  try {
    // tsx from the checkout, not from wherever the user stands
    tsx = pathToFileURL(createRequire(join(root, 'package.json')).resolve('tsx')).href;
  } catch {
    throw new CliError(
      EXIT.usage,
      `admin needs the checkout's dependencies (tsx not found under ${root}): run npm ci there`,
    );
  }
  const child = spawn(process.execPath, ['--import', tsx, join(root, ADMIN_SCRIPT), ...args], {
    env: env as NodeJS.ProcessEnv,
    stdio: ['inherit', 'pipe', 'pipe'],
  });
  // relayed line by line as it comes: `create-app` prints the page to open, then waits for it
  const relay = (stream: NodeJS.ReadableStream, to: (text: string) => void) => {
    let rest = '';
    stream.on('data', (b: Buffer) => {
      const lines = (rest + b.toString('utf8')).split('\n');
      rest = lines.pop() ?? '';
      for (const line of lines) to(line);
    });
    return () => {
      if (rest) to(rest);
    };
  };
  const flushOut = relay(child.stdout, (t) => io.out(t));
  const flushErr = relay(child.stderr, (t) => io.err(t));
  const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (c, s) => resolve([c, s]));
  });
  flushOut();
  flushErr();
  if (code == null) throw new CliError(EXIT.failed, `${ADMIN_SCRIPT} was killed by ${signal}`);
  return code;
}
