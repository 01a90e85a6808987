import { sign } from '@octokit/webhooks-methods';
import { example, installationObject, labelObject, SECRET } from '../fake-github/harness.ts';
import { webhookViolations } from '../fake-github/webhooks.ts';
import { postOnce } from './http.ts';

/**
 * Signed webhook deliveries for load tests and the webhook bench, built from the recorded
 * payloads in @octokit/webhooks-examples (as the GitHub part's tests do) and edited field by
 * field; every planned payload is checked against GitHub's webhook description
 * (scripts/sim/fake-github/webhooks.ts) and a plan with one GitHub would not send is refused. A plan is
 * deterministic for its seed so a failing run can be replayed.
 */

export const LOAD_REPO = 'Codertocat/Hello-World';
/** Installation id of the example payloads (the fake GitHub must use the same one). */
export const LOAD_INSTALLATION = 1;
export const MAINTAINER = 'Codertocat';
export const OUTSIDER = 'outsider';

export type DeliveryKind =
  | 'labeled'
  | 'labeled-pair'
  | 'labeled-long'
  | 'labeled-outsider'
  | 'labeled-fork'
  | 'labeled-other'
  | 'synchronize'
  | 'unlabeled'
  | 'closed'
  | 'comment-test'
  | 'comment-status'
  | 'comment-cancel'
  | 'comment-plain'
  | 'push'
  | 'workflow-job'
  | 'unknown-event';

export interface PlannedDelivery {
  /** Position in the logical (GitHub-side) order; sends may arrive out of it. */
  seq: number;
  id: string;
  event: string;
  kind: DeliveryKind | 'job-lifecycle';
  pr: number | null;
  body: string;
  signature: string;
  /** Index of the controller process it is sent to. */
  target: number;
  /** True for the second send of a delivery id (GitHub redelivery / retry). */
  duplicate: boolean;
}

/** A seeded PRNG (mulberry32), so a plan is replayable from its seed. */
export function prng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A deterministic 40-hex commit id for (pr, version). */
export function shaOf(pr: number, version: number): string {
  const base = `${pr.toString(16).padStart(6, '0')}${version.toString(16).padStart(4, '0')}`;
  return (base + 'c0ffee'.repeat(6)).slice(0, 40);
}

// biome-ignore lint/suspicious/noExplicitAny: example payloads are edited field by field
type Payload = any;

/** A `pull_request` event for the load repository, from the recorded example for `action`. */
export function pullRequestEvent(
  action: string,
  pr: number,
  sha: string,
  o: { label?: string; labels?: string[]; sender?: string; headRepo?: string | null } = {},
): Payload {
  const p = example('pull_request', action);
  p.number = pr;
  p.pull_request.number = pr;
  p.pull_request.head.sha = sha;
  p.repository.full_name = LOAD_REPO;
  p.repository.default_branch = 'main';
  p.pull_request.base.repo.full_name = LOAD_REPO;
  p.pull_request.head.repo =
    o.headRepo === null ? null : { ...p.pull_request.head.repo, full_name: o.headRepo ?? LOAD_REPO };
  p.installation = installationObject(LOAD_INSTALLATION);
  p.sender.login = o.sender ?? MAINTAINER;
  if (o.label !== undefined) p.label = labelObject(LOAD_REPO, o.label, 99);
  p.pull_request.labels = (o.labels ?? []).map((name, i) => labelObject(LOAD_REPO, name, i + 1));
  return p;
}

function comment(pr: number, body: string, sender = MAINTAINER): Payload {
  const c = example('issue_comment', 'created');
  c.repository.full_name = LOAD_REPO;
  c.installation = installationObject(LOAD_INSTALLATION);
  c.issue.number = pr;
  c.issue.pull_request = {
    ...c.issue.pull_request,
    url: `https://api.github.com/repos/${LOAD_REPO}/pulls/${pr}`,
    html_url: `https://github.com/${LOAD_REPO}/pull/${pr}`,
  };
  c.comment.body = body;
  c.sender.login = sender;
  c.sender.type = 'User';
  return c;
}

