import type { PrComment } from '../../ledger/ledger.ts';
import { STATUS_CHECK_NAME } from '../check-run.ts';
import { parseSparkCommand } from '../commands.ts';
import { IssueCommentEvent, PullRequestResource } from '../payloads.ts';
import type { GitHubService } from '../service.ts';
import { type Delivery, type IntakeResult, noOp, withDelivery } from './delivery.ts';
import { commandRefusal, isForkPr } from './policy.ts';
import { prSubject, refusalOf, type TestRequest } from './shared.ts';

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
  const repo = await svc.ledger.enabledRepository(repoName);
  if (!repo) return noOp(svc, d, p.action, `ignored: ${repoName} is not enabled`);
  const sender = p.sender.login;
  const installationId = p.installation?.id ?? repo.installationId;
  const prNumber = p.issue.number;
  const res = await svc.client.request('GET', `/repos/${repoName}/pulls/${prNumber}`, { installationId });
  const pr = PullRequestResource.parse(res.data);
  const auth = isForkPr(pr) ? null : await svc.authorizer.authorize(repoName, sender, installationId);
  const labels = pr.labels.map((l) => l.name);

  const req: TestRequest | null =
    cmd.kind === 'test'
      ? { topology: cmd.pair ? 'pair' : 'single', suite: cmd.long ? 'performance' : 'smoke', label: null }
      : null;
  const reason = commandRefusal({
    pr: { ...pr, number: prNumber },
    auth,
    command:
      cmd.kind === 'invalid' ? cmd : req ? { kind: 'test', topology: req.topology } : { kind: 'other' },
    repo,
  });
  const refusal = reason ? refusalOf(d, { installationId, sender, reason }) : null;
  const command: PrComment = req
    ? { kind: 'test', req }
    : cmd.kind === 'cancel'
      ? { kind: 'cancel' }
      : {
          kind: 'status',
          view: {
            name: STATUS_CHECK_NAME,
            status: 'completed',
            conclusion: 'neutral',
            title: 'Spark status — nothing queued or running for this PR',
            summary: `Asked by @${sender}. Add the "${svc.gh.labels.test}" label or comment "/spark test" to queue a test.`,
          },
        };
  const subject = prSubject(svc, d, { repo, pr: prNumber, sender, installationId, labels });
  return withDelivery(svc, d, p.action, (tx, now) =>
    svc.ledger.commentOnPullRequest(tx, now, { ...subject, headSha: pr.head.sha, command, refusal }),
  );
}
