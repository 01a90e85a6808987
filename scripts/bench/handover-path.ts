/**
 * The agent bench's reading of one handover (host freed → next runner started) through the real
 * GitHub path: which GitHub calls the handover waited on, how much of its time was GitHub's
 * modelled time, and where the rest went (docs/adr/0182-handover-figures.md). Pure: the bench
 * hands in the ledger's timestamps and the fake GitHub's request log. Not a bench part itself
 * (it exports no `run`).
 */

/** A request as the fake GitHub logged it (scripts/sim/fake-github/server.ts `RecordedRequest`). */
export interface LoggedRequest {
  method: string;
  path: string;
  body: unknown;
  status: number;
  /** When it arrived (ms since the epoch). */
  at: number;
  /** GitHub's modelled time to answer it (ms). */
  latencyMs: number;
  /** When the fake wrote its answer: after the modelled latency and its own checks of the call. */
  answeredAt: number;
}

/** One handover's timestamps (ms since the epoch, all on this machine's clock). */
export interface HandoverTimes {
  reservationId: string;
  pr: number;
  /** The JIT runner's name (`spark-<host>-<reservation>-a<attempt>`). */
  runnerName: string;
  /** The previous lease's `lease.released`. */
  freed: number;
  /** The grant: the reservation's `reservation.allocated`. */
  granted: number;
  /** The agent reported the host prepared (`lease.prepared`). */
  prepared: number;
  /** GitHub's JIT config recorded (`reservation.runner_registered`). */
  registered: number;
  /** The config handed to the agent (`lease.runner_handoff`). */
  handoff: number;
  /** The runner process started (the fake runner's own start time). */
  started: number;
  /** From the agent's log, when found: its host preflight before the start (ADR 0160), and its spawn. */
  agent?: { preflightEnd: number; preflightMs: number; spawned: number };
}

export interface HandoverReading {
  totalMs: number;
  /** GitHub's modelled time on the critical path (0 when the agent's preparation was longer). */
  githubMs: number;
  /** Total minus GitHub's modelled time on the path. */
  controllerMs: number;
  /** Whether GitHub's calls, not the host's preparation, were the longer branch after the grant. */
  githubOnPath: boolean;
  /** The calls the handover waited on (on the path or not), in order. */
  calls: LoggedRequest[];
  /** Where the time went (ms); the parts of the longer branch add up to the total. */
  stages: Record<string, number>;
  /** The agent's part: the config handed over → the runner process started. */
  agentStartMs: number;
  /**
   * The agent's whole part on the critical path: its start of the runner, and, when the host's
   * preparation was the longer branch, the preparation (grant → `lease.prepared`: the long poll
   * woken by the grant, the host checks, the lease's namespace built, the report).
   */
  agentMs: number;
  /** The controller process's part: the total less GitHub's modelled time and the agent's part. */
  controllerProcessMs: number;
  /** The GitHub branch after the grant, on the path or not: grant → the JIT config recorded. */
  githubBranchMs: number;
  /** The host's branch after the grant, on the path or not: grant → `lease.prepared`. */
  prepareBranchMs: number;
}

/** Total length of the union of intervals (overlapping calls count once). */
export function unionMs(intervals: Array<[number, number]>): number {
  const xs = [...intervals].filter(([a, b]) => b > a).sort((p, q) => p[0] - q[0]);
  let total = 0;
  let end = Number.NEGATIVE_INFINITY;
  let start = 0;
  for (const [a, b] of xs) {
    if (a > end) {
      if (end > Number.NEGATIVE_INFINITY) total += end - start;
      start = a;
      end = b;
    } else end = Math.max(end, b);
  }
  if (end > Number.NEGATIVE_INFINITY) total += end - start;
  return total;
}

const inputsOf = (body: unknown) =>
  ((body as { inputs?: Record<string, unknown> } | null)?.inputs ?? {}) as Record<string, unknown>;

/**
 * The GitHub calls a handover waits on between its grant and its JIT config (functions/github/
 * senders.ts): the dispatch's re-check of the PR, its read of the workflow file and the dispatch
 * itself (whose answer identifies the run), the JIT registration, and an installation token if one
 * was minted on the way. Webhooks are on no part of it: the run is identified by the dispatch's
 * answer (ADR 0131).
 */
