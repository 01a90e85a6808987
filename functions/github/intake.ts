import { and, eq, inArray, sql } from 'drizzle-orm';
import { ACTIVE_STATUSES, type Suite, type Topology } from '../../core/model.ts';
import type { Tx } from '../ledger/db.ts';
import type { ReservationRow } from '../ledger/ledger.ts';
import * as t from '../ledger/schema.ts';
import { renderRefusal } from './check-run.ts';
import { parseSparkCommand } from './commands.ts';
import { type GitHubMeta, patchMeta, readMeta } from './meta.ts';
import { enqueue, enqueueCheckSync } from './outbox.ts';
import {
  IssueCommentEvent,
  PullRequestEvent,
  PullRequestResource,
  PushEvent,
  WorkflowJobEvent,
} from './payloads.ts';
import type { GitHubService } from './service.ts';

/**
 * Turns verified webhook deliveries into ledger changes (DESIGN.md "GitHub integration").
 * GitHub calls (permission, PR lookup) happen before the write; then one ledger transaction
 * claims the delivery id and applies everything, so a redelivery changes nothing and a failure
 * half-way writes nothing.
 */

export interface Delivery {
  id: string;
  event: string;
}

export type IntakeResult = { result: string; duplicate?: boolean };

type RepoRow = typeof t.repositories.$inferSelect;

const OPEN_STATUSES = ['queued', ...ACTIVE_STATUSES] as const;

export async function enabledRepository(
  svc: GitHubService,
  fullName: string,
  tx?: Tx,
): Promise<RepoRow | null> {
  const rows = await (tx ?? svc.ledger.db)
    .select()
    .from(t.repositories)
    .where(
      sql`lower(${t.repositories.fullName}) = lower(${fullName}) AND ${t.repositories.disabledAt} IS NULL`,
    );
  return rows[0] ?? null;
}

/** Claims a delivery id inside the transaction; false when it was already processed. */
async function claimDelivery(tx: Tx, now: number, d: Delivery, action: string | null, result: string) {
  const rows = await tx
    .insert(t.webhookDeliveries)
    .values({ deliveryId: d.id, event: d.event, action, receivedAt: now, result })
    .onConflictDoNothing({ target: t.webhookDeliveries.deliveryId })
    .returning({ id: t.webhookDeliveries.deliveryId });
  return rows.length > 0;
}

async function setDeliveryResult(tx: Tx, d: Delivery, result: string) {
  await tx
    .update(t.webhookDeliveries)
    .set({ result: result.slice(0, 300) })
    .where(eq(t.webhookDeliveries.deliveryId, d.id));
}

export async function deliverySeen(svc: GitHubService, id: string): Promise<boolean> {
  const rows = await svc.ledger.db
    .select({ id: t.webhookDeliveries.deliveryId })
    .from(t.webhookDeliveries)
    .where(eq(t.webhookDeliveries.deliveryId, id));
  return rows.length > 0;
}

/** Records a delivery that needs nothing (unknown event/action, repository not enabled). */
async function noOp(
  svc: GitHubService,
  d: Delivery,
  action: string | null,
  result: string,
): Promise<IntakeResult> {
  const fresh = await svc.ledger.write((tx, now) => claimDelivery(tx, now, d, action, result));
  return fresh ? { result } : { result: 'duplicate delivery', duplicate: true };
}

interface Request {
  topology: Topology;
  suite: Suite;
  label: string | null;
}

function requestFromLabel(svc: GitHubService, label: string): Request | null {
  const l = svc.gh.labels;
  if (label === l.test) return { topology: 'single', suite: 'smoke', label };
  if (label === l.long) return { topology: 'single', suite: 'performance', label };
  if (label === l.pair) return { topology: 'pair', suite: 'smoke', label };
  return null;
}

/** Visible refusal: a neutral check run on the commit (when known) plus an audited event. */
async function refuse(
  svc: GitHubService,
  tx: Tx,
  now: number,
  d: Delivery,
  o: {
    repo: string;
    pr: number | null;
    headSha: string | null;
    installationId: number | null;
    sender: string;
    reason: string;
  },
) {
  if (o.headSha) {
    await enqueue(tx, now, {
      kind: 'refusal-check',
      key: `refusal:${d.id}`,
      payload: {
        repo: o.repo,
        headSha: o.headSha,
        installationId: o.installationId,
        view: renderRefusal(o.reason, o.sender),
      },
    });
  }
  await svc.ledger.record(tx, now, {
    subjectType: 'audit',
    subjectId: o.pr != null ? `${o.repo}#${o.pr}` : o.repo,
    type: 'github.refused',
    cause: o.reason,
    actor: `github:${o.sender}`,
    data: { delivery: d.id, event: d.event, headSha: o.headSha },
  });
}

