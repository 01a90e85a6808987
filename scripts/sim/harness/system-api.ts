import type { SparkConfigInput } from '../../../core/config.ts';
import type { FakeDeckard, FakeGpu } from '../doubles/index.ts';
import type { TestUser } from '../doubles/runner-user.ts';
import type { CheckRun, FakeGitHub } from '../fake-github/server.ts';
import type { Delivery, GitHubSim, JobPlan, PullRequest, SimJob } from './github-sim.ts';
import type { HostRow, LeaseRow, LedgerReader, ReservationRow } from './ledger-reader.ts';
import type { ProcessHandle } from './processes.ts';

/**
 * What a story or a system test hands {@link startSystem} (system.ts) and gets back: the options,
 * the running system's handle, and the periods the harness runs the controller with.
 */

export interface SystemHost {
  id: string;
  homeService?: string | null;
}

export interface SystemOptions {
  hosts?: SystemHost[];
  timings?: NonNullable<SparkConfigInput['timings']>;
  /** The plan for each job GitHub hands out (default: passes after 300 ms). */
  plan?: (job: { reservationId: string; hostId: string; headSha: string }) => Partial<JobPlan>;
  /** Called with every line worth showing on a timeline (webhooks, GitHub actions). */
  onNote?: (line: string) => void;
  deckardReadyDelayMs?: number;
  /** The controller's background tick, ms (default production's 1,000; see {@link FAST_TICK_MS}). */
  tickMs?: number;
  /** Aborting it while starting (Ctrl-C in the demo) stops what already runs and rejects. */
  signal?: AbortSignal;
  /**
   * How a host's agent reaches the controller and GitHub when not over loopback (the pair-lost
   * test runs one agent in a network namespace, ./netns.ts); null or absent: loopback.
   */
  agentRoute?: (
    hostId: string,
    endpoints: { controllerPort: number; actionsUrl: string },
  ) => Promise<AgentRoute | null>;
  /** Changes the controller's config before it starts (e.g. a repository's `ci`). */
  controllerConfig?: (config: Record<string, unknown>, gh: FakeGitHub) => Record<string, unknown>;
  /** Changes a host's agent.json before the agent starts (e.g. its `dstack` section). */
  agentConfig?: (hostId: string, config: Record<string, unknown>) => Record<string, unknown>;
  /** Changes the environment of a host's agent process (e.g. a PATH with a test shim first). */
  agentEnv?: (hostId: string, env: Record<string, string>) => Record<string, string>;
  /**
   * Run each host's runner as its own real unprivileged user (created with `useradd`, with a home
   * under /var/lib, removed at close), each lease in its own sandbox through the real helper
   * (agent/host/spark-lease-sandbox.sh, ADR 0155; run directly, the agent is root here), the host
   * set up as docs/agent.md "Install" says (../doubles/host-sandbox.ts): the system's dir is then
   * under /var/lib/spark-test-fleets, not /tmp, since each lease has a fresh /tmp. Needs root.
   * Default: the runner runs as the agent (development mode).
   */
  runnerUsers?: boolean;
}

/** An agent's way to the controller and the Actions broker, and how it is launched. */
export interface AgentRoute {
  /** Prefix of the agent's command line (e.g. `ip netns exec <ns>`). */
  launch: string[];
  controllerUrl: string;
  actionsUrl: string;
  /** Extra environment of the agent; `passEnv` names what its runner gets too. */
  env: Record<string, string>;
  passEnv: string[];
}

export interface SparkSystem {
  dir: string;
  gh: FakeGitHub;
  controllerUrl: string;
  /** An API token with the `emergency` scope (ending someone else's active work). */
  emergencyToken: string;
  /** A read connection to the ledger file (the controller process owns all writes). */
  reader: LedgerReader;
  operatorToken: string;
  /**
   * A dir every job may write that outlives its lease (declared `writable` to the sandbox helper
   * with {@link SystemOptions.runnerUsers}): where a test's doubles leave their markers.
   */
  markerDir: string;
  /** The runner user of each host, with {@link SystemOptions.runnerUsers}. */
  runnerUsers: Record<string, TestUser>;
  /**
   * The log of a job as GitHub keeps it (the runner uploads it, ./sim-runner.mjs): what its
   * `spark-test.sh` printed; empty when none was uploaded. The runner's own copy lives in the
   * lease's dirs, which go with the lease when it runs in a sandbox.
   */
  jobLog(jobId: number): string;
  gpu: Record<string, FakeGpu>;
  deckard: FakeDeckard | null;
  agents: Record<string, ProcessHandle>;
  controller: ProcessHandle;
  jobs: SimJob[];
  deliveries: Delivery[];
  /** Every JIT config a runner presented to GitHub (secrets: for leak checks only). */
  jitConfigsSeen: string[];
  /** HTTP call to the controller (JSON); `token` defaults to the operator token, `null` sends none. */
  api<T = unknown>(
    method: string,
    path: string,
    body?: unknown,
    token?: string | null,
  ): Promise<{ status: number; body: T }>;
  openPr: GitHubSim['openPr'];
  label: GitHubSim['label'];
  unlabel: GitHubSim['unlabel'];
  closePr: GitHubSim['closePr'];
  push: GitHubSim['push'];
  deliver: GitHubSim['deliver'];
  redeliverFailed: GitHubSim['redeliverFailed'];
  openGate: GitHubSim['openGate'];
  checkRun: GitHubSim['checkRun'];
  waitCheck: GitHubSim['waitCheck'];
  waitJob: GitHubSim['waitJob'];
  reservation(id: string): Promise<ReservationRow>;
  leases(id: string): Promise<LeaseRow[]>;
  host(id: string): Promise<HostRow>;
  history(id: string): Promise<{ type: string; cause: string | null }[]>;
  waitReservation(id: string, statuses: string[], timeoutMs?: number): Promise<ReservationRow>;
  waitHostPhase(id: string, phases: string[], timeoutMs?: number): Promise<void>;
  startAgent(hostId: string): ProcessHandle;
  /** What to look at when a scenario fails: host phases, open reservations, recent log lines. */
  diagnostics(): Promise<string>;
  stopController(signal?: NodeJS.Signals): Promise<void>;
  startController(): Promise<void>;
  close(): Promise<void>;
}

export type { CheckRun, Delivery, JobPlan, PullRequest, SimJob };

/**
 * The controller process's admission pass period here (SPARK_ADMISSION_INTERVAL_MS; production:
 * 2,000 ms): time-driven transitions (a stale heartbeat, an expired lease, a lost pair node) are
 * found by a pass, so a story goes on about when the fleet could see the change instead of up to
 * two seconds later every time.
 */
export const SYSTEM_ADMISSION_INTERVAL_MS = 500;

/**
 * The background tick (SPARK_TICK_MS: check runs, dispatches, sweeps) a story may ask for with
 * {@link SystemOptions.tickMs} instead of production's 1,000 ms. Only where no queued check's
 * summary is looked at: at 200 ms a check run can go out between the pass that claims a host for
 * a queued request and the write of that request's wait reason, and its summary says "waiting for
 * the next admission pass" until the next tick's queued-check refresh re-sends it (`checkRunKey`).
 */
export const FAST_TICK_MS = 200;
