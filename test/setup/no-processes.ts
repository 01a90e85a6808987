import childProcess from 'node:child_process';
import { syncBuiltinESMExports } from 'node:module';
import net from 'node:net';

/**
 * Setup file of the `unit` and `model` projects (`npm run test:fast`, vitest.config.ts): what they
 * hold is pure — no child process, no listening server — so the fast loop stays fast and its
 * tests cannot wait on the machine's scheduler. This makes it a rule rather than a habit: starting
 * a process or a server fails the test with where the file belongs instead.
 *
 * `syncBuiltinESMExports` carries the replaced functions into the ESM named exports
 * (`import { spawn } from 'node:child_process'`), which are otherwise bound at load:
 * https://nodejs.org/docs/latest-v20.x/api/module.html#modulesyncbuiltinesmexports
 */
const where =
  'test/unit and test/model (npm run test:fast) start no child process and no server: this test belongs in test/integration';

const refuse = (what: string) =>
  function refused(): never {
    throw new Error(`${what}: ${where}`);
  };

for (const name of ['spawn', 'spawnSync', 'exec', 'execSync', 'execFile', 'execFileSync', 'fork'] as const) {
  (childProcess as unknown as Record<string, unknown>)[name] = refuse(`child_process.${name}`);
}
net.Server.prototype.listen = refuse('net.Server.listen') as typeof net.Server.prototype.listen;
syncBuiltinESMExports();
