import type { PollAnswer, PollRequest, PollResponse } from '../../core/protocol/agent.ts';
import type { AppContext } from '../app.ts';
import { generateToken, sha256Hex } from '../auth/tokens.ts';
import type { ComputedState } from '../ledger/ledger.ts';

/**
 * Re-reads the ledger this often while a long-poll waits, so a change written by another process
 * sharing the ledger (which cannot notify this one) is still seen within about a second.
 */
const RECHECK_MS = 1000;

/**
 * Computes the desired state and, when a JIT config waits for this host, hands it over: the
 * response carries the config and a fresh job token, and in the same transaction the config is
 * nulled, the handoff marked consumed and the token's SHA-256 stored on the lease — so it is
 * given exactly once (cross-part contract 3).
 */
async function currentState(
  ctx: AppContext,
  hostId: string,
  ownWrite: (writing: boolean) => void,
): Promise<PollResponse> {
  const { ledger } = ctx;
  const read = await ledger.agents.desiredState(hostId, ledger.clock());
  if (!read.pendingHandoff) return response(ctx, hostId, read);
  // the job token goes out with the config; only its hash is stored (unused if none is handed over)
  const jobToken = generateToken('spk_job');
  const jobTokenHash = await sha256Hex(jobToken);
  // the hand-over's own change notice is not a reason to answer (it answers anyway)
  ownWrite(true);
  const { state: c, secret } = await ledger.agents
    .handOver(hostId, jobTokenHash)
    .finally(() => ownWrite(false));
  // a config is handed over only to a host that should run (`handOver`)
  if (secret == null || c.desired.state !== 'run') return response(ctx, hostId, c);
  // the erased config must not be recoverable from an older `-wal` frame. The
  // truncation is queued (ahead of every later write transaction of this process) but not awaited:
  // the answer carries the config anyway, and waiting added the checkpoint's fsyncs (~10 ms
  // median, 25 ms under load) to every hand-over on the way to the runner's start
  void ledger.checkpointWal().catch((e) => ctx.log.warn('WAL checkpoint failed', { error: String(e) }));
  // a CI task's hand-over is its clone token; a runner's, its JIT config
  const out = response(ctx, hostId, {
    ...c,
    desired: c.desired.task
      ? { ...c.desired, cloneToken: secret, jobToken }
      : { ...c.desired, jitConfig: secret, jobToken },
  });
  return out;
}

function response(ctx: AppContext, hostId: string, c: ComputedState): PollResponse {
  return {
    hostId,
    version: c.version,
    heartbeatIntervalS: ctx.ledger.config.timings.heartbeatIntervalS,
    desired: c.desired,
  };
}

/**
 * Answers a poll. On Node the request is held (up to `settings.agentLongPollS`) while the desired
 * state still has the version the agent already knows, and answered as soon as it changes; on
 * Workers it is answered at once (no long-lived requests there). The answer says why it came when
 * it did (`answered`).
 *
 * The change listener is registered before the first read: a change committed between a read and
 * a later subscription would otherwise be seen only by the next re-read, up to {@link RECHECK_MS}
 * later (measured as the 1 s tail of the agent bench's freed → next runner started).
 */
export async function handlePoll(
  ctx: AppContext,
  hostId: string,
  req: PollRequest,
  signal?: AbortSignal,
): Promise<PollResponse> {
  const cap = ctx.runtime === 'node' ? ctx.settings.agentLongPollS * 1000 : 0;
  const deadline = Date.now() + Math.min(req.maxWaitMs ?? cap, cap);
  let noticed = false;
  let writing = false;
  let wake: (() => void) | null = null;
  const unsubscribe = ctx.ledger.subscribe((topic) => {
    if (writing || (topic !== `host:${hostId}` && topic !== 'reservation')) return;
    noticed = true;
    wake?.();
  });
  const onAbort = () => wake?.();
  signal?.addEventListener('abort', onAbort);
  try {
    let why: PollAnswer = 'changed';
    let held = false;
    for (;;) {
      noticed = false;
      const res = await currentState(ctx, hostId, (w) => {
        writing = w;
      });
      // a notice during the read means the change came while the poll was open
      if (!req.since || res.version !== req.since) return { ...res, answered: noticed ? 'notice' : why };
      const left = deadline - Date.now();
      if (left <= 0 || signal?.aborted) return { ...res, answered: held ? 'timeout' : 'no-hold' };
      held = true;
      if (noticed) {
        // a notice arrived while reading: read again at once
        why = 'notice';
        continue;
      }
      why = await new Promise<PollAnswer>((resolve) => {
        const timer = setTimeout(
          () => {
            wake = null;
            resolve('recheck');
          },
          Math.min(left, RECHECK_MS),
        );
        wake = () => {
          clearTimeout(timer);
          wake = null;
          resolve('notice');
        };
      });
    }
  } finally {
    wake = null;
    unsubscribe();
    signal?.removeEventListener('abort', onAbort);
  }
}
