import { appendFileSync, readFileSync } from 'node:fs';
import { afterAll, beforeAll } from 'vitest';

/**
 * With `SPARK_TEST_CPU_LOG=<file>`, appends one JSON line per test file of the `system` project:
 * its wall seconds and the CPU seconds (user + system) of its worker process and of every child
 * process the worker reaped (servers, agents, cargo, sparkctl, …), from /proc/self/stat (proc(5):
 * utime, stime, cutime, cstime). On a shared machine wall time follows the load; CPU time shows
 * what a file costs (docs/performance.md "CPU per file"). A process no one in the worker's tree
 * reaped is not counted: a daemon re-parented to init, or the children of a process killed before
 * them (a process group killed at once, e.g. `npm start`'s node under npm), so a file that ends its
 * processes that way shows less than it cost. Each file runs in a fresh worker process
 * (vitest's default isolation), so the figures are the file's alone; nothing is written without
 * the variable.
 */
const log = process.env.SPARK_TEST_CPU_LOG;

/** CPU seconds of this process and its reaped children (Linux only; 0 elsewhere). */
function cpuSeconds(): number {
  try {
    // the fields after the command name, which may itself hold spaces and parentheses
    const stat = readFileSync('/proc/self/stat', 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime, stime, cutime, cstime are fields 14–17 of proc(5); f[0] is field 3
    const ticks = [11, 12, 13, 14].reduce((s, i) => s + Number(f[i]), 0);
    return ticks / 100; // USER_HZ, 100 on Linux
  } catch {
    return 0;
  }
}

if (log) {
  let file = '';
  let start = 0;
  let cpuAtStart = 0;
  // vitest passes the file's suite second; its first argument must be a destructuring pattern
  // biome-ignore lint/correctness/noEmptyPattern: vitest's fixture syntax (https://vitest.dev/api/#beforeall)
  beforeAll(({}, suite) => {
    file = suite.file?.filepath ?? suite.name;
    start = Date.now();
    cpuAtStart = cpuSeconds();
  });
  afterAll(() => {
    const cpuS = cpuSeconds();
    // cpuS: the worker from its own start (module transform and import included); testsCpuS: from
    // the file's first hook on, its tests and what they started
    const r = (x: number) => Math.round(x * 100) / 100;
    const line = {
      file,
      wallS: r((Date.now() - start) / 1000),
      cpuS: r(cpuS),
      testsCpuS: r(cpuS - cpuAtStart),
    };
    appendFileSync(log, `${JSON.stringify(line)}\n`);
  });
}