function push(after: string): Payload {
  const p = example('push');
  p.ref = 'refs/heads/main';
  p.after = after;
  p.deleted = false;
  p.repository.full_name = LOAD_REPO;
  p.repository.default_branch = 'main';
  p.installation = installationObject(LOAD_INSTALLATION);
  return p;
}

/**
 * A `workflow_job` event as GitHub sends it for a job carrying a reservation label
 * (`spark-<rid>-<nonce>`; a made-up nonce when the test does not know the real one) in run
 * `runId` (the recorded run for an admitted job).
 */
export function workflowJob(
  action: 'queued' | 'in_progress' | 'completed',
  o: {
    rid: string;
    sha: string;
    runner: string | null;
    conclusion?: 'success' | 'failure' | 'cancelled';
    nonce?: string | null;
    runId?: number | null;
  },
): Payload {
  const p = example('workflow_job', action);
  p.repository.full_name = LOAD_REPO;
  p.installation = installationObject(LOAD_INSTALLATION);
  p.workflow_job.head_sha = o.sha;
  if (o.runId != null) p.workflow_job.run_id = o.runId;
  p.workflow_job.labels = [
    'self-hosted',
    'Linux',
    'ARM64',
    'waffuru-spark',
    'spark-single',
    `spark-${o.rid}-${o.nonce ?? '0123456789abcdef'}`,
  ];
  p.workflow_job.runner_name = o.runner;
  p.workflow_job.status = action;
  p.workflow_job.conclusion = action === 'completed' ? (o.conclusion ?? 'success') : null;
  return p;
}

/**
 * The body GitHub would send for `payload`: refused (TypeError) when GitHub's webhook description
 * says GitHub would not send it, so a load run never measures deliveries GitHub cannot make.
 */
export function githubBody(event: string, payload: unknown): string {
  const problems = webhookViolations(event, payload);
  if (problems.length)
    throw new TypeError(`a ${event} delivery GitHub would not send: ${problems.join('; ')}`);
  return JSON.stringify(payload);
}

function unknownEvent(r: () => number): { event: string; payload: Payload } {
  const pick = Math.floor(r() * 3);
  if (pick === 0) return { event: 'star', payload: example('star', 'created') };
  if (pick === 1) return { event: 'watch', payload: example('watch', 'started') };
  return { event: 'issues', payload: example('issues', 'opened') };
}

const WEIGHTS: Array<[DeliveryKind, number]> = [
  ['labeled', 24],
  ['labeled-pair', 4],
  ['labeled-long', 4],
  ['labeled-outsider', 4],
  ['labeled-fork', 3],
  ['labeled-other', 3],
  ['synchronize', 10],
  ['unlabeled', 5],
  ['closed', 3],
  ['comment-test', 8],
  ['comment-status', 3],
  ['comment-cancel', 3],
  ['comment-plain', 2],
  ['push', 5],
  ['workflow-job', 8],
  ['unknown-event', 7],
];

export interface PlanOptions {
  /** Total sends, duplicates included. */
  sends: number;
  seed: number;
  /** Controller processes the sends are spread over. */
  targets: number;
  prs: number;
  /** Share of sends that repeat an earlier delivery id (to another process). */
  duplicateRate?: number;
  /** Sends are shuffled within windows of this size, so related events arrive out of order. */
  shuffleWindow?: number;
  /** Delivery id prefix (unique per run). */
  prefix?: string;
}

export interface Plan {
  sends: PlannedDelivery[];
  uniqueIds: string[];
  /** Every PR's first commit: the fake GitHub serves these as the PRs' heads. */
  prHeads: Record<number, string>;
  /** Pairs of deliveries on the same PR sent in the opposite of their logical order. */
  outOfOrderPairs: number;
}