async function openReservationsOfPr(
  q: Pick<Tx, 'select'>,
  repo: string,
  pr: number,
): Promise<ReservationRow[]> {
  return q
    .select()
    .from(t.reservations)
    .where(
      and(
        eq(t.reservations.repo, repo),
        eq(t.reservations.pr, pr),
        inArray(t.reservations.status, [...OPEN_STATUSES]),
      ),
    );
}

/** Queues a PR test unless the same commit/topology/suite is already queued or running. */
async function queuePrTest(
  svc: GitHubService,
  tx: Tx,
  now: number,
  changed: Set<string>,
  o: {
    repo: RepoRow;
    pr: number;
    headSha: string;
    sender: string;
    installationId: number | null;
    req: Request;
    trigger: 'label' | 'comment';
    deliveryId: string;
    labels: string[];
  },
): Promise<string> {
  const existing = (await openReservationsOfPr(tx, o.repo.fullName, o.pr)).find(
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
    workflow: o.repo.workflow ?? svc.gh.workflow,
    currentHeadSha: o.headSha,
    prOpen: true,
    labels: o.labels,
  };
  const r = await svc.ledger.createReservation(
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
  changed.add('reservation');
  return `queued ${r.id}`;
}

// ---------------------------------------------------------------------------- pull_request

async function onPullRequest(svc: GitHubService, d: Delivery, raw: unknown): Promise<IntakeResult> {
  const p = PullRequestEvent.parse(raw);
  const repoName = p.repository.full_name;
  const repo = await enabledRepository(svc, repoName);
  if (!repo) return noOp(svc, d, p.action, `ignored: ${repoName} is not enabled`);
  const pr = p.pull_request;
  const sender = p.sender.login;
  const installationId = p.installation?.id ?? repo.installationId;
  const labels = pr.labels.map((l) => l.name);
  const fork =
    pr.head.repo == null || pr.head.repo.full_name.toLowerCase() !== pr.base.repo.full_name.toLowerCase();

  if (p.action === 'labeled') {
    const req = p.label ? requestFromLabel(svc, p.label.name) : null;
    if (!req) return noOp(svc, d, p.action, 'ignored: not a Spark label');
    const auth = fork ? null : await svc.authorizer.authorize(repoName, sender, installationId);
    return svc.ledger.write(async (tx, now, changed) => {
      if (!(await claimDelivery(tx, now, d, p.action, 'processing')))
        return { result: 'duplicate delivery', duplicate: true };
      const refusal = fork
        ? `PR #${pr.number} comes from a fork (${pr.head.repo?.full_name ?? 'deleted repository'}); fork PRs never run on Spark hardware`
        : !auth!.allowed
          ? auth!.reason
          : pr.state !== 'open'
            ? `PR #${pr.number} is ${pr.state}; only open PRs are tested`
            : req.topology === 'pair' && !repo.pairEnabled
              ? `pair (distributed) tests are not enabled for ${repo.fullName}; an operator must enable them first`
              : null;
      let result: string;
      if (refusal) {
        await refuse(svc, tx, now, d, {
          repo: repoName,
          pr: pr.number,
          headSha: pr.head.sha,
          installationId,
          sender,
          reason: refusal,
        });
        result = `refused: ${refusal}`;
      } else {
        result = await queuePrTest(svc, tx, now, changed, {
          repo,
          pr: pr.number,
          headSha: pr.head.sha,
          sender,
          installationId,
          req,
          trigger: 'label',
          deliveryId: d.id,
          labels,
        });
      }
      await setDeliveryResult(tx, d, result);
      return { result };
    });
  }

  if (p.action === 'unlabeled' || p.action === 'closed') {
    const removed = p.action === 'unlabeled' ? p.label?.name : null;
    if (p.action === 'unlabeled' && !(removed && requestFromLabel(svc, removed)))
      return noOp(svc, d, p.action, 'ignored: not a Spark label');
    return svc.ledger.write(async (tx, now, changed) => {
      if (!(await claimDelivery(tx, now, d, p.action, 'processing')))
        return { result: 'duplicate delivery', duplicate: true };
      const open = await openReservationsOfPr(tx, repo.fullName, pr.number);
      const done: string[] = [];
      for (const r of open) {
        const meta = readMeta(r);
        if (!meta) continue;
        await patchMeta(tx, r, { labels, ...(p.action === 'closed' ? { prOpen: false } : {}) });
        const affected = p.action === 'closed' || (meta.trigger === 'label' && meta.label === removed);
        if (!affected) continue;
        const why =
          p.action === 'closed'
            ? `PR #${pr.number} closed by @${sender}`
            : `label "${removed}" removed by @${sender}`;
        if (r.status === 'queued') {
          await svc.ledger.cancelReservation(r.id, `github:${sender}`, why, tx);
          changed.add('reservation');
          done.push(`cancelled ${r.id}`);
        } else {
          // DESIGN.md: label removal / close cancels only queued work; active work finishes
          await svc.ledger.record(tx, now, {
            subjectType: 'reservation',
            subjectId: r.id,
            type: 'reservation.unwanted_while_active',
            cause: `${why}; active work finishes and reports the SHA it tested`,
            actor: `github:${sender}`,
          });
          done.push(`kept active ${r.id}`);
        }
      }
      const result = done.length ? done.join(', ') : 'nothing queued';
      await setDeliveryResult(tx, d, result);
      return { result };
    });
  }

  if (p.action === 'synchronize') return onSynchronize(svc, d, p, repo, { fork, labels, installationId });
  return noOp(svc, d, p.action, `ignored: pull_request.${p.action}`);
}

/**
 * A push to a PR branch (ADR 0003): queued work for the old SHA is superseded; the new SHA is
 * queued again only when the pusher is authorized, because nobody authorized has seen those
 * commits otherwise. Active work keeps running on the SHA it was admitted for.
 */
async function onSynchronize(
  svc: GitHubService,
  d: Delivery,
  p: PullRequestEvent,
  repo: RepoRow,
  o: { fork: boolean; labels: string[]; installationId: number | null },
): Promise<IntakeResult> {
  const pr = p.pull_request;
  const sender = p.sender.login;
  const newSha = pr.head.sha;
  const before = await openReservationsOfPr(svc.ledger.db, repo.fullName, pr.number);
  const labelled = o.labels.map((l) => requestFromLabel(svc, l)).filter((r): r is Request => r != null);
  const wants = before.some((r) => r.status === 'queued' && r.headSha !== newSha) || labelled.length > 0;
  const auth =
    wants && !o.fork ? await svc.authorizer.authorize(repo.fullName, sender, o.installationId) : null;
  return svc.ledger.write(async (tx, now, changed) => {
    if (!(await claimDelivery(tx, now, d, p.action, 'processing')))
      return { result: 'duplicate delivery', duplicate: true };
    const open = await openReservationsOfPr(tx, repo.fullName, pr.number);
    const requeue = new Map<string, Request>();
    for (const req of labelled) requeue.set(`${req.topology}/${req.suite}`, req);
    const out: string[] = [];
    for (const r of open) {
      const meta = readMeta(r);
      if (!meta) continue;
      await patchMeta(tx, r, { currentHeadSha: newSha, labels: o.labels });
      if (r.status === 'queued' && r.headSha !== newSha) {
        await svc.ledger.transitionReservation(
          tx,
          now,
          r,
          'superseded',
          `new commit ${newSha.slice(0, 7)} pushed by @${sender}`,
          `github:${sender}`,
        );
        changed.add('reservation');
        out.push(`superseded ${r.id}`);
        const k = `${r.topology}/${r.suite}`;
        if (!requeue.has(k))
          requeue.set(k, {
            topology: r.topology as Topology,
            suite: (r.suite ?? 'smoke') as Suite,
            label: meta.label ?? null,
          });
      }
    }
    if (requeue.size) {
      const refusal = o.fork
        ? `new commits on a fork PR are never queued`
        : !auth?.allowed
          ? `new commits pushed by @${sender} were not queued: ${auth?.reason ?? 'sender not authorized'}. A maintainer must re-apply the label or comment "/spark test" after reviewing them`
          : null;
      if (refusal) {
        await refuse(svc, tx, now, d, {
          repo: repo.fullName,
          pr: pr.number,
          headSha: newSha,
          installationId: o.installationId,
          sender,
          reason: refusal,
        });
        out.push('not requeued (sender not authorized)');
      } else {
        for (const req of requeue.values()) {
          if (req.topology === 'pair' && !repo.pairEnabled) continue;
          out.push(
            await queuePrTest(svc, tx, now, changed, {
              repo,
              pr: pr.number,
              headSha: newSha,
              sender,
              installationId: o.installationId,
              req,
              trigger: req.label ? 'label' : 'comment',
              deliveryId: d.id,
              labels: o.labels,
            }),
          );
        }
      }
    }
    const result = out.length ? out.join(', ') : 'nothing to supersede';
    await setDeliveryResult(tx, d, result);
    return { result };
  });
}

// ---------------------------------------------------------------------------- issue_comment

async function onIssueComment(svc: GitHubService, d: Delivery, raw: unknown): Promise<IntakeResult> {
  const p = IssueCommentEvent.parse(raw);
  if (p.action !== 'created') return noOp(svc, d, p.action, `ignored: issue_comment.${p.action}`);
  if (!p.issue.pull_request) return noOp(svc, d, p.action, 'ignored: comment on an issue, not a PR');
  const cmd = parseSparkCommand(p.comment.body);
  if (!cmd) return noOp(svc, d, p.action, 'ignored: no /spark command');
  // bots (including this App) never command Spark: no loops, no privilege by proxy
  if (p.sender.type === 'Bot') return noOp(svc, d, p.action, 'ignored: comment by a bot');
  const repoName = p.repository.full_name;
  const repo = await enabledRepository(svc, repoName);
  if (!repo) return noOp(svc, d, p.action, `ignored: ${repoName} is not enabled`);
  const sender = p.sender.login;
  const installationId = p.installation?.id ?? repo.installationId;
  const prNumber = p.issue.number;
  const res = await svc.client.request('GET', `/repos/${repoName}/pulls/${prNumber}`, { installationId });
  const pr = PullRequestResource.parse(res.data);
  const fork =
    pr.head.repo == null || pr.head.repo.full_name.toLowerCase() !== pr.base.repo.full_name.toLowerCase();
  const auth = fork ? null : await svc.authorizer.authorize(repoName, sender, installationId);
  const labels = pr.labels.map((l) => l.name);

  return svc.ledger.write(async (tx, now, changed) => {
    if (!(await claimDelivery(tx, now, d, p.action, 'processing')))
      return { result: 'duplicate delivery', duplicate: true };
    const refuseWith = async (reason: string) => {
      await refuse(svc, tx, now, d, {
        repo: repoName,
        pr: prNumber,
        headSha: pr.head.sha,
        installationId,
        sender,
        reason,
      });
      return `refused: ${reason}`;
    };
    let result: string;
    if (cmd.kind === 'invalid') result = await refuseWith(cmd.message);
    else if (fork)
      result = await refuseWith(`PR #${prNumber} comes from a fork; fork PRs never run on Spark hardware`);
    else if (!auth!.allowed) result = await refuseWith(auth!.reason);
    else if (pr.state !== 'open') result = await refuseWith(`PR #${prNumber} is ${pr.state}`);
    else if (cmd.kind === 'test') {
      const req: Request = {
        topology: cmd.pair ? 'pair' : 'single',
        suite: cmd.long ? 'performance' : 'smoke',
        label: null,
      };
      if (req.topology === 'pair' && !repo.pairEnabled) {
        result = await refuseWith(
          `pair (distributed) tests are not enabled for ${repo.fullName}; an operator must enable them first`,
        );
      } else {
        result = await queuePrTest(svc, tx, now, changed, {
          repo,
          pr: prNumber,
          headSha: pr.head.sha,
          sender,
          installationId,
          req,
          trigger: 'comment',
          deliveryId: d.id,
          labels,
        });
      }
    } else if (cmd.kind === 'cancel') {
      const out: string[] = [];
      for (const r of await openReservationsOfPr(tx, repo.fullName, prNumber)) {
        if (r.status === 'queued') {
          await svc.ledger.cancelReservation(r.id, `github:${sender}`, `/spark cancel by @${sender}`, tx);
          changed.add('reservation');
          out.push(`cancelled ${r.id}`);
        } else {
          await svc.ledger.record(tx, now, {
            subjectType: 'reservation',
            subjectId: r.id,
            type: 'reservation.unwanted_while_active',
            cause: `/spark cancel by @${sender}; active work finishes and reports the SHA it tested`,
            actor: `github:${sender}`,
          });
          out.push(`kept active ${r.id}`);
        }
      }
      result = out.length ? out.join(', ') : 'nothing queued to cancel';
    } else {
      const open = await openReservationsOfPr(tx, repo.fullName, prNumber);
      for (const r of open) await enqueueCheckSync(tx, now, r.id);
      if (!open.length) {
        await enqueue(tx, now, {
          kind: 'refusal-check',
          key: `status:${d.id}`,
          payload: {
            repo: repoName,
            headSha: pr.head.sha,
            installationId,
            view: {
              status: 'completed',
              conclusion: 'neutral',
              title: 'Spark status — nothing queued or running for this PR',
              summary: `Asked by @${sender}. Add the "${svc.gh.labels.test}" label or comment "/spark test" to queue a test.`,
            },
          },
        });
      }
      result = open.length
        ? `status refreshed for ${open.map((r) => r.id).join(', ')}`
        : 'status: nothing open';
    }
    await setDeliveryResult(tx, d, result);
    return { result };
  });
}

// ---------------------------------------------------------------------------- push

async function onPush(svc: GitHubService, d: Delivery, raw: unknown): Promise<IntakeResult> {
  const p = PushEvent.parse(raw);
  const repoName = p.repository.full_name;
  const repo = await enabledRepository(svc, repoName);
  if (!repo) return noOp(svc, d, null, `ignored: ${repoName} is not enabled`);
  const branch = p.repository.default_branch ?? repo.defaultBranch;
  if (p.ref !== `refs/heads/${branch}`) return noOp(svc, d, null, `ignored: push to ${p.ref}`);
  if (p.deleted || /^0+$/.test(p.after)) return noOp(svc, d, null, 'ignored: branch deleted');
  return svc.ledger.write(async (tx, now, changed) => {
    if (!(await claimDelivery(tx, now, d, null, 'processing')))
      return { result: 'duplicate delivery', duplicate: true };
    const out: string[] = [];
    const queued = await tx
      .select()
      .from(t.reservations)
      .where(
        and(
          eq(t.reservations.repo, repo.fullName),
          eq(t.reservations.kind, 'merge'),
          eq(t.reservations.status, 'queued'),
        ),
      );
    for (const r of queued) {
      if (r.headSha === p.after) continue;
      await svc.ledger.transitionReservation(
        tx,
        now,
        r,
        'superseded',
        `${branch} moved to ${p.after.slice(0, 7)}`,
        `github:${p.sender.login}`,
      );
      out.push(`superseded ${r.id}`);
    }
    if (!queued.some((r) => r.headSha === p.after)) {
      const meta: GitHubMeta = {
        installationId: p.installation?.id ?? repo.installationId,
        trigger: 'push',
        deliveryId: d.id,
        defaultBranch: branch,
        workflow: repo.workflow ?? svc.gh.workflow,
      };
      const r = await svc.ledger.createReservation(
        {
          kind: 'merge',
          topology: 'single',
          repo: repo.fullName,
          headSha: p.after,
          suite: 'smoke',
          requester: `github:${p.sender.login}`,
          meta: meta as unknown as Record<string, unknown>,
        },
        `github:${p.sender.login}`,
        tx,
      );
      out.push(`queued ${r.id}`);
    }
    changed.add('reservation');
    const result = out.join(', ');
    await setDeliveryResult(tx, d, result);
    return { result };
  });
}

// ---------------------------------------------------------------------------- workflow_job

const CONCLUSION_OUTCOME: Record<string, string> = {
  success: 'passed',
  failure: 'failed',
  cancelled: 'cancelled',
};

/**
 * Matches a job to its reservation by the unique reservation label, then checks repo, SHA and
 * runner name. A mismatch is an audited fault shown on the check run; it changes no state.
 */
async function onWorkflowJob(svc: GitHubService, d: Delivery, raw: unknown): Promise<IntakeResult> {
  const p = WorkflowJobEvent.parse(raw);
  const job = p.workflow_job;
  const label = job.labels.find((l) => /^spark-r-\d+$/.test(l));
  if (!label) return noOp(svc, d, p.action, 'ignored: job without a Spark reservation label');
  const rid = label.slice('spark-'.length);
  return svc.ledger.write(async (tx, now, changed) => {
    if (!(await claimDelivery(tx, now, d, p.action, 'processing')))
      return { result: 'duplicate delivery', duplicate: true };
    const r = await svc.ledger.getReservation(tx, rid);
    const finish = async (result: string) => {
      await setDeliveryResult(tx, d, result);
      return { result };
    };
    if (!r) {
      await svc.ledger.record(tx, now, {
        subjectType: 'audit',
        subjectId: p.repository.full_name,
        type: 'github.job_mismatch',
        cause: `workflow job ${job.id} asks for ${label} but no such reservation exists`,
        actor: 'github',
        data: { jobId: job.id, runId: job.run_id, headSha: job.head_sha },
      });
      return finish('fault: unknown reservation');
    }
    const handoffs = await tx.select().from(t.jitHandoffs).where(eq(t.jitHandoffs.reservationId, rid));
    const problems: string[] = [];
    if ((r.repo ?? '').toLowerCase() !== p.repository.full_name.toLowerCase())
      problems.push(`repository ${p.repository.full_name} ≠ ${r.repo}`);
    if (job.head_sha !== r.headSha)
      problems.push(`SHA ${job.head_sha.slice(0, 7)} ≠ admitted ${r.headSha?.slice(0, 7)}`);
    if (job.runner_name && !handoffs.some((h) => h.runnerName === job.runner_name))
      problems.push(`runner "${job.runner_name}" was not registered for ${rid}`);
    if (problems.length) {
      const fault = `workflow job ${job.id} (${p.action}) does not match ${rid}: ${problems.join('; ')}`;
      await patchMeta(tx, r, { fault });
      await svc.ledger.record(tx, now, {
        subjectType: 'reservation',
        subjectId: rid,
        type: 'reservation.job_mismatch',
        cause: fault,
        actor: 'github',
        data: { jobId: job.id, runId: job.run_id },
      });
      return finish(`fault: ${problems.join('; ')}`);
    }
    if (p.action === 'in_progress') {
      await patchMeta(tx, r, { jobPickedUpAt: now, jobUrl: job.html_url ?? null });
      if (r.status === 'preparing') {
        await svc.ledger.advanceReservation(
          rid,
          'running',
          `workflow job ${job.id} started on ${job.runner_name}`,
          'github',
          tx,
        );
        changed.add('reservation');
        return finish(`running ${rid}`);
      }
      return finish(`job started; ${rid} is ${r.status}`);
    }
    if (p.action === 'completed') {
      const active = ['allocated', 'preparing', 'running', 'releasing'].includes(r.status);
      if (!active) return finish(`job completed; ${rid} already ${r.status}`);
      const reported = CONCLUSION_OUTCOME[job.conclusion ?? ''] ?? 'failed';
      // a failure is sticky: a late success from the healthy half of a failed pair must not
      // turn the reservation's result into a pass
      const outcome = r.outcome === 'failed' ? 'failed' : reported;
      await tx.update(t.reservations).set({ outcome, updatedAt: now }).where(eq(t.reservations.id, rid));
      await svc.ledger.record(tx, now, {
        subjectType: 'reservation',
        subjectId: rid,
        type: 'reservation.job_completed',
        cause: `workflow job ${job.id} completed: ${job.conclusion ?? 'no conclusion'}`,
        actor: 'github',
        data: { outcome, jobId: job.id, conclusion: job.conclusion },
      });
      return finish(`${rid} outcome ${outcome}`);
    }
    return finish(`ignored: workflow_job.${p.action}`);
  });
}

export const intakeHandlers: Record<
  string,
  (svc: GitHubService, d: Delivery, raw: unknown) => Promise<IntakeResult>
> = {
  pull_request: onPullRequest,
  issue_comment: onIssueComment,
  push: onPush,
  workflow_job: onWorkflowJob,
};

/** Events with no handler still count as delivered (2xx, no change). */
export async function ignoreDelivery(
  svc: GitHubService,
  d: Delivery,
  action: string | null,
): Promise<IntakeResult> {
  return noOp(svc, d, action, `ignored: ${d.event}`);
}
