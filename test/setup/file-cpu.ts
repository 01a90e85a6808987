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
 * processes that way shows less than it cost. The `system` project runs its files one after another
 * in a reused worker (`isolate: false`, docs/adr/0345-system-tests-share-their-workers.md), so
 * `cpuS` counts from the end of the worker's previous file (or the worker's start): the file's
 * module imports and its tests. `handles` is the number of handles (servers, sockets, timers,
 * child processes) still open after the file's last hook: a file that leaves some open leaves them
 * to the files after it. Nothing is written without the variable.
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

/** Where the worker's previous file ended, kept across files: this setup file runs again for each. */
const CPU_MARK = Symbol.for('spark.test.fileCpuMark');
const shared = globalThis as { [CPU_MARK]?: number };

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
    const cpu = cpuSeconds();
    const previous = shared[CPU_MARK] ?? 0;
    shared[CPU_MARK] = cpu;
    // cpuS: since the worker's previous file ended (module transform and import included);
    // testsCpuS: from the file's first hook on, its tests and what they started
    const r = (x: number) => Math.round(x * 100) / 100;
    const handles = (process as unknown as { _getActiveHandles?: () => unknown[] })._getActiveHandles;
    const line = {
      file,
      wallS: r((Date.now() - start) / 1000),
      cpuS: r(cpu - previous),
      testsCpuS: r(cpu - cpuAtStart),
      handles: handles ? handles.call(process).length : -1,
    };
    appendFileSync(log, `${JSON.stringify(line)}\n`);
  });
}
