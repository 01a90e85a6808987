import { createRequire } from 'node:module';
import { join } from 'node:path';
import { sign } from '@octokit/webhooks-methods';
import type { SparkConfigInput } from '../../../core/config.ts';
import { createApiToken } from '../../../functions/auth/tokens.ts';
import { sweepMissedDeliveries } from '../../../functions/github/redeliver.ts';
import { githubService } from '../../../functions/github/service.ts';
import { getDelivery } from '../../../functions/ledger/inbox.ts';
import type { Logger } from '../../../functions/log.ts';
import { appModules } from '../../../functions/modules.ts';
import { type RunningController, startController } from '../../../functions/node-server.ts';
import { settingsFromEnv } from '../../../functions/settings.ts';
import { tempDir } from '../ledger.ts';
import { type FakeGitHub, type Job, startFakeGitHub } from './server.ts';
import { completeWebhook } from './webhooks.ts';

/**
 * One scenario's world: a fake GitHub on loopback, a real controller (libSQL file, real HTTP
 * port) wired to it, a clock the test can move forward, and a logger that keeps every line.
 */

const require = createRequire(import.meta.url);
// biome-ignore lint/suspicious/noExplicitAny: example payloads are edited field by field in tests
type Payload = any;
type Definition = { name: string; examples: Payload[] };
const definitions = require('@octokit/webhooks-examples') as Definition[];

/** A deep copy of the first recorded payload of `event` (and `action`) in @octokit/webhooks-examples, as recorded. */
export function recordedExample(event: string, action?: string): Payload {
  const def = definitions.find((d) => d.name === event);
  const ex = def?.examples.find((e) => action === undefined || e.action === action);
  if (!ex) throw new Error(`no ${event}${action ? `.${action}` : ''} example in @octokit/webhooks-examples`);
  return structuredClone(ex);
}

/** Every recorded payload of `event` in @octokit/webhooks-examples (deep copies), as recorded. */
export function recordedExamples(event: string): Payload[] {
  const def = definitions.find((d) => d.name === event);
  if (!def) throw new Error(`no ${event} examples in @octokit/webhooks-examples`);
  return structuredClone(def.examples);
}

/**
 * A real example payload from @octokit/webhooks-examples as GitHub sends it today: the recording
 * with the properties GitHub's webhook description has made required since filled in
 * (webhooks.ts `completeWebhook`), so it passes the check every delivery gets.
 */
export function example(event: string, action?: string): Payload {
  return completeWebhook(event, recordedExample(event, action));
}

/** The `installation` of a webhook payload (`simple-installation`: id and node id). */
export function installationObject(id: number) {
  return { id, node_id: Buffer.from(`023:IntegrationInstallation${id}`).toString('base64') };
}

/**
 * A label as GitHub puts it in webhook payloads (`pull_request.labels[]`, `label`): every field
 * its webhook description requires, not only the name the controller reads.
 */
export function labelObject(repo: string, name: string, id: number) {
  return {
    id,
    node_id: `LA_${Buffer.from(`${repo}/${name}`).toString('base64url')}`,
    url: `https://api.github.com/repos/${repo}/labels/${encodeURIComponent(name)}`,
    name,
    description: null,
    color: 'ededed',
    default: false,
  };
}

/**
 * The `workflow_job` webhook GitHub sends for one of the fake's jobs (a real example payload with
 * the job's fields): its `head_sha`/`head_branch` are the run's, i.e. the dispatched branch tip,
 * and `runner_name` is set once a runner took it.
 */
export function workflowJobEvent(job: Job, action: 'queued' | 'in_progress' | 'completed'): Payload {
  const p = example('workflow_job', action);
  const [owner, name] = job.repo.split('/') as [string, string];
  Object.assign(p.workflow_job, {
    id: job.id,
    run_id: job.runId,
    name: job.name,
    labels: job.labels,
    head_sha: job.headSha,
    head_branch: job.headBranch,
    status: action,
    conclusion: action === 'completed' ? job.conclusion : null,
    runner_id: action === 'queued' ? null : job.runnerId,
    runner_name: action === 'queued' ? null : job.runnerName,
    html_url: `https://github.com/${job.repo}/actions/runs/${job.runId}/job/${job.id}`,
  });
  Object.assign(p.repository, { full_name: job.repo, name });
  p.repository.owner.login = owner;
  return p;
}

