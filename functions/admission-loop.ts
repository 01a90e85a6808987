import type { Ledger, PassResult } from './ledger/ledger.ts';

export interface AdmissionLoop {
  /** Ask for a pass soon; calls coalesce while one is running. */
  kick(): void;
  /** Run a pass now and wait for it (tests, cron). */
  runNow(): Promise<PassResult | null>;
  /** Resolves when the pass running now (if any) and its follow-ups are done (Workers' waitUntil). */
  settle(): Promise<unknown>;
  stop(): Promise<void>;
}

/**
 * Runs admission passes when something changes (a reservation, a heartbeat, a release) and on a
 * slow timer as a safety net for changes made by another process sharing the ledger or by time
 * alone (expiries, queue timeouts, stale heartbeats).
 */
export function startAdmissionLoop(
  ledger: Ledger,
  opts: {
    /** Safety-net timer; `null` for none (a Worker isolate is driven by its cron trigger instead). */
    intervalMs?: number | null;
    onError?: (e: unknown) => void;
    onPass?: (r: PassResult) => void;
  } = {},
): AdmissionLoop {
  let running: Promise<PassResult | null> | null = null;
  let again = false;
  let stopped = false;

  const pass = async (): Promise<PassResult | null> => {
    try {
      const r = await ledger.admissionPass();
      opts.onPass?.(r);
      return r;
    } catch (e) {
      opts.onError?.(e);
      return null;
    }
  };
  const runNow = (): Promise<PassResult | null> => {
    if (stopped) return Promise.resolve(null);
    if (running) {
      again = true;
      return running;
    }
    running = (async () => {
      let last: PassResult | null;
      do {
        again = false;
        last = await pass();
      } while (again && !stopped);
      running = null;
      return last;
    })();
    return running;
  };
  // A pass that grants notifies again and is followed by one more pass; a pass that changes
  // nothing notifies nothing, so this converges.
  const unsubscribe = ledger.subscribe((topic) => {
    if (topic === 'reservation' || topic.startsWith('host:')) queueMicrotask(kick);
  });
  function kick() {
    if (stopped) return;
    if (running) again = true;
    else void runNow();
  }
  const timer = opts.intervalMs === null ? null : setInterval(kick, opts.intervalMs ?? 2000);
  (timer as { unref?: () => void } | null)?.unref?.();

  return {
    kick,
    runNow,
    settle: async () => running ?? null,
    async stop() {
      stopped = true;
      if (timer) clearInterval(timer);
      unsubscribe();
      await running;
    },
  };
}
