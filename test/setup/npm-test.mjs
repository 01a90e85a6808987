// `npm test` after its pretest: `npm run check` (tsc and Biome) beside `vitest run`, not before it.
// tsc is ~10 s of one core, and the first test files vitest starts (the slowest, longest-first)
// spend much of their time waiting on real processes (Slurm, agents, the demo's fleet), so the
// check fits beside them on 2 cores instead of adding its whole time to the run. Either failing
// fails `npm test`; the check's output is held back and printed after the tests' (it would
// otherwise land in the middle of vitest's), and a failure is announced as soon as it happens.
// Plain .mjs: it runs before anything could load TypeScript. Arguments go to vitest.
import { spawn } from 'node:child_process';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..', '..');
const bin = (name) => join(root, 'node_modules', '.bin', name);

/** Runs `cmd`; resolves with its exit code (1 when a signal ended it). */
function run(cmd, args, stdio) {
  const child = spawn(cmd, args, { cwd: root, stdio });
  const done = new Promise((resolve) => {
    child.once('error', (e) => {
      console.error(`npm test: could not start ${cmd}: ${e.message}`);
      resolve(1);
    });
    child.once('close', (code) => resolve(code ?? 1));
  });
  return { child, done };
}

let checkOutput = '';
const check = run('npm', ['run', '--silent', 'check'], ['ignore', 'pipe', 'pipe']);
for (const s of [check.child.stdout, check.child.stderr]) {
  s?.on('data', (b) => {
    checkOutput += b.toString();
  });
}
const checked = check.done.then((code) => {
  if (code !== 0)
    console.error('\nnpm test: `npm run check` (tsc, Biome) failed; its output follows the tests\n');
  return code;
});
const tests = run(bin('vitest'), ['run', ...process.argv.slice(2)], 'inherit');

const [checkCode, testCode] = await Promise.all([checked, tests.done]);
console.log(`\nnpm run check (tsc, Biome): ${checkCode === 0 ? 'passed' : `FAILED (exit ${checkCode})`}`);
if (checkOutput.trim()) console.log(checkOutput.trimEnd());
process.exitCode = testCode || checkCode;