export const SECRET = "test-webhook-secret-It's a Secret to Everybody";

/** The runner group the harness's organization keeps for the Spark runners (visibility: selected). */
export const SPARK_RUNNER_GROUP = 2;
/** The App manifest docs/github-app.md gives for repository runners (`github.runnerScope: "repo"`). */
export const REPO_SCOPE_MANIFEST = 'docs/github-app-manifest.repo-scope.json';

/**
 * The readiness checks of the fleet (docs/adr/0165-enable-is-a-gate.md) that a GitHub scenario
 * does not play — no agents heartbeat here, no Deckard was lent and restored, no dstack server:
 * {@link Harness.enable} overrides them, as an operator may (recorded with the enablement), unless
 * a test passes its own `override` (`[]` runs the whole gate). The GitHub checks (installation,
 * permissions, runner group, workflow) are never overridden by default: the fake plays them.
 */
export const FLEET_OVERRIDE = ['hosts', 'dstack', 'deckard'] as const;

export interface Harness {
  gh: FakeGitHub;
  c: RunningController;
  logs: string[];
  clock: { (): number; advance(ms: number): void };
  /**
   * Sends a signed webhook. A delivery the inbox accepted (202) is processed before this returns,
   * and the answer carries its `state` and `result` (what `GET /api/v1/deliveries/:id` shows).
   * The payload is checked against GitHub's webhook description first: one GitHub would not send
   * is a violation of the fake (`gh.violations`), unless `asRecorded` says it is a community
   * recording delivered as recorded (older than the description: GitHub sent it that way then).
   */
  deliver(
    event: string,
    payload: unknown,
    opts?: { id?: string; secret?: string; signature?: string; asRecorded?: boolean },
  ): Promise<Response>;
  operatorToken(): Promise<string>;
  /** `POST /api/v1/repositories/:repo/enable`, with `override: FLEET_OVERRIDE` unless `body` names its own. */
  enable(repo: string, body?: Record<string, unknown>): Promise<Response>;
  /** Sends due outbox rows now (the background tick also does). */
  drain(): Promise<void>;
  until<T>(
    what: string,
    fn: () => Promise<T | null | undefined | false> | T | null | undefined | false,
    ms?: number,
  ): Promise<T>;
  /** Stops everything; throws the fake GitHub's violations if any are left (server.ts `close`). */
  close(): Promise<void>;
}

let deliveries = 0;