/** Builds and signs a plan of `sends` deliveries. */
export async function planDeliveries(o: PlanOptions): Promise<Plan> {
  const r = prng(o.seed);
  const dupRate = o.duplicateRate ?? 0.12;
  const unique = Math.round(o.sends / (1 + dupRate));
  const prefix = o.prefix ?? `load-${o.seed}`;
  const version = new Map<number, number>();
  const prHeads: Record<number, string> = {};
  for (let pr = 1; pr <= o.prs; pr++) {
    version.set(pr, 0);
    prHeads[pr] = shaOf(pr, 0);
  }
  const total = WEIGHTS.reduce((n, [, w]) => n + w, 0);
  const pickKind = (): DeliveryKind => {
    let x = r() * total;
    for (const [k, w] of WEIGHTS) {
      x -= w;
      if (x < 0) return k;
    }
    return 'labeled';
  };

  const logical: Array<Omit<PlannedDelivery, 'signature' | 'target' | 'duplicate'>> = [];
  for (let seq = 0; seq < unique; seq++) {
    const kind = pickKind();
    const pr = 1 + Math.floor(r() * o.prs);
    const sha = shaOf(pr, version.get(pr)!);
    const labels = ['spark-test'];
    let event = 'pull_request';
    let payload: Payload;
    switch (kind) {
      case 'labeled':
        payload = pullRequestEvent('labeled', pr, sha, { label: 'spark-test', labels });
        break;
      case 'labeled-pair':
        payload = pullRequestEvent('labeled', pr, sha, {
          label: 'spark-pair-test',
          labels: [...labels, 'spark-pair-test'],
        });
        break;
      case 'labeled-long':
        payload = pullRequestEvent('labeled', pr, sha, {
          label: 'spark-test-long',
          labels: [...labels, 'spark-test-long'],
        });
        break;
      case 'labeled-outsider':
        payload = pullRequestEvent('labeled', pr, sha, { label: 'spark-test', labels, sender: OUTSIDER });
        break;
      case 'labeled-fork':
        payload = pullRequestEvent('labeled', pr, sha, {
          label: 'spark-test',
          labels,
          headRepo: r() < 0.5 ? 'evil/Hello-World' : null,
        });
        break;
      case 'labeled-other':
        payload = pullRequestEvent('labeled', pr, sha, { label: 'documentation', labels });
        break;
      case 'synchronize': {
        const v = version.get(pr)! + 1;
        version.set(pr, v);
        payload = pullRequestEvent('synchronize', pr, shaOf(pr, v), { labels });
        break;
      }
      case 'unlabeled':
        payload = pullRequestEvent('unlabeled', pr, sha, { label: 'spark-test', labels: [] });
        break;
      case 'closed':
        payload = pullRequestEvent('closed', pr, sha, { labels });
        break;
      case 'comment-test':
        event = 'issue_comment';
        payload = comment(pr, r() < 0.2 ? 'Please run it.\n/spark test --long' : '/spark test');
        break;
      case 'comment-status':
        event = 'issue_comment';
        payload = comment(pr, '/spark status');
        break;
      case 'comment-cancel':
        event = 'issue_comment';
        payload = comment(pr, '/spark cancel');
        break;
      case 'comment-plain':
        event = 'issue_comment';
        payload = comment(pr, 'LGTM, thanks!');
        break;
      case 'push':
        event = 'push';
        payload = push(shaOf(100_000 + seq, 0));
        break;
      case 'workflow-job': {
        event = 'workflow_job';
        const actions = ['queued', 'in_progress', 'completed'] as const;
        payload = workflowJob(actions[Math.floor(r() * 3)]!, {
          rid: `r-${1 + Math.floor(r() * Math.max(1, unique / 3))}`,
          sha,
          // GitHub names the runner that took the job: here one that is not Spark's (a job on
          // one of ours that is not its admitted job is stopped: the lifecycle tests cover it)
          runner: r() < 0.5 ? null : `hosted-runner-${seq}`,
          conclusion: r() < 0.7 ? 'success' : 'failure',
        });
        break;
      }
      case 'unknown-event': {
        const u = unknownEvent(r);
        event = u.event;
        payload = u.payload;
        break;
      }
    }
    logical.push({
      seq,
      id: `${prefix}-${seq}`,
      event,
      kind,
      pr: kind === 'push' || kind === 'unknown-event' || kind === 'workflow-job' ? null : pr,
      body: githubBody(event, payload),
    });
  }

  // send order: the logical order shuffled within windows (GitHub does not promise order)
  const window = o.shuffleWindow ?? 24;
  const order = logical.slice();
  for (let start = 0; start < order.length; start += window) {
    for (let i = Math.min(order.length, start + window) - 1; i > start; i--) {
      const j = start + Math.floor(r() * (i - start + 1));
      [order[i], order[j]] = [order[j]!, order[i]!];
    }
  }
  const sends: PlannedDelivery[] = [];
  for (const [i, d] of order.entries()) {
    sends.push({ ...d, signature: '', target: i % o.targets, duplicate: false });
  }
  // redeliveries: the same id and body to another process, a little later (often while the
  // first send is still in flight)
  const dups = o.sends - unique;
  for (let k = 0; k < dups; k++) {
    const at = Math.floor(r() * sends.length);
    const src = sends[at]!;
    if (src.duplicate) {
      k--;
      continue;
    }
    const copy: PlannedDelivery = {
      ...src,
      duplicate: true,
      target: (src.target + 1 + Math.floor(r() * (o.targets - 1 || 1))) % o.targets,
    };
    sends.splice(Math.min(sends.length, at + 1 + Math.floor(r() * 8)), 0, copy);
  }
  await Promise.all(
    sends.map(async (s) => {
      s.signature = await sign(SECRET, s.body);
    }),
  );

  let outOfOrderPairs = 0;
  const lastSeqByPr = new Map<number, number>();
  for (const s of sends) {
    if (s.pr == null || s.duplicate) continue;
    const last = lastSeqByPr.get(s.pr);
    if (last != null && last > s.seq) outOfOrderPairs++;
    lastSeqByPr.set(s.pr, Math.max(last ?? -1, s.seq));
  }
  return { sends, uniqueIds: logical.map((d) => d.id), prHeads, outOfOrderPairs };
}

