import { enqueue, enqueueCheckSync } from '../../ledger/outbox.ts';
import { enabledRepository } from '../../ledger/queries.ts';
import { cancelReservation, noteReservation, openReservationsOfPr } from '../../ledger/reservations.ts';
import { STATUS_CHECK_NAME } from '../check-run.ts';
import { parseSparkCommand } from '../commands.ts';
import { IssueCommentEvent, PullRequestResource } from '../payloads.ts';
import type { GitHubService } from '../service.ts';
import { type Delivery, type IntakeResult, noOp, withDelivery } from './delivery.ts';
import { commandRefusal, isForkPr } from './policy.ts';
import { queuePrTest, refuse, type TestRequest } from './shared.ts';

/** `issue_comment` on a PR: `/spark test [--pair] [--long]`, `/spark cancel`, `/spark status`. */
export async function onIssueComment(svc: GitHubService, d: Delivery, raw: unknown): Promise<IntakeResult> {
  const p = IssueCommentEvent.parse(raw);
  if (p.action !== 'created') return noOp(svc, d, p.action, `ignored: issue_comment.${p.action}`);
  if (!p.issue.pull_request) return noOp(svc, d, p.action, 'ignored: comment on an issue, not a PR');
  const cmd = parseSparkCommand(p.comment.body);
  if (!cmd) return noOp(svc, d, p.action, 'ignored: no /spark command');
  // bots (including this App) never command Spark: no loops, no privilege by proxy
  if (p.sender.type === 'Bot') return noOp(svc, d, p.action, 'ignored: comment by a bot');
  const repoName = p.repository.full_name;
  const repo = await enabledRepository(svc.ledger, repoName);
  if (!repo) return noOp(svc, d, p.action, `ignored: ${repoName} is not enabled`);
  const sender = p.sender.login;
  const installationId = p.installation?.id ?? repo.installationId;
  const prNumber = p.issue.number;
  const res = await svc.client.request('GET', `/repos/${repoName}/pulls/${prNumber}`, { installationId });
  const pr = PullRequestResource.parse(res.data);
  const auth = isForkPr(pr) ? null : await svc.authorizer.authorize(repoName, sender, installationId);
  const labels = pr.labels.map((l) => l.name);

  return withDelivery(svc, d, p.action, async (tx, now) => {
    const refuseWith = (reason: string) =>
      refuse(svc, tx, now, d, {
        repo: repoName,
        pr: prNumber,
        headSha: pr.head.sha,
        installationId,
        sender,
        reason,
      });
    const req: TestRequest | null =
      cmd.kind === 'test'
        ? { topology: cmd.pair ? 'pair' : 'single', suite: cmd.long ? 'performance' : 'smoke', label: null }
        : null;
    const refusal = commandRefusal({
      pr: { ...pr, number: prNumber },
      auth,
      command:
        cmd.kind === 'invalid' ? cmd : req ? { kind: 'test', topology: req.topology } : { kind: 'other' },
      repo,
    });
    if (refusal) return refuseWith(refusal);
    if (req) {
      return queuePrTest(svc, tx, now, {
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
    const open = await openReservationsOfPr(svc.ledger, tx, repo.fullName, prNumber);
    if (cmd.kind === 'cancel') {
      const out: string[] = [];
      for (const r of open) {
        if (r.status === 'queued') {
          await cancelReservation(svc.ledger, r.id, `github:${sender}`, `/spark cancel by @${sender}`, tx);
          out.push(`cancelled ${r.id}`);
        } else {
          await noteReservation(
            svc.ledger,
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
        key: `status:${d.id}`,
        payload: {
          repo: repoName,
          headSha: pr.head.sha,
          installationId,
          view: {
            name: STATUS_CHECK_NAME,
            status: 'completed',
            conclusion: 'neutral',
            title: 'Spark status — nothing queued or running for this PR',
            summary: `Asked by @${sender}. Add the "${svc.gh.labels.test}" label or comment "/spark test" to queue a test.`,
          },
        },
      });
    }
    return open.length ? `status refreshed for ${open.map((r) => r.id).join(', ')}` : 'status: nothing open';
  });
}
