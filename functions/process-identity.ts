/**
 * Who a controller process is, as the outbox's claims name it, and whether the process behind
 * another claim is gone. A claim holds a row for two minutes (functions/github/outbox.ts), so a
 * controller that was killed mid-send would otherwise hold back the rows it had claimed, and
 * every later check-run update of the same reservation, for that long after its restart.
 *
 * On Node the id names the machine and the process (`ctl-<tag>-<random>@<hostname>:<pid>`). Another
 * claim on the same machine whose process no longer exists is gone: `kill(pid, 0)` sends no
 * signal and fails with ESRCH for a pid that does not exist (kill(2),
 * https://man7.org/linux/man-pages/man2/kill.2.html; Node's `process.kill`,
 * https://nodejs.org/api/process.html#processkillpid-signal). EPERM means it exists under
 * another user. A claim from another machine, or from a Worker isolate, is never judged here: it
 * expires with its time. A reused pid makes a gone process look alive, which only falls back to
 * the expiry.
 */
export interface ProcessIdentity {
  /** The claim token this process writes. */
  workerId: string;
  /** Whether this identity can tell a gone process at all (false in a Worker isolate). */
  canTellGone: boolean;
  /** True only for a claim by a process on this machine that no longer exists. */
  isGone(workerId: string): boolean;
}

const randomTag = () =>
  [...crypto.getRandomValues(new Uint8Array(5))].map((b) => b.toString(16).padStart(2, '0')).join('');

/** A Worker isolate (or any runtime without process ids): claims expire with their time. */
export function isolateIdentity(): ProcessIdentity {
  return { workerId: `ctl-${randomTag()}`, canTellGone: false, isGone: () => false };
}

/** Whether a process with this pid exists on this machine (a signal-0 probe). */
export function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Names this process in every id it hands out, so a claim of ours is told from a reused pid's.
 * Drawn on first use, not at import: a Worker isolate refuses random values in global scope
 * (https://developers.cloudflare.com/workers/runtime-apis/handlers/#global-scope), and the Worker
 * bundle imports this module.
 */
let processTagOfThisProcess: string | undefined;
const thisProcessTag = () => {
  processTagOfThisProcess ??= randomTag();
  return processTagOfThisProcess;
};

/**
 * A Node process: `ctl-<process tag>-<random>@<host>:<pid>`, judging claims of its own machine by
 * their pid. A claim with our pid but another process tag was written by an earlier process that
 * had our pid (a container's controller is often pid 1 on every start), so it is gone; one with
 * our tag is another controller in this process, alive.
 */
export function nodeProcessIdentity(
  host: string,
  pid: number,
  exists: (pid: number) => boolean = processExists,
  processTag: string = thisProcessTag(),
): ProcessIdentity {
  return {
    workerId: `ctl-${processTag}-${randomTag()}@${host}:${pid}`,
    canTellGone: true,
    isGone(other) {
      const m = /^ctl-([0-9a-f]+)-[0-9a-f]+@(.+):(\d+)$/.exec(other);
      if (!m || m[2] !== host) return false;
      const otherPid = Number(m[3]);
      if (!Number.isSafeInteger(otherPid) || otherPid <= 0) return false;
      if (otherPid === pid) return m[1] !== processTag;
      return !exists(otherPid);
    },
  };
}