export interface SendResult {
  delivery: PlannedDelivery;
  status: number;
  json: Record<string, unknown> | null;
  ms: number;
}

/** POSTs one signed delivery to `url`/github/webhooks the way GitHub does. */
export async function sendDelivery(
  url: string,
  d: Pick<PlannedDelivery, 'id' | 'event' | 'body' | 'signature'>,
) {
  const t0 = performance.now();
  const res = await postOnce(
    `${url}/github/webhooks`,
    {
      'content-type': 'application/json',
      'user-agent': 'GitHub-Hookshot/load',
      'x-github-event': d.event,
      'x-github-delivery': d.id,
      'x-hub-signature-256': d.signature,
    },
    d.body,
  );
  const ms = performance.now() - t0;
  let json: Record<string, unknown> | null = null;
  try {
    json = JSON.parse(res.text) as Record<string, unknown>;
  } catch {
    json = null;
  }
  return { status: res.status, json, ms };
}

/** Sends every planned delivery with at most `concurrency` in flight; keeps the send order. */
export async function sendAll(
  sends: PlannedDelivery[],
  urls: string[],
  concurrency: number,
): Promise<SendResult[]> {
  const results: SendResult[] = new Array(sends.length);
  let next = 0;
  const worker = async () => {
    for (;;) {
      const i = next++;
      if (i >= sends.length) return;
      const d = sends[i]!;
      try {
        results[i] = { delivery: d, ...(await sendDelivery(urls[d.target % urls.length]!, d)) };
      } catch (e) {
        results[i] = { delivery: d, status: 0, json: { error: String(e) }, ms: 0 };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, sends.length) }, worker));
  return results;
}
