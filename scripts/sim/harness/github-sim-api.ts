import type { GitHubLatency } from '../fake-github/latency.ts';
import type { CheckRun, FakeGitHub, RepoState } from '../fake-github/server.ts';

/**
 * What the simulated GitHub (github-sim.ts) takes and hands out: the plan of a job, the job a
 * runner gets, webhook deliveries, pull requests, the options and the handle a harness drives.
 */

/** What the simulated job does on one host (GitHub hands it to the runner with the job). */
export interface JobPlan {
  result: 'passed' | 'failed';
  exitCode: number;
  /** Test duration before any gate. */
  workMs: number;
  /** Gates a test opens with {@link GitHubSim.openGate}: `work` holds the test running, `exit` holds the runner after the job completed. */
  gates: ('work' | 'exit')[];
  receipt: boolean;
  lastLines: string[];
  /**
   * The PR's `scripts/ci/spark-test.sh` (scripts/sim/harness/sim-runner.mjs runs it as the spark-test
   * action does, its exit is the job's result); absent: the planned result after `workMs`.
   */
  script?: string;
  /** Check out the job's commit with real git from this clone URL (hooks run, as in a real checkout). */
  checkout?: { url: string };
  /**
   * What a runner double other than sim-runner.mjs does for this job (scripts/sim/doubles/fleet.ts hands
   * scripts/sim/doubles/fake-runner.mjs its behaviour here); GitHub itself never sees it.
   */
  runner?: Record<string, unknown>;
}

/** A job GitHub assigned to a runner. */
export interface SimJob {
  id: number;
  runId: number;
  reservationId: string;
  hostId: string;
  runnerName: string;
  /** The commit the job checks out and tests: the dispatch's `head_sha` input (commit binding). */
  headSha: string;
  /** The run's `head_sha`: the default branch tip, as GitHub sets it for `workflow_dispatch`. */
  runHeadSha: string;
  repo: string;
  topology: string;
  suite: string;
  pid: number;
  /** When the runner registered (ms since the epoch): its pid is known to be the runner's then (see killGroup). */
  seenAt: number;
  plan: JobPlan;
  /** The labels of the runner GitHub matched the job to. */
  labels: string[];
  gates: Set<string>;
  conclusion: string | null;
}

export interface Delivery {
  id: string;
  event: string;
  status: number;
  result: string | null;
}

export interface PullRequest {
  number: number;
  headSha: string;
  headRepo: string;
  labels: string[];
  state: 'open' | 'closed';
}

export interface GitHubSimOptions {
  /** Where webhooks go (the controller's root URL). */
  controllerUrl: string;
  /** The plan for each job GitHub hands out (default: passes after 300 ms). */
  plan?: (job: {
    reservationId: string;
    hostId: string;
    headSha: string;
    runnerName: string;
  }) => Partial<JobPlan>;
  /** Called with every line worth showing on a timeline (webhooks, GitHub Actions). */
  onNote?: (line: string) => void;
  /**
   * GitHub's modelled time (scripts/sim/fake-github/latency.ts): REST answers wait their latency and each
   * webhook is delivered its delay after the event; default none.
   */
  latency?: GitHubLatency;
  /**
   * GitHub as an operator sets it up (the docs walkthrough, test/e2e/walkthrough.test.ts): this
   * fake, with {@link REPO} already in it, and the App the operator creates through the manifest
   * flow (`app()`: its id once created). Webhooks then go to that App's own webhook URL signed with
   * its own secret, and its delivery log records them; no runner group is made (the operator
   * makes it). Default: a fresh fake with the harness's App, its runner group and {@link REPO}
   * installed.
   */
  github?: { gh: FakeGitHub; app: () => number | null };
}

export interface GitHubSim {
  gh: FakeGitHub;
  repo: RepoState;
  /** Where runners connect to be handed their job (the runner command's argument). */
  actionsUrl: string;
  jobs: SimJob[];
  deliveries: Delivery[];
  /** Every JIT config a runner presented to GitHub (secrets: for leak checks only). */
  jitConfigsSeen: string[];
  /** Opens a PR in the fake GitHub (no webhook: the label is what matters here). */
  openPr(n: number, o: { sha: string; fork?: boolean }): PullRequest;
  label(n: number, label: string, sender?: string): Promise<Delivery>;
  unlabel(n: number, label: string, sender?: string): Promise<Delivery>;
  closePr(n: number, sender?: string): Promise<Delivery>;
  push(n: number, sha: string, sender?: string): Promise<Delivery>;
  /** Sends a signed webhook to the controller; a refused connection is recorded for redelivery. */
  deliver(event: string, payload: unknown, id?: string): Promise<Delivery>;
  /**
   * How the harness learns what an acknowledged (202) delivery did once the controller's inbox
   * processed it (the operator API's `GET /api/v1/deliveries/:id`); set once a token exists.
   * GitHub itself never sees this: it only records the 2xx.
   */
  processed: ((id: string) => Promise<{ state: string; result: string } | null>) | null;
  /** Redelivers every delivery that did not get a 2xx (GitHub's "Redeliver"), same delivery id. */
  redeliverFailed(): Promise<Delivery[]>;
  openGate(reservationId: string, gate: 'work' | 'exit', hostId?: string): void;
  /** The check run the controller keeps for a reservation. */
  checkRun(reservationId: string): CheckRun | undefined;
  waitCheck(reservationId: string, title: string | RegExp, timeoutMs?: number): Promise<CheckRun>;
  waitJob(reservationId: string, hostId?: string, timeoutMs?: number): Promise<SimJob>;
  close(): Promise<void>;
}
