import type { AppModule } from '../../../functions/app.ts';
import { createApiToken } from '../../../functions/auth/tokens.ts';
import { githubModule } from '../../../functions/github/module.ts';
import { getDelivery } from '../../../functions/ledger/inbox.ts';
import type { Ledger, NewReservation } from '../../../functions/ledger/ledger.ts';
import { SECRET, SPARK_RUNNER_GROUP } from '../fake-github/harness.ts';
import type { GitHubLatency } from '../fake-github/latency.ts';
import { type GitHubSim, REPO, startGitHubSim } from '../harness/github-sim.ts';
import type { FakeRunnerBehavior } from './index.ts';

/**
 * The fleet's GitHub (scripts/sim/doubles/fleet.ts `github: 'fake-github'`): the controller's real GitHub
 * module against the fake GitHub and its Actions service (scripts/sim/harness/github-sim.ts), so a grant
 * goes through the outbox, the dispatch, the run's identification, `generate-jitconfig` and the
 * agent's poll, as in production (docs/adr/0181-modelled-github-latency.md). The fake runner
 * (fake-runner.mjs, given the Actions service's URL) presents the JIT config GitHub issued and
 * gets the behaviour the test planned for its job; its job's `workflow_job` webhooks reach the
 * controller as GitHub sends them. Reservations come from a maintainer labelling a PR.
 */

export interface FleetGitHubOptions {
  /** The controller's port, chosen before it starts (webhooks go there). */
  controllerPort: number;
  /** The runner's behaviour for a reservation on a host, at an attempt (from the runner's name). */
  runner: (reservationId: string, hostId: string, attempt: number) => FakeRunnerBehavior;
  /** Where fake runners record what they saw. */
  markerDir: string;
  /** GitHub's modelled time (scripts/sim/fake-github/latency.ts); default none. */
  latency?: GitHubLatency;
}

export interface FleetGitHub {
  sim: GitHubSim;
  /** The controller modules GitHub needs (the real GitHub module). */
  modules: AppModule[];
  /** The controller configuration's `github` section. */
  config: Record<string, unknown>;
  /** The controller's environment for GitHub (App credentials, webhook secret). */
  env: Record<string, string>;
  /** The runner command's extra argument: the Actions service the runner connects to. */
  actionsUrl: string;
  /** Makes the controller's ledger known (for delivery lookups); again after a restart. */
  attach(ledger: Ledger, url: string): void;
  /**
   * A maintainer labels a PR for a Spark test (opened first with `headSha`): the webhook is
   * delivered and processed, and the queued reservation's id returned. The repository is enabled
   * by the operator API on the first call, as an operator does once the hosts are adopted.
   */
  reserve(input: Partial<NewReservation>): Promise<string>;
  close(): Promise<void>;
}

/** `spark-<host>-<reservation>-a<attempt>` (functions/github/senders.ts `runnerName`). */
const attemptOf = (runnerName: string) => Number(/-a(\d+)$/.exec(runnerName)?.[1] ?? 0);

let prs = 1000;

export async function startFleetGitHub(o: FleetGitHubOptions): Promise<FleetGitHub> {
  const sim = await startGitHubSim({
    controllerUrl: `http://127.0.0.1:${o.controllerPort}`,
    ...(o.latency ? { latency: o.latency } : {}),
    plan: ({ reservationId, hostId, runnerName }) => ({
      runner: { ...o.runner(reservationId, hostId, attemptOf(runnerName)), markerDir: o.markerDir },
    }),
  });
  let ledger: Ledger | null = null;
  let controllerUrl = '';
  let enabled: Promise<void> | null = null;
  // the harness's own view of a delivery: GitHub only sees the 2xx (github-sim `processed`)
  sim.processed = async (id) => {
    const d = ledger ? await getDelivery(ledger, id) : null;
    return d ? { state: d.state, result: d.result ?? '' } : null;
  };
  const enable = async () => {
    if (!ledger) throw new TypeError('the fleet controller is not running');
    const operatorToken = (
      await createApiToken(ledger, { name: 'fleet-operator', scopes: ['operate'] }, 'test fleet')
    ).token;
    const res = await fetch(`${controllerUrl}/api/v1/repositories/${REPO}/enable`, {
      method: 'POST',
      headers: { authorization: `Bearer ${operatorToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({}),
    });
    if (res.status !== 200) throw new Error(`enabling ${REPO} failed: ${res.status} ${await res.text()}`);
  };
  return {
    sim,
    modules: [githubModule],
    // organization runners in the group restricted to the enabled repositories (docs/github-app.md)
    config: { apiUrl: sim.gh.url, runnerGroupId: SPARK_RUNNER_GROUP },
    env: {
      SPARK_WEBHOOK_SECRET: SECRET,
      SPARK_GITHUB_APP_ID: String(sim.gh.appId),
      SPARK_GITHUB_PRIVATE_KEY: sim.gh.privateKey,
    },
    actionsUrl: sim.actionsUrl,
    attach(l, url) {
      ledger = l;
      controllerUrl = url;
    },
    async reserve(input) {
      if (input.repo && input.repo !== REPO) throw new TypeError(`the fleet's GitHub serves ${REPO} only`);
      if ((input.topology ?? 'single') !== 'single' || (input.kind ?? 'manual') !== 'manual')
        throw new TypeError('the fleet labels PRs: single manual tests only');
      // once, shared by reservations asked for at the same time
      enabled ??= enable().catch((e) => {
        enabled = null;
        throw e;
      });
      await enabled;
      const pr = input.pr ?? ++prs;
      sim.openPr(pr, { sha: input.headSha ?? '7fc2a91c0ffee00000000000000000000000000a' });
      const d = await sim.label(pr, 'spark-test');
      const id = /^queued (r-\d+)/.exec(d.result ?? '')?.[1];
      if (!id) throw new Error(`labelling PR #${pr} queued nothing: ${d.status} ${d.result ?? ''}`);
      return id;
    },
    close: () => sim.close(),
  };
}
