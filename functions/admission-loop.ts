import type { Ledger, PassResult } from './ledger/ledger.ts';

/**
 * Counts the requests this process is answering, so background work (inbox processing,
 * admission passes, module ticks) can yield to them: acknowledging comes first.
 */
export interface RequestGate {
  enter(): void;
  leave(): void;
  readonly inFlight: number;
  /**
   * Resolves once no request is in flight, or after `maxWaitMs` at the latest, so a steady
   * stream of requests delays background work but never starves it.
   */
  whenQuiet(maxWaitMs?: number): Promise<void>;
}

/** Smallest gap between two admission passes kicked by changes (a burst shares one pass). */
export const MIN_PASS_GAP_MS = 50;

/** How long background work defers to requests in flight before it runs anyway. */
export const MAX_DEFER_MS = 1000;

/**
 * Quiet means no request in flight *and* none started or finished for {@link QUIET_MS}: between
 * two requests of a burst the count touches 0 while the next connections still wait to be
 * accepted, and background work started then would delay them.
 */
export const QUIET_MS = 100;

/**
 * A request gate: `createController()` builds one and hands it to the webhook route, the inbox
 * processor, the admission loop and the module tick (docs/adr/0215-controller-owns-its-services.md).
 */
export function createRequestGate(): RequestGate {
  let inFlight = 0;
  let lastActivity = 0;
  return {
    enter() {
      inFlight++;
      lastActivity = performance.now();
    },
    leave() {
      inFlight = Math.max(0, inFlight - 1);
      lastActivity = performance.now();
    },
    get inFlight() {
      return inFlight;
    },
    async whenQuiet(maxWaitMs = MAX_DEFER_MS) {
      const until = performance.now() + maxWaitMs;
      for (;;) {
        const now = performance.now();
        const quietFor = now - lastActivity;
        if ((inFlight === 0 && quietFor >= QUIET_MS) || now >= until) return;
        // re-check once the quiet period could have passed (or at the deadline)
        const wait = inFlight === 0 ? QUIET_MS - quietFor : QUIET_MS;
        await new Promise((r) => setTimeout(r, Math.max(1, Math.min(wait, until - now))));
      }
    },
  };
}

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
    /** The requests kicked passes defer to; a loop of its own when none is given. */
    gate?: RequestGate;
  } = {},
): AdmissionLoop {
  let running: Promise<PassResult | null> | null = null;
  let again = false;
  let stopped = false;

  const gate = opts.gate ?? createRequestGate();
  // a pass kicked by a change runs after the requests in flight are answered (so one pass
  // covers a burst); runNow() callers wait for their pass, so theirs runs at once
  let lastPassAt = -Infinity;
  const deferrable = opts.intervalMs !== null;
  const pass = async (defer: boolean): Promise<PassResult | null> => {
    try {
      // (not in a Worker isolate: a timer there may outlive the request that set it, and the
      // pass with it; there the pass runs at once, inside the request's waitUntil)
      if (defer && deferrable) {
        // debounced: under a burst of changes, kicked passes run at most every MIN_PASS_GAP_MS
        // (each covers every change before it); runNow() callers are not delayed
        const gap = lastPassAt + MIN_PASS_GAP_MS - performance.now();
        if (gap > 0) await new Promise((r) => setTimeout(r, gap));
        await gate.whenQuiet();
      }
      lastPassAt = performance.now();
      const r = await ledger.admissionPass();
      opts.onPass?.(r);
      return r;
    } catch (e) {
      opts.onError?.(e);
      return null;
    }
  };
  let againDeferred = true;
  const start = (defer: boolean): Promise<PassResult | null> => {
    if (stopped) return Promise.resolve(null);
    if (running) {
      again = true;
      againDeferred &&= defer;
      return running;
    }
    running = (async () => {
      let last: PassResult | null;
      let d = defer;
      do {
        again = false;
        againDeferred = true;
        last = await pass(d);
        d = againDeferred;
      } while (again && !stopped);
      running = null;
      return last;
    })();
    return running;
  };
  const runNow = () => start(false);
  // A pass that grants notifies again and is followed by one more pass; a pass that changes
  // nothing notifies nothing, so this converges.
  const unsubscribe = ledger.subscribe((topic) => {
    if (topic === 'reservation' || topic.startsWith('host:')) queueMicrotask(kick);
  });
  function kick() {
    void start(true);
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
