/**
 * Preloaded (`node --expose-gc --import scripts/sim/harness/gc-on-signal.mjs functions/node.ts`) into a
 * controller process whose memory a test or bench measures: on SIGUSR2 it collects the garbage —
 * a full GC, then another once the first one's finalizers ran (native handles such as closed
 * sockets are freed by callbacks of the first) — and prints `gc-on-signal: done …` with how V8
 * and Node account the memory left. What the process still holds after that is memory it
 * references (or its allocator kept), not garbage an idle V8 had no reason to collect yet (an
 * idle process runs no GC). Only the measuring harness sends the signal, to a pid it started
 * (docs/adr/0076-test-harness-signals-only-its-own-processes.md).
 */
process.on('SIGUSR2', () => {
  if (typeof globalThis.gc !== 'function') {
    process.stderr.write('gc-on-signal: start node with --expose-gc\n');
    return;
  }
  globalThis.gc();
  setTimeout(() => {
    globalThis.gc();
    setTimeout(() => {
      const m = process.memoryUsage();
      const mib = (n) => (n / 1048576).toFixed(1);
      process.stderr.write(
        `gc-on-signal: done rss=${mib(m.rss)} heapTotal=${mib(m.heapTotal)} heapUsed=${mib(m.heapUsed)} external=${mib(m.external)} arrayBuffers=${mib(m.arrayBuffers)}\n`,
      );
    }, 200);
  }, 200);
});
