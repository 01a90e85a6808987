import type { Suite, Topology } from '../../../core/model.ts';
import type { RepositoryRow } from '../../ledger/ledger.ts';
import { enabledRepository } from '../../ledger/queries.ts';
import {
  cancelReservation,
  noteReservation,
  openReservationsOfPr,
  supersedeQueued,
} from '../../ledger/reservations.ts';
import { patchMeta, readMeta } from '../meta.ts';
import { PullRequestEvent } from '../payloads.ts';
import type { GitHubService } from '../service.ts';
import { type Delivery, type IntakeResult, noOp, withDelivery } from './delivery.ts';
import { isForkPr, pushRefusal, refusalFor } from './policy.ts';
import { queuePrTest, refuse, requestFromLabel, type TestRequest } from './shared.ts';

/**
 * `pull_request`: a Spark label queues a test; removing it or closing the PR cancels only queued
 * work (active work finishes and reports the SHA it tested); a push supersedes queued work.
 */
export async function onPullRequest(svc: GitHubService, d: Delivery, raw: unknown): Promise<IntakeResult> {
  const p = PullRequestEvent.parse(raw);
  const repoName = p.repository.full_name;
  const repo = await enabledRepository(svc.ledger, repoName);
  if (!repo) return noOp(svc, d, p.action, `ignored: ${repoName} is not enabled`);
  const pr = p.pull_request;
  const sender = p.sender.login;
  const installationId = p.installation?.id ?? repo.installationId;
  const labels = pr.labels.map((l) => l.name);
  const fork = isForkPr(pr);

  if (p.action === 'labeled') {
    const req = p.label ? requestFromLabel(svc, p.label.name) : null;
    if (!req) return noOp(svc, d, p.action, 'ignored: not a Spark label');
    const auth = fork ? null : await svc.authorizer.authorize(repoName, sender, installationId);
    return withDelivery(svc, d, p.action, async (tx, now) => {
      const refusal = refusalFor({ pr, auth, topology: req.topology, repo });
      if (refusal) {
        return refuse(svc, tx, now, d, {
          repo: repoName,
          pr: pr.number,
          headSha: pr.head.sha,
          installationId,
          sender,
          reason: refusal,
        });
      }
      return queuePrTest(svc, tx, now, {
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
    });
  }

  if (p.action === 'unlabeled' || p.action === 'closed') {
    const removed = p.action === 'unlabeled' ? p.label?.name : null;
    if (p.action === 'unlabeled' && !(removed && requestFromLabel(svc, removed)))
      return noOp(svc, d, p.action, 'ignored: not a Spark label');
    return withDelivery(svc, d, p.action, async (tx) => {
      const open = await openReservationsOfPr(svc.ledger, tx, repo.fullName, pr.number);
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
          await cancelReservation(svc.ledger, r.id, `github:${sender}`, why, tx);
          done.push(`cancelled ${r.id}`);
        } else {
          // DESIGN.md: label removal / close cancels only queued work; active work finishes
          await noteReservation(
            svc.ledger,
            tx,
            r,
            'reservation.unwanted_while_active',
            `${why}; active work finishes and reports the SHA it tested`,
            `github:${sender}`,
          );
          done.push(`kept active ${r.id}`);
        }
      }
      return done.length ? done.join(', ') : 'nothing queued';
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
  repo: RepositoryRow,
  o: { fork: boolean; labels: string[]; installationId: number | null },
): Promise<IntakeResult> {
  const pr = p.pull_request;
  const sender = p.sender.login;
  const newSha = pr.head.sha;
  const before = await openReservationsOfPr(svc.ledger, undefined, repo.fullName, pr.number);
  const labelled = o.labels.map((l) => requestFromLabel(svc, l)).filter((r): r is TestRequest => r != null);
  const wants = before.some((r) => r.status === 'queued' && r.headSha !== newSha) || labelled.length > 0;
  const auth =
    wants && !o.fork ? await svc.authorizer.authorize(repo.fullName, sender, o.installationId) : null;
  return withDelivery(svc, d, p.action, async (tx, now) => {
    const open = await openReservationsOfPr(svc.ledger, tx, repo.fullName, pr.number);
    for (const r of open)
      if (readMeta(r)) await patchMeta(tx, r, { currentHeadSha: newSha, labels: o.labels });
    const requeue = new Map<string, TestRequest>();
    for (const req of labelled) requeue.set(`${req.topology}/${req.suite}`, req);
    const out: string[] = [];
    const superseded = await supersedeQueued(
      svc.ledger,
      { repo: repo.fullName, pr: pr.number },
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
      const refusal = pushRefusal({ fork: o.fork, auth, sender });
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
            await queuePrTest(svc, tx, now, {
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
    return out.length ? out.join(', ') : 'nothing to supersede';
  });
}
