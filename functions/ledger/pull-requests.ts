import type { Suite, Topology } from '../../core/model.ts';
import type { Tx } from './db.ts';
import { recordRefusal } from './github.ts';
import { type GitHubMeta, patchMeta, readMeta } from './github-meta.ts';
import { enqueue, enqueueCheckSync } from './outbox.ts';
import {
  cancelReservation,
  createReservation,
  noteReservation,
  openReservationsOfPr,
  supersedeQueued,
} from './reservations.ts';
import type { RepositoryRow } from './rows.ts';
import type { LedgerStore } from './store.ts';

/**
 * The pull-request commands: each webhook event's whole effect on the ledger is one of these,
 * run in the delivery's transaction after the GitHub part verified the delivery and applied its
 * policy (docs/adr/0220-one-ledger-front-door.md). Each returns the delivery's result in words.
 * Their GitHub outbox rows (check sync, refusal check) are written in the same transaction, by the
 * commands they run and by the ledger's GitHub effects (`github-effects.ts`).
 */

/** What a label or `/spark test` asks for. */
export interface TestRequest {
  topology: Topology;
  suite: Suite;
  label: string | null;
}

/** A refusal the GitHub part decided and rendered: written by {@link recordRefusal}. */
export type PrRefusal = Omit<Parameters<typeof recordRefusal>[3], 'headSha' | 'pr' | 'repo'>;

/** The pull request and who acted on it, as the delivery names them. */
export interface PrSubject {
  repo: RepositoryRow;
  pr: number;
  sender: string;
  installationId: number | null;
  deliveryId: string;
  /** Labels on the PR as of this delivery. */
  labels: string[];
  /** The workflow dispatched when the repository names none (the GitHub settings' default). */
  workflow: string;
}

/** The refusal's result in words, as the intake reports it. */
async function refuse(
  s: LedgerStore,
  tx: Tx,
  now: number,
  at: { repo: string; pr: number | null; headSha: string | null },
  refusal: PrRefusal,
): Promise<string> {
  const written = await recordRefusal(s, tx, now, { ...refusal, ...at });
  return written ? `refused: ${refusal.reason}` : `refused (throttled, nothing written): ${refusal.reason}`;
}

/**
 * Records a refusal the GitHub part decided: a Spark label, a `/spark` command, a push to a PR or
 * to the default branch.
 */
export function refuseGitHubRequest(
  s: LedgerStore,
  tx: Tx,
  now: number,
  at: { repo: string; pr: number | null; headSha: string | null },
  refusal: PrRefusal,
): Promise<string> {
  return refuse(s, tx, now, at, refusal);
}

/** Queues a PR test unless the same commit/topology/suite is already queued or running. */
export async function queuePullRequestTest(
  s: LedgerStore,
  tx: Tx,
  now: number,
  o: PrSubject & { headSha: string; req: TestRequest; trigger: 'label' | 'comment' },
): Promise<string> {
  const existing = (await openReservationsOfPr(s, tx, o.repo.fullName, o.pr)).find(
    (r) => r.headSha === o.headSha && r.topology === o.req.topology && r.suite === o.req.suite,
  );
  if (existing) {
    await enqueueCheckSync(tx, now, existing.id);
    return `already ${existing.status} as ${existing.id}`;
  }
  const meta: GitHubMeta = {
    installationId: o.installationId ?? o.repo.installationId,
    trigger: o.trigger,
    label: o.req.label,
    deliveryId: o.deliveryId,
    defaultBranch: o.repo.defaultBranch,
    workflow: o.repo.workflow ?? o.workflow,
    currentHeadSha: o.headSha,
    prOpen: true,
    labels: o.labels,
  };
  const r = await createReservation(
    s,
    {
      kind: 'manual',
      topology: o.req.topology,
      repo: o.repo.fullName,
      pr: o.pr,
      headSha: o.headSha,
      suite: o.req.suite,
      requester: `github:${o.sender}`,
      meta: meta as unknown as Record<string, unknown>,
    },
    `github:${o.sender}`,
    tx,
  );
  return `queued ${r.id}`;
}

/** A Spark label on a PR: the refusal the policy decided, or the test queued (once per commit). */
export function labelPullRequest(
  s: LedgerStore,
  tx: Tx,
  now: number,
  o: PrSubject & { headSha: string; req: TestRequest; refusal: PrRefusal | null },
): Promise<string> {
  if (o.refusal)
    return refuse(s, tx, now, { repo: o.repo.fullName, pr: o.pr, headSha: o.headSha }, o.refusal);
  return queuePullRequestTest(s, tx, now, { ...o, trigger: 'label' });
}

/**
 * A Spark label removed (`removed`) or the PR closed (`removed` null): the PR's GitHub work
 * remembers the labels (and that the PR closed); affected queued work is cancelled, affected active
 * work is only noted — it finishes and reports the SHA it tested.
 */
export async function withdrawPullRequest(
  s: LedgerStore,
  tx: Tx,
  o: Pick<PrSubject, 'repo' | 'pr' | 'sender' | 'labels'> & { removed: string | null },
): Promise<string> {
  const closed = o.removed === null;
  const open = await openReservationsOfPr(s, tx, o.repo.fullName, o.pr);
  const done: string[] = [];
  for (const r of open) {
    const meta = readMeta(r);
    if (!meta) continue;
    await patchMeta(tx, r, { labels: o.labels, ...(closed ? { prOpen: false } : {}) });
    const affected = closed || (meta.trigger === 'label' && meta.label === o.removed);
    if (!affected) continue;
    const why = closed
      ? `PR #${o.pr} closed by @${o.sender}`
      : `label "${o.removed}" removed by @${o.sender}`;
    if (r.status === 'queued') {
      await cancelReservation(s, r.id, `github:${o.sender}`, why, tx);
      done.push(`cancelled ${r.id}`);
    } else {
      // label removal / close cancels only queued work; active work finishes
      await noteReservation(
        s,
        tx,
        r,
        'reservation.unwanted_while_active',
        `${why}; active work finishes and reports the SHA it tested`,
        `github:${o.sender}`,
      );
      done.push(`kept active ${r.id}`);
    }
  }
  return done.length ? done.join(', ') : 'nothing queued';
}

