// `npm test` after its pretest: `npm run check` (tsc, Biome, the size and cycle checks) beside `vitest run`, not before it.
// tsc is ~10 s of one core, and the test files spend much of their time waiting on real processes
// (Slurm, agents, the demo's fleet): the cores are idle about half of a run. The check runs at a
// lower priority (nice 10), so it takes those idle cycles instead of slowing the tests (several
// assert what a fleet does within a bound, and the model test is all CPU). Either failing
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
const checkArgv = ['npm', 'run', '--silent', 'check'];
const check =
  process.platform === 'win32'
    ? run(checkArgv[0], checkArgv.slice(1), ['ignore', 'pipe', 'pipe'])
    : run('nice', ['-n', '10', ...checkArgv], ['ignore', 'pipe', 'pipe']);
for (const s of [check.child.stdout, check.child.stderr]) {
  s?.on('data', (b) => {
    checkOutput += b.toString();
  });
}
const checked = check.done.then((code) => {
  if (code !== 0)
    console.error(
      '\nnpm test: `npm run check` (tsc, Biome, sizes, cycles) failed; its output follows the tests\n',
    );
  return code;
});
const tests = run(bin('vitest'), ['run', ...process.argv.slice(2)], 'inherit');

const [checkCode, testCode] = await Promise.all([checked, tests.done]);
console.log(
  `\nnpm run check (tsc, Biome, sizes, cycles): ${checkCode === 0 ? 'passed' : `FAILED (exit ${checkCode})`}`,
);
if (checkOutput.trim()) console.log(checkOutput.trimEnd());
process.exitCode = testCode || checkCode;