export function handoverCalls(h: HandoverTimes, log: readonly LoggedRequest[]): LoggedRequest[] {
  const dispatch = log.find(
    (r) =>
      r.method === 'POST' &&
      r.path.endsWith('/dispatches') &&
      inputsOf(r.body).reservation_id === h.reservationId,
  );
  const registration = log.filter(
    (r) =>
      r.method === 'POST' &&
      r.path.endsWith('/generate-jitconfig') &&
      (r.body as { name?: string } | null)?.name === h.runnerName,
  );
  if (!dispatch || !registration.length)
    throw new Error(`${h.reservationId}: no dispatch or JIT registration in GitHub's request log`);
  const last = registration.at(-1)!;
  const within = (r: LoggedRequest, from: number, to: number) => r.at >= from && r.at <= to;
  const before = log.filter(
    (r) =>
      within(r, h.granted, dispatch.at) &&
      r.method === 'GET' &&
      r.path.startsWith(`/repos/`) &&
      (r.path.split('?')[0]!.endsWith(`/pulls/${h.pr}`) || r.path.includes('/contents/.github/workflows/')),
  );
  const tokens = log.filter(
    (r) =>
      within(r, h.granted, last.at) &&
      r.method === 'POST' &&
      /^\/app\/installations\/\d+\/access_tokens/.test(r.path),
  );
  return [...before, dispatch, ...registration, ...tokens].sort((a, b) => a.at - b.at);
}

/** From the dispatch's answer to the (last) registration call: the controller's work between them. */
function registrationGap(calls: LoggedRequest[]): number {
  const d = calls.find((c) => c.path.endsWith('/dispatches'));
  const j = calls.filter((c) => c.path.endsWith('/generate-jitconfig')).at(-1);
  return d && j ? j.at - d.answeredAt : Number.NaN;
}

/** Reads one handover: its total, GitHub's modelled share on the critical path, and its stages. */
export function readHandover(h: HandoverTimes, log: readonly LoggedRequest[]): HandoverReading {
  const calls = handoverCalls(h, log);
  const totalMs = h.started - h.freed;
  // after the grant two branches run side by side, the agent preparing the host and the GitHub
  // calls; the handover waits for the later of the two
  const githubOnPath = h.registered > h.prepared;
  const spans = calls.map((c): [number, number] => [
    Math.max(c.at, h.freed),
    Math.min(c.at + c.latencyMs, h.started),
  ]);
  const githubMs = githubOnPath ? unionMs(spans) : 0;
  const first = calls[0]!;
  const chainEnd = Math.max(...calls.map((c) => c.answeredAt));
  // the fake's own work on each call (its checks against GitHub's description): neither GitHub's
  // modelled time nor the controller's, but in this process, so it counts in the controller share
  const fakeGitHub = calls.reduce((sum, c) => sum + Math.max(0, c.answeredAt - c.at - c.latencyMs), 0);
  // the agent's part after the hand-over: the answer reaching its step, its host preflight
  // (ADR 0160), then the run's start: a state save, the spawn through the lease sandbox helper
  // (ADR 0155) and a state save, until it logs "runner started" — the runner process itself may
  // start before that last save ends (then the last part is negative)
  const spawn: Record<string, number> = h.agent
    ? {
        agentToPreflight: h.agent.preflightEnd - h.agent.preflightMs - h.handoff,
        hostPreflight: h.agent.preflightMs,
        preflightToSpawnLogged: h.agent.spawned - h.agent.preflightEnd,
        spawnLoggedToRunner: h.started - h.agent.spawned,
      }
    : { spawn: h.started - h.handoff };
  const stages: Record<string, number> = githubOnPath
    ? {
        grant: h.granted - h.freed,
        outboxWake: first.at - h.granted,
        githubCalls: githubMs,
        fakeGitHubChecks: fakeGitHub,
        betweenCalls: chainEnd - first.at - githubMs - fakeGitHub,
        // of which: the dispatch recorded, the registration's reads and its token bucket
        dispatchToRegistration: registrationGap(calls),
        recordRegistration: h.registered - chainEnd,
        pollToHandoff: h.handoff - h.registered,
        ...spawn,
      }
    : {
        grant: h.granted - h.freed,
        prepare: h.prepared - h.granted,
        pollToHandoff: h.handoff - h.prepared,
        ...spawn,
      };
  const agentStartMs = h.started - h.handoff;
  const agentMs = agentStartMs + (githubOnPath ? 0 : h.prepared - h.granted);
  return {
    totalMs,
    githubMs,
    controllerMs: totalMs - githubMs,
    githubOnPath,
    calls,
    stages,
    agentStartMs,
    agentMs,
    controllerProcessMs: totalMs - githubMs - agentMs,
    githubBranchMs: h.registered - h.granted,
    prepareBranchMs: h.prepared - h.granted,
  };
}

/** The q-quantile of a sorted list (nearest rank). */
export function quantile(sorted: readonly number[], q: number): number {
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i]!;
}
