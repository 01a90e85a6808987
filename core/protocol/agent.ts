import * as z from 'zod';
import { EXECUTOR_NAMES, RESERVATION_KINDS, SUITES, TOPOLOGIES } from '../model.ts';
import { HostEvidenceSchema } from './host-evidence.ts';
import { ReceiptSchema } from './receipt.ts';

/**
 * The relay agent protocol (docs/architecture.md "Relay agent protocol"), shared by the controller's agent
 * API (`/agent/v1/...`) and the agent daemon. The agent only ever calls out: it polls for the
 * desired state of its host and reports step results. Every command and every report about a
 * lease carries that lease's fencing token; a stale one is answered 409 and changes nothing.
 */

export const AGENT_API_PREFIX = '/agent/v1';

export const GpuProcessSchema = z.object({
  pid: z.number().int().nonnegative(),
  name: z.string().max(512),
  usedMemoryMiB: z.number().nonnegative(),
});

export const HostFactsSchema = z.object({
  gpuProcesses: z.array(GpuProcessSchema).max(256).nullable(),
  gpuError: z.string().max(1000).nullable().optional(),
  freeDiskBytes: z.number().nonnegative().nullable(),
  serviceState: z.enum(['serving', 'stopped', 'starting', 'draining', 'failed', 'none', 'unknown']),
  runnerState: z.enum(['none', 'starting', 'running', 'exited']),
  interconnectOk: z.boolean().nullable(),
  /**
   * The host's own backend (`executor` in its agent.json): the controller admits a development
   * lease only onto a host whose backend gives it something to attach to (`dstack`, ADR 0176).
   * Optional: agents older than ADR 0166 do not send it.
   */
  executor: z.enum(EXECUTOR_NAMES).optional(),
  /** dstack enrolment (docs/adr/0166-dstack-enrolment-fact.md); null: no dstack section. */
  dstack: z
    .object({
      fleet: z.string().regex(/^[a-z][a-z0-9-]{1,40}$/),
      ok: z.boolean(),
      detail: z.string().max(500),
    })
    .nullable()
    .optional(),
});

const token = z.number().int().positive().max(Number.MAX_SAFE_INTEGER);

/*
 * The agent trusts nothing the controller says: every id and name it may turn
 * into a path, a label or a log line has a pattern, every number a sane range. The patterns are
 * exactly the controller's own shapes (ledger ids, `runnerName()` in functions/github/senders.ts).
 */

/** Host ids: `spark-2`. */
export const HOST_ID_PATTERN = /^[a-z0-9][a-z0-9-]{0,62}$/;
/** Reservation ids: `r-12`. */
export const RESERVATION_ID_PATTERN = /^r-[0-9]{1,15}$/;
/** Lease ids: `l-<host>-<fencing token>`. */
export const LEASE_ID_PATTERN = /^l-[a-z0-9][a-z0-9-]{0,90}$/;
/** Runner names: `spark-<host>-<reservation>-a<attempt>`; one plain path segment, never `..`. */
export const RUNNER_NAME_PATTERN = /^[a-z0-9][a-z0-9._-]{0,99}$/;
export { EXECUTOR_NAMES, type ExecutorName } from '../model.ts';

/** The attach command an agent may report for a development environment: `dstack attach <run>`. */
export const ATTACH_COMMAND_PATTERN = /^dstack attach [a-z][a-z0-9-]{1,40}$/;
/** Longest wait the controller may ask of an agent (a day); longer is a broken controller. */
const MAX_WAIT_MS = 86_400_000;

/** `owner/name` of a GitHub repository (GitHub's own name characters). */
export const REPO_PATTERN = /^[A-Za-z0-9_.-]{1,100}\/[A-Za-z0-9_.-]{1,100}$/;

