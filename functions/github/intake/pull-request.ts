import type { RepositoryRow } from '../../ledger/ledger.ts';
import { PullRequestEvent } from '../payloads.ts';
import type { GitHubService } from '../service.ts';
import { type Delivery, type IntakeResult, noOp, withDelivery } from './delivery.ts';
import { isForkPr, pushRefusal, refusalFor } from './policy.ts';
import { prSubject, refusalOf, requestFromLabel, type TestRequest } from './shared.ts';

/**
 * `pull_request`: a Spark label queues a test; removing it or closing the PR cancels only queued
 * work (active work finishes and reports the SHA it tested); a push supersedes queued work.
 */
export async function onPullRequest(svc: GitHubService, d: Delivery, raw: unknown): Promise<IntakeResult> {
  const p = PullRequestEvent.parse(raw);
  const repoName = p.repository.full_name;
  const repo = await svc.ledger.enabledRepository(repoName);
  if (!repo) return noOp(svc, d, p.action, `ignored: ${repoName} is not enabled`);
  const pr = p.pull_request;
  const sender = p.sender.login;
  const installationId = p.installation?.id ?? repo.installationId;
  const labels = pr.labels.map((l) => l.name);
  const fork = isForkPr(pr);

  const subject = prSubject(svc, d, { repo, pr: pr.number, sender, installationId, labels });

  if (p.action === 'labeled') {
    const req = p.label ? requestFromLabel(svc, p.label.name) : null;
    if (!req) return noOp(svc, d, p.action, 'ignored: not a Spark label');
    const auth = fork ? null : await svc.authorizer.authorize(repoName, sender, installationId);
    return withDelivery(svc, d, p.action, (tx, now) => {
      const reason = refusalFor({ pr, auth, topology: req.topology, repo });
      const refusal = reason ? refusalOf(d, { installationId, sender, reason }) : null;
      return svc.ledger.labelPullRequest(tx, now, { ...subject, headSha: pr.head.sha, req, refusal });
    });
  }

  if (p.action === 'unlabeled') {
    const removed = p.label?.name;
    if (!(removed && requestFromLabel(svc, removed)))
      return noOp(svc, d, p.action, 'ignored: not a Spark label');
    return withDelivery(svc, d, p.action, (tx) => svc.ledger.unlabelPullRequest(tx, { ...subject, removed }));
  }
  if (p.action === 'closed')
    return withDelivery(svc, d, p.action, (tx) => svc.ledger.closePullRequest(tx, subject));

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
  const before = await svc.ledger.github.openReservationsOfPr(repo.fullName, pr.number);
  const labelled = o.labels.map((l) => requestFromLabel(svc, l)).filter((r): r is TestRequest => r != null);
  const wants = before.some((r) => r.status === 'queued' && r.headSha !== newSha) || labelled.length > 0;
  const auth =
    wants && !o.fork ? await svc.authorizer.authorize(repo.fullName, sender, o.installationId) : null;
  const reason = pushRefusal({ fork: o.fork, auth, sender });
  const refusal = reason ? refusalOf(d, { installationId: o.installationId, sender, reason }) : null;
  const subject = prSubject(svc, d, {
    repo,
    pr: pr.number,
    sender,
    installationId: o.installationId,
    labels: o.labels,
  });
  return withDelivery(svc, d, p.action, (tx, now) =>
    svc.ledger.pushToPullRequest(tx, now, { ...subject, newSha, labelled, refusal }),
  );
}
