import { describe, expect, it } from 'vitest';
import { fitSummary, MAX_CHECK_RUN_SUMMARY, renderCheckRun } from '../../functions/github/check-run.ts';
import { patchMeta } from '../../functions/ledger/github-meta.ts';
import type { ReservationRow } from '../../functions/ledger/ledger.ts';
import { enqueueCheckSync } from '../../functions/ledger/outbox.ts';
import { example } from '../../scripts/sim/fake-github/harness.ts';
import { startHarnessFor } from '../fake-github/harness-for-test.ts';

/**
 * GitHub refuses a check run whose `output.summary` is longer than 65535 characters (`maxLength`
 * in GitHub's description of "Create a check run" / "Update a check run"; GitHub answers 422
 * "Invalid request. Only 65535 characters are allowed; … were supplied."). Text that reaches a
 * summary from outside (a fault naming a runner from a webhook, a reason) is not bounded at
 * its source, so the controller's senders cut the summary: a check run must never be refused for
 * its length and left showing an old state.
 */

const REPO = 'Codertocat/Hello-World';
const SHA = 'ec26c3e57ca3a959ca5aad62de7213c562f8c821';

function row(over: Partial<ReservationRow>): ReservationRow {
  return {
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
    reason: null,
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
    ...over,
  };
}

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

  it('the senders cut at 65535 characters (code points), never splitting a surrogate pair', () => {
    const cut = fitSummary(`Waiting: ${'🚀'.repeat(70_000)}`);
    expect([...cut].length).toBe(MAX_CHECK_RUN_SUMMARY);
    expect(cut).toMatch(/^Waiting: 🚀/);
    expect(cut.endsWith('… (cut: GitHub shows at most 65535 characters)')).toBe(true);
    expect(cut).not.toMatch(/[\ud800-\udbff](?![\udc00-\udfff])/);
    // 40,000 of them are 80,000 UTF-16 units but 40,000 characters: within the limit, untouched
    const wide = `Waiting: ${'🚀'.repeat(40_000)}`;
    expect(fitSummary(wide)).toBe(wide);
    expect(fitSummary('s'.repeat(65_535))).toBe('s'.repeat(65_535));
    expect([...fitSummary('s'.repeat(65_536))].length).toBe(MAX_CHECK_RUN_SUMMARY);
    // what the renderer says is left alone: the cut is where the text leaves for GitHub
    const view = renderCheckRun(row({ reason: 'spark-2 is busy' }), { hosts: [], keptHost: null });
    expect(fitSummary(view.summary)).toBe(view.summary);
  });
});