/** A Spark label removed from a PR: {@link withdrawPullRequest} for the work that label asked for. */
export function unlabelPullRequest(
  s: LedgerStore,
  tx: Tx,
  o: Pick<PrSubject, 'repo' | 'pr' | 'sender' | 'labels'> & { removed: string },
): Promise<string> {
  return withdrawPullRequest(s, tx, o);
}

/** A PR closed: {@link withdrawPullRequest} for all its work. */
export function closePullRequest(
  s: LedgerStore,
  tx: Tx,
  o: Pick<PrSubject, 'repo' | 'pr' | 'sender' | 'labels'>,
): Promise<string> {
  return withdrawPullRequest(s, tx, { ...o, removed: null });
}

/**
 * A push to a PR branch (docs/adr/0003-push-policy.md): queued work for the old SHA is superseded;
 * the new SHA is queued again (what the labels ask for, and what was superseded) only when the
 * pusher is authorized — `refusal`, decided by the policy before, is recorded instead when there
 * is anything to queue. Active work keeps running on the SHA it was admitted for.
 */
export async function pushToPullRequest(
  s: LedgerStore,
  tx: Tx,
  now: number,
  o: PrSubject & { newSha: string; labelled: TestRequest[]; refusal: PrRefusal | null },
): Promise<string> {
  const { repo, pr, sender, newSha } = o;
  const open = await openReservationsOfPr(s, tx, repo.fullName, pr);
  for (const r of open) if (readMeta(r)) await patchMeta(tx, r, { currentHeadSha: newSha, labels: o.labels });
  const requeue = new Map<string, TestRequest>();
  for (const req of o.labelled) requeue.set(`${req.topology}/${req.suite}`, req);
  const out: string[] = [];
  const superseded = await supersedeQueued(
    s,
    { repo: repo.fullName, pr },
    newSha,
    `github:${sender}`,
    `new commit ${newSha.slice(0, 7)} pushed by @${sender}`,
    tx,
  );
  for (const r of superseded) {
    out.push(`superseded ${r.id}`);
    const meta = readMeta(r);
    const k = `${r.topology}/${r.suite}`;
    // only work this front door created is queued again (sparkctl work has no GitHub meta)
    if (meta && !requeue.has(k))
      requeue.set(k, {
        topology: r.topology as Topology,
        suite: (r.suite ?? 'smoke') as Suite,
        label: meta.label ?? null,
      });
  }
  if (requeue.size) {
    if (o.refusal) {
      await refuse(s, tx, now, { repo: repo.fullName, pr, headSha: newSha }, o.refusal);
      out.push('not requeued (sender not authorized)');
    } else {
      for (const req of requeue.values()) {
        if (req.topology === 'pair' && !repo.pairEnabled) continue;
        out.push(
          await queuePullRequestTest(s, tx, now, {
            ...o,
            headSha: newSha,
            req,
            trigger: req.label ? 'label' : 'comment',
          }),
        );
      }
    }
  }
  return out.length ? out.join(', ') : 'nothing to supersede';
}

/** What a `/spark` comment asks for, once the GitHub part parsed it. */
export type PrComment =
  | { kind: 'test'; req: TestRequest }
  | { kind: 'cancel' }
  /** `view`: the check run to show when nothing is open for the PR (rendered by the GitHub part). */
  | { kind: 'status'; view: Record<string, unknown> };

/**
 * A `/spark` comment on a PR: the policy's refusal; `test` queues the test (once per commit);
 * `cancel` cancels queued work and notes active work; `status` re-renders each open check, or
 * shows `view` when nothing is open.
 */
export async function commentOnPullRequest(
  s: LedgerStore,
  tx: Tx,
  now: number,
  o: PrSubject & { headSha: string; command: PrComment; refusal: PrRefusal | null },
): Promise<string> {
  const { command, sender } = o;
  if (o.refusal)
    return refuse(s, tx, now, { repo: o.repo.fullName, pr: o.pr, headSha: o.headSha }, o.refusal);
  if (command.kind === 'test')
    return queuePullRequestTest(s, tx, now, { ...o, req: command.req, trigger: 'comment' });
  const open = await openReservationsOfPr(s, tx, o.repo.fullName, o.pr);
  if (command.kind === 'cancel') {
    const out: string[] = [];
    for (const r of open) {
      if (r.status === 'queued') {
        await cancelReservation(s, r.id, `github:${sender}`, `/spark cancel by @${sender}`, tx);
        out.push(`cancelled ${r.id}`);
      } else {
        await noteReservation(
          s,
          tx,
          r,
          'reservation.unwanted_while_active',
          `/spark cancel by @${sender}; active work finishes and reports the SHA it tested`,
          `github:${sender}`,
        );
        out.push(`kept active ${r.id}`);
      }
    }
    return out.length ? out.join(', ') : 'nothing queued to cancel';
  }
  for (const r of open) await enqueueCheckSync(tx, now, r.id);
  if (!open.length) {
    await enqueue(tx, now, {
      kind: 'refusal-check',
      key: `status:${o.deliveryId}`,
      payload: {
        repo: o.repo.fullName,
        headSha: o.headSha,
        installationId: o.installationId,
        view: command.view,
      },
    });
  }
  return open.length ? `status refreshed for ${open.map((r) => r.id).join(', ')}` : 'status: nothing open';
}
