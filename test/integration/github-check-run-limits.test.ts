import { describe, expect, it } from 'vitest';
import { MAX_CHECK_RUN_SUMMARY, renderCheckRun } from '../../functions/github/check-run.ts';
import { patchMeta } from '../../functions/github/meta.ts';
import { enqueueCheckSync } from '../../functions/ledger/outbox.ts';
import { example } from '../fake-github/harness.ts';
import { startHarnessFor } from '../fake-github/harness-for-test.ts';

/**
 * GitHub refuses a check run whose `output.summary` is longer than 65535 characters (`maxLength`
 * in GitHub's description of "Create a check run" / "Update a check run"; GitHub answers 422
 * "Invalid request. Only 65535 characters are allowed; … were supplied."). Text that reaches a
 * summary from outside (a fault naming a runner from a webhook, a reason) is not bounded at
 * its source, so the controller cuts the summary itself: a check run must never be refused for
 * its length and left showing an old state.
 */

const REPO = 'Codertocat/Hello-World';
const SHA = 'ec26c3e57ca3a959ca5aad62de7213c562f8c821';

describe('check-run summary length (GitHub: at most 65535 characters)', () => {
  it('a fault longer than the limit still updates the check run, cut and marked', async (ctx) => {
    const h = await startHarnessFor(ctx);
    const ex = example('pull_request', 'labeled');
    h.gh.addRepo(REPO, {
      installationId: ex.installation.id,
      collaborators: { Codertocat: 'maintain' },
      pulls: { 2: { state: 'open', headSha: SHA, headRepo: REPO, labels: ['spark-test'] } },
    });
    for (const host of h.c.ledger.config.hosts) await h.c.ledger.setManaged(host.id, true, 'test');
    expect((await h.enable(REPO)).status).toBe(200);
    const p = example('pull_request', 'labeled');
    p.label.name = 'spark-test';
    p.number = 2;
    p.pull_request.number = 2;
    p.pull_request.head.sha = SHA;
    p.pull_request.labels = [{ ...p.label }];
    expect((await (await h.deliver('pull_request', p)).json()).result).toBe('queued r-1');
    await h.drain();
    await h.until('the first check run', () => h.gh.checkRuns.find((c) => c.external_id === 'r-1'));

    // a fault naming a 70,000-character runner (GitHub's webhook description bounds runner_name
    // nowhere), as intake/workflow-job.ts records one
    const fault = `workflow job 7 (in_progress) runs on runner "${'r'.repeat(70_000)}", which was not registered for r-1`;
    await h.c.ledger.write(async (tx, now) => {
      const r = (await h.c.ledger.getReservation(tx, 'r-1'))!;
      await patchMeta(tx, r, { fault });
      await enqueueCheckSync(tx, now, 'r-1');
    });
    await h.drain();
    const run = await h.until('the check run updated with the fault', () =>
      h.gh.checkRuns.find((c) => c.external_id === 'r-1' && (c.output.summary ?? '').includes('**Fault:**')),
    );
    const summary = run.output.summary!;
    expect([...summary].length).toBeLessThanOrEqual(MAX_CHECK_RUN_SUMMARY);
    expect(summary).toMatch(/^Waiting: /);
    expect(summary.endsWith('… (cut: GitHub shows at most 65535 characters)')).toBe(true);
    // no 422 and nothing the description rejects (the harness's close checks the rest)
    expect(h.gh.refused).toEqual([]);
  });

  it('renders at most 65535 characters (code points) without splitting a surrogate pair', () => {
    const row = {
      id: 'r-1',
      seq: 1,
      kind: 'manual',
      priority: 80,
      topology: 'single',
      pool: 'spark',
      targetHost: null,
      repo: REPO,
      pr: 2,
      headSha: SHA,
      suite: 'smoke',
      requester: 'github:alice',
      status: 'queued',
      reason: '🚀'.repeat(70_000),
      position: 1,
      waitCode: 'hosts-busy',
      outcome: null,
      createdAt: 0,
      updatedAt: 0,
      queueDeadline: 0,
      grantedAt: null,
      endedAt: null,
      ttlS: null,
      attempt: 0,
      retryNotBefore: null,
      checkRunId: null,
      receiptJson: null,
      metaJson: null,
    } as const;
    const view = renderCheckRun({ ...row }, { hosts: [], keptHost: null });
    const chars = [...view.summary];
    expect(chars.length).toBe(MAX_CHECK_RUN_SUMMARY);
    expect(view.summary).not.toMatch(/[\ud800-\udbff](?![\udc00-\udfff])/);
    // 40,000 of them are 80,000 UTF-16 units but 40,000 characters: within the limit, untouched
    const wide = renderCheckRun({ ...row, reason: '🚀'.repeat(40_000) }, { hosts: [], keptHost: null });
    expect(wide.summary).not.toContain('(cut:');
    // short summaries are left alone
    const short = renderCheckRun({ ...row, reason: 'spark-2 is busy' }, { hosts: [], keptHost: null });
    expect(short.summary).toMatch(/^Waiting: spark-2 is busy\n/);
    expect(short.summary).not.toContain('(cut:');
  });
});