/** An http(s) URL a task's shell uses: no spaces, quotes or credentials (tokens travel separately). */
const httpUrl = (what: string) =>
  z
    .string()
    .max(500)
    .regex(/^https?:\/\/[A-Za-z0-9._~:/?#[\]!$&()*+,;=%-]+$/, `${what} is http(s) without spaces or quotes`)
    .refine((u) => !/^https?:\/\/[^/]*@/.test(u), `${what} carries no credentials`);

/**
 * The workload of a CI lease whose repository runs CI as a task (`ci: "task"`): the
 * agent's dstack task fetches exactly `headSha` from `cloneUrl`, checks `git rev-parse HEAD`
 * equals it (the commit binding) and runs `script <topology>` with the spark-test action's
 * environment (suite phases, lane). Every field is checked: the agent turns them into a task.
 */
export const CiTaskSchema = z.object({
  repo: z.string().regex(REPO_PATTERN, 'repositories look like "owner/name"'),
  headSha: z.string().regex(/^[0-9a-f]{40}$/, 'a head SHA is 40 lower-case hex digits'),
  suite: z.enum(SUITES),
  /** A path inside the checkout: plain segments, never `..` or absolute. */
  script: z
    .string()
    .max(200)
    .regex(
      /^(?!.*(^|\/)\.\.?(\/|$))[A-Za-z0-9_.-]+(\/[A-Za-z0-9_.-]+)*$/,
      'a script is a relative path like "scripts/ci/spark-test.sh"',
    ),
  /**
   * For a pair: the script in the repository that proves both hosts computed together (the
   * spark-test action's `distributed_assertion`); without one a pair fails before its phases.
   */
  distributedAssertion: z
    .string()
    .max(200)
    .regex(
      /^(?!.*(^|\/)\.\.?(\/|$))[A-Za-z0-9_.-]+(\/[A-Za-z0-9_.-]+)*$/,
      'a relative path inside the checkout',
    )
    .optional(),
  /** Git over HTTP(S), no credentials in it (the clone token travels separately, once). */
  cloneUrl: httpUrl('a clone URL'),
  /**
   * GitHub's "Revoke an installation access token" (`DELETE <apiUrl>/installation/token`, ADR
   * 0115): the task revokes its clone token there right after the fetch, before any of the PR's
   * code runs. From the controller's `github.apiUrl` (GHES differs), never hard-coded. Optional
   * only so a state file written before it existed still loads; a task without it fails closed.
   */
  revokeUrl: httpUrl('a revoke URL').optional(),
  /** The seed's lane (spark-test 30 min, spark-test-long 60 min), as the spark-test action sets it. */
  lane: z.object({
    name: z.enum(['spark-test', 'spark-test-long']),
    targetMinutes: z
      .number()
      .int()
      .positive()
      .max(24 * 60),
  }),
});
export type CiTask = z.infer<typeof CiTaskSchema>;

/** What a lease-bound command tells the agent about the lease. */
export const LeaseRefSchema = z.object({
  leaseId: z.string().regex(LEASE_ID_PATTERN, 'lease ids look like "l-spark-2-7"'),
  reservationId: z.string().regex(RESERVATION_ID_PATTERN, 'reservation ids look like "r-12"'),
  fencingToken: token,
  /** One of RESERVATION_KINDS (a pattern, not the enum, so the ledger's string column types it). */
  kind: z.string().refine((k) => (RESERVATION_KINDS as readonly string[]).includes(k), {
    message: `kind is one of ${RESERVATION_KINDS.join(', ')}`,
  }),
  topology: z.enum(TOPOLOGIES),
  /** Lend the home service (drain → stop → GPU verified free) before reporting prepared. */
  lend: z.boolean(),
  /**
   * The backend this lease's work runs on when the repository's config chooses one; absent: the host's own `executor`.
   */
  executor: z.enum(EXECUTOR_NAMES, { message: `executor is one of ${EXECUTOR_NAMES.join(', ')}` }).optional(),
  /** The repository of CI work: the agent gives its leases one shared build cache (ADR 0157). */
  repo: z.string().regex(REPO_PATTERN, 'repositories look like "owner/name"').optional(),
  /** Milliseconds until the lease expires, by the controller's clock (clocks may differ). */
  expiresInMs: z
    .number()
    .int()
    .min(-MAX_WAIT_MS * 366)
    .max(MAX_WAIT_MS * 366),
});
export type LeaseRef = z.infer<typeof LeaseRefSchema>;

/**
 * The desired state of one host. Level-triggered: the agent compares it with what it has done
 * (its state file) and takes the next step; repeating a step is safe.
 */
export const DesiredStateSchema = z.discriminatedUnion('state', [
  /** Nothing bound: heartbeat only. */
  z.object({ state: z.literal('idle') }),
  /** Nothing bound and the home service serves: keep it, heartbeat only. */
  z.object({ state: z.literal('serve') }),
  /** Granted: lend the service if asked, verify the GPU is free, make a fresh work dir, report prepared. */
  z.object({ state: z.literal('prepare'), lease: LeaseRefSchema }),
  /** Prepared; waiting for the other node of a pair or for the runner's JIT config. */
  z.object({ state: z.literal('wait'), lease: LeaseRefSchema }),
  /**
   * Run (or keep watching) the one-job runner `runnerName`. `jitConfig` and `jobToken` are present
   * only in the single response that hands them over; a different `runnerName` replaces the runner.
   */
  z.object({
    state: z.literal('run'),
    lease: LeaseRefSchema,
    runnerName: z
      .string()
      .regex(RUNNER_NAME_PATTERN, 'runner names are one plain name like "spark-spark-2-r-12-a0"'),
    /** GitHub's encoded JIT config: printable ASCII, no whitespace. */
    jitConfig: z
      .string()
      .max(65_536)
      .regex(/^[!-~]+$/, 'a JIT config is printable ASCII without spaces')
      .optional(),
    jobToken: z
      .string()
      .regex(/^spk_job_[A-Za-z0-9_-]{16,128}$/, 'job tokens look like "spk_job_…"')
      .optional(),
    /** Present when the repository runs CI as a task (`ci: "task"`): no runner, this workload. */
    task: CiTaskSchema.optional(),
    /**
     * The task's short-lived read-only credential to fetch the code (a GitHub App installation
     * token for that one repository, `contents: read`); like `jitConfig`, only in the single
     * response that hands it over, never persisted by the agent.
     */
    cloneToken: z
      .string()
      .regex(/^[A-Za-z0-9_]{8,255}$/, 'a clone token is a GitHub token like "ghs_…"')
      .optional(),
  }),
  /** A development lease is active: no runner; report it active, watch the expiry. */
  z.object({ state: z.literal('develop'), lease: LeaseRefSchema }),
  /** Releasing: stop only what the agent started, clean the work dir, report cleaned. */
  z.object({ state: z.literal('clean'), lease: LeaseRefSchema }),
  /** Recreate the home service and report once its model-ready health check passed (or failed). */
  z.object({
    state: z.literal('restore'),
    fencingToken: z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER),
    attempt: z.number().int().nonnegative().max(1000),
    /** Wait this long before the attempt (backoff after a failed restore). */
    waitMs: z.number().int().nonnegative().max(MAX_WAIT_MS),
    healthTimeoutS: z.number().int().positive().max(86_400),
  }),
  /**
   * Touch nothing (quarantined, or release-required: processes outlived the lease). With a lease,
   * the agent reports `cleaned` once the GPU shows no process, never killing anything.
   */
  z.object({ state: z.literal('hold'), reason: z.string().max(2000), lease: LeaseRefSchema.optional() }),
]);
export type DesiredState = z.infer<typeof DesiredStateSchema>;

export const PollRequestSchema = z.object({
  /** `version` of the last desired state the agent got; the server holds the poll while it is current. */
  since: z.string().max(128).nullable().optional(),
  /** Longest the agent is willing to wait (the server caps it; Workers always answer at once). */
  maxWaitMs: z.number().int().min(0).max(60_000).optional(),
});
export type PollRequest = z.infer<typeof PollRequestSchema>;

/** Heartbeat periods an agent accepts, seconds (a day at most: beyond, timers overflow). */
export const HEARTBEAT_INTERVAL_RANGE_S = { min: 1, max: 86_400 } as const;

/**
 * Why the controller answered a poll when it did: `changed` (the desired state already differed
 * from `since`, or no `since` was given), `notice` (a change notice for the host came while the
 * poll was open, and the state differs), `recheck` (held; the periodic re-read found a change
 * another controller process wrote), `timeout` (held the whole wait; nothing changed), `no-hold`
 * (nothing changed and the controller does not hold polls: Workers, or a zero wait).
 */
export const POLL_ANSWERS = ['changed', 'notice', 'recheck', 'timeout', 'no-hold'] as const;
export type PollAnswer = (typeof POLL_ANSWERS)[number];

export const PollResponseSchema = z.object({
  hostId: z.string().regex(HOST_ID_PATTERN, 'host ids look like "spark-2"'),
  /** Fingerprint of the desired state without its secrets. */
  version: z.string().regex(/^[A-Za-z0-9_-]{1,128}$/, 'a version is a short fingerprint'),
  /** Heartbeat period the controller expects, seconds. */
  heartbeatIntervalS: z
    .number()
    .int()
    .min(HEARTBEAT_INTERVAL_RANGE_S.min)
    .max(HEARTBEAT_INTERVAL_RANGE_S.max),
  desired: DesiredStateSchema,
  /** Why the poll was answered now (absent from controllers older than this field). */
  answered: z.enum(POLL_ANSWERS).optional(),
});

/** The controller's answer to a heartbeat. */
export const HeartbeatResponseSchema = z.object({
  heartbeatIntervalS: PollResponseSchema.shape.heartbeatIntervalS,
});
export type PollResponse = z.infer<typeof PollResponseSchema>;

export const HeartbeatRequestSchema = z.object({ facts: HostFactsSchema });

const lastLines = z.array(z.string().max(2000)).max(100);
const evidence = z.record(z.string(), z.unknown()).optional();

/** Step results. Each one about a lease carries its fencing token. */
export const ReportSchema = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('prepared'),
    fencingToken: token,
    /** True when the home service was lent: drained, stopped and its GPU processes verified gone. */
    serviceLent: z.boolean(),
    evidence,
  }),
  z.object({
    type: z.literal('prepare_failed'),
    fencingToken: token,
    reason: z.string().min(1).max(1000),
    evidence,
  }),
  z.object({
    type: z.literal('runner_started'),
    fencingToken: token,
    runnerName: z.string().min(1),
    /** The backend that runs the work, named on the check run. */
    executor: z.enum(EXECUTOR_NAMES).optional(),
  }),
  z.object({
    type: z.literal('runner_exited'),
    fencingToken: token,
    runnerName: z.string().min(1),
    /** null when the exit status could not be observed (e.g. stopped by signal). */
    exitCode: z.number().int().nullable(),
    lastLines,
    /**
     * A CI task's evidence receipt (`ci: "task"`), built by the agent from the task's
     * exit and its logs; a runner's job may post one through the lease endpoints (detail only).
     */
    receipt: ReceiptSchema.optional(),
    /**
     * What the agent observed itself (ADR 0160): its preflight before the start, the runner's own
     * job result and the commit in the work tree after the job. The check run's verdict comes
     * from this; absent (an older agent) the check cannot pass.
     */
    hostEvidence: HostEvidenceSchema.optional(),
  }),
  /**
   * A development lease is in use on the host. `attach`: the command that attaches to its
   * development environment (executor `dstack`) — a fixed shape, since the requester runs it.
   */
  z.object({
    type: z.literal('lease_active'),
    fencingToken: token,
    attach: z
      .string()
      .regex(ATTACH_COMMAND_PATTERN, 'an attach command looks like "dstack attach spark-r-12-spark-2-t7-dev"')
      .optional(),
  }),
  z.object({
    type: z.literal('cleaned'),
    fencingToken: token,
    /**
     * Host facts read right after cleanup: the report that frees the host says
     * what its GPU shows now, so admission need not wait for the next heartbeat.
     */
    facts: HostFactsSchema.optional(),
  }),
  /**
   * The agent could not clean up after the lease within its bounded time (ADR 0156): its work area
   * would not go, or a process of the lease would not end. The host is quarantined with `reason`.
   */
  z.object({
    type: z.literal('cleanup_failed'),
    fencingToken: token,
    reason: z.string().min(1).max(1000),
  }),
  z.object({
    type: z.literal('processes_remain'),
    fencingToken: token,
    processes: z.array(GpuProcessSchema).max(256),
  }),
  /**
   * The home service stopped by itself outside any lease (ADR 0175): nothing answers its health URL
   * (its process is gone), or its model-ready check kept failing for the agent's
   * `service.unhealthyAfterS`. Sent once per stop; the controller restarts it through the restore
   * path (bounded retries with backoff, model-ready gate, then quarantine). `fencingToken` is the
   * host's current one (the last lease's), so a report that crosses a new grant is stale.
   */
  z.object({
    type: z.literal('service_down'),
    fencingToken: z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER),
    reason: z.string().min(1).max(1000),
  }),
  z.object({
    type: z.literal('restored'),
    /** The host's current fencing token (the lease that was just released). */
    fencingToken: z.number().int().nonnegative(),
    ok: z.boolean(),
    /** Health check output (status and body excerpt), kept for the operator. */
    detail: z.string().max(4000),
  }),
]);
export type Report = z.infer<typeof ReportSchema>;

export const ReportResponseSchema = z.object({
  ok: z.literal(true),
  /** What the report changed, in words (e.g. "reservation r-3 preparing"). */
  result: z.string(),
});
export type ReportResponse = z.infer<typeof ReportResponseSchema>;

/** Bodies larger than this are refused with 413 before parsing. */
export const AGENT_MAX_BODY_BYTES = 64 * 1024;