export async function startHarness(
  opts: {
    config?: SparkConfigInput;
    env?: Record<string, string>;
    /** The periodic admission pass (default 200 ms); passes kicked by ledger changes still run. */
    admissionIntervalMs?: number;
    /** The App's manifest (a path in this repository); default the one for the configured runner scope. */
    manifest?: string;
  } = {},
): Promise<Harness> {
  const ghConfig = (opts.config?.github ?? {}) as { runnerScope?: string; runnerGroupId?: number };
  const scope = ghConfig.runnerScope ?? 'org';
  // the App as docs/github-app.md has operators create it: from the manifest of the runner scope
  const gh = await startFakeGitHub(
    opts.manifest ? { manifest: opts.manifest } : scope === 'repo' ? { manifest: REPO_SCOPE_MANIFEST } : {},
  );
  if (scope === 'org' && ghConfig.runnerGroupId == null) {
    // the spec's path: an organization runner group restricted to the enabled repositories
    gh.addRunnerGroup(SPARK_RUNNER_GROUP, 'spark', 'selected');
    gh.joinRunnerGroup = SPARK_RUNNER_GROUP;
  }
  const { dir, cleanup } = tempDir('spark-gh-');
  let offset = 0;
  const clock = Object.assign(() => Date.now() + offset, {
    advance(ms: number) {
      offset += ms;
    },
  });
  // GitHub's time moves with the test's: tokens expire and JWTs age on the same clock
  gh.clock = clock;
  const logs: string[] = [];
  const capture =
    (level: string) =>
    (msg: string, fields?: Record<string, unknown>): void => {
      logs.push(JSON.stringify({ level, msg, ...fields }));
    };
  const log: Logger = {
    debug: capture('debug'),
    info: capture('info'),
    warn: capture('warn'),
    error: capture('error'),
  };
  const config = {
    ...(opts.config ?? {}),
    listen: { host: '127.0.0.1', port: 0 },
    github: {
      apiUrl: gh.url,
      ...(scope === 'org' ? { runnerGroupId: SPARK_RUNNER_GROUP } : {}),
      ...((opts.config?.github as object) ?? {}),
    },
  };
  const settings = settingsFromEnv(
    {
      SPARK_LEDGER_URL: `file:${join(dir, 'spark.db')}`,
      SPARK_WEBHOOK_SECRET: SECRET,
      SPARK_GITHUB_APP_ID: String(gh.appId),
      SPARK_GITHUB_PRIVATE_KEY: gh.privateKey,
      ...(opts.env ?? {}),
    },
    { text: JSON.stringify(config), source: 'test config' },
  );
  const c = await startController({
    settings,
    modules: appModules,
    log,
    clock,
    tickMs: 200,
    admissionIntervalMs: opts.admissionIntervalMs ?? 200,
  });
  // the controller's start sweep for missed webhooks (one `GET /app/hook/deliveries`) runs on its
  // first tick; run it here, so that it lands before the test starts counting requests and rows
  // rather than at some point inside the test on a loaded machine
  await sweepMissedDeliveries(githubService(c.ctx), { startSweep: true });
  let token: string | null = null;
  const h: Harness = {
    gh,
    c,
    logs,
    clock,
    async deliver(event, payload, o = {}) {
      if (!o.asRecorded) gh.checkWebhook(event, payload);
      const body = JSON.stringify(payload);
      const signature = o.signature ?? (await sign(o.secret ?? SECRET, body));
      const res = await fetch(`${c.url}/github/webhooks`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-github-event': event,
          'x-github-delivery': o.id ?? `d-${process.pid}-${++deliveries}`,
          'x-hub-signature-256': signature,
        },
        body,
      });
      if (res.status !== 202) return res;
      // the inbox acknowledged it (202); process it now and answer with what it did, as the
      // operator API shows it (GET /api/v1/deliveries/:id)
      const ack = (await res.json()) as { delivery: string };
      await githubService(c.ctx).inbox.drain();
      await c.loop.settle();
      const d = await getDelivery(c.ledger, ack.delivery);
      return Response.json({ ...ack, state: d?.state, result: d?.result }, { status: 202 });
    },
    async operatorToken() {
      token ??= (await createApiToken(c.ledger, { name: 'test-operator', scopes: ['operate'] }, 'test'))
        .token;
      return token;
    },
    async enable(repo, body = {}) {
      return fetch(`${c.url}/api/v1/repositories/${repo}/enable`, {
        method: 'POST',
        headers: { authorization: `Bearer ${await h.operatorToken()}`, 'content-type': 'application/json' },
        body: JSON.stringify({ override: FLEET_OVERRIDE, ...body }),
      });
    },
    async drain() {
      const { drainOutbox } = await import('../../../functions/github/outbox.ts');
      const { senders } = await import('../../../functions/github/senders.ts');
      await drainOutbox(githubService(c.ctx), senders);
    },
    async until(what, fn, ms = 15_000) {
      const deadline = Date.now() + ms;
      for (;;) {
        const v = await fn();
        if (v) return v as never;
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
        await new Promise((r) => setTimeout(r, 25));
      }
    },
    async close() {
      // the fake's close fails the caller on any violation left (server.ts), after everything
      // else is down and the files are gone
      try {
        await c.close();
      } finally {
        try {
          await gh.close();
        } finally {
          cleanup();
        }
      }
    },
  };
  return h;
}
