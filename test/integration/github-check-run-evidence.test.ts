import { describe, expect, it } from 'vitest';
import type { HostEvidence } from '../../core/protocol/host-evidence.ts';
import { type RenderContext, renderCheckRun } from '../../functions/github/check-run.ts';
import type { ReservationRow } from '../../functions/ledger/ledger.ts';
import { hostEvidence, jobReceipt } from '../helpers/host-evidence.ts';

/**
 * The check run's verdict comes from the hosts' own evidence (ADR 0160): GitHub's conclusion and
 * a receipt the job posted only confirm it; where they disagree the check fails and says what
 * disagrees; without the evidence it never passes.
 */

const SHA = '7fc2a91d0c7a3e2f5b6a9d8c1e4f3a2b1c0d9e8f';

function row(over: Partial<ReservationRow>): ReservationRow {
  return {
    id: 'r-12',
    seq: 12,
    kind: 'manual',
    priority: 80,
    topology: 'single',
    pool: 'spark',
    targetHost: null,
    repo: 'acme/butter',
    pr: 7,
    headSha: SHA,
    suite: 'smoke',
    requester: 'github:alice',
    status: 'done',
    reason: null,
    position: null,
    waitCode: null,
    outcome: 'passed',
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

const ctx = (host: Record<string, HostEvidence>, over: Partial<RenderContext> = {}): RenderContext => ({
  hosts: ['spark-2'],
  keptHost: null,
  hostEvidence: host,
  ...over,
});
const receipts = (byHost: Record<string, unknown>) => JSON.stringify({ byHost });
const forged = (over = {}) =>
  jobReceipt(
    { reservationId: 'r-12', hostId: 'spark-2', fencingToken: 3, headSha: SHA },
    { toolchain: { nvcc: 'release 99.9 (forged)', cargo: '9.9.9' }, ...over },
  );
const failedRun = () => hostEvidence(SHA, { runner: { ...hostEvidence(SHA).runner, result: 'Failed' } });

describe('the check run on the host evidence', () => {
  it('passes with the evidence receipt recorded, listing the host evidence and what the job reported', () => {
    const v = renderCheckRun(
      row({ receiptJson: receipts({ 'spark-2': forged() }) }),
      ctx({ 'spark-2': hostEvidence(SHA) }),
    );
    expect(v).toMatchObject({
      status: 'completed',
      conclusion: 'success',
      title: 'Spark test passed — evidence receipt recorded',
    });
    expect(v.summary).toContain('Host evidence (gathered by the Spark agent, not by the job):');
    expect(v.summary).toContain(
      '- Spark 2: preflight passed (gpu, disk); runner result Succeeded; work tree at `7fc2a91` (the admitted commit)',
    );
    expect(v.summary).toContain('Reported by the job (detail only):');
    expect(v.summary).toContain('reported by the job, not verified by the host');
  });

  it('waits for the evidence while GitHub alone says passed, and never passes without it', () => {
    expect(renderCheckRun(row({ status: 'running' }), ctx({}))).toMatchObject({
      status: 'in_progress',
      title: 'Spark test passed on GitHub — waiting for the host evidence',
    });
    const pair = renderCheckRun(
      row({ status: 'releasing', topology: 'pair' }),
      ctx({ 'spark-2': hostEvidence(SHA) }, { hosts: ['spark-1', 'spark-2'] }),
    );
    expect(pair.status).toBe('in_progress');
    expect(pair.summary).toContain('waiting for the evidence of Spark 1');
    // the work ended and no agent reported evidence: not a pass, whatever receipt the job posted
    const none = renderCheckRun(row({ receiptJson: receipts({ 'spark-2': forged() }) }), ctx({}));
    expect(none).toMatchObject({
      status: 'completed',
      conclusion: 'failure',
      title: 'Spark test not verified — no host evidence from Spark 2',
    });
  });

  it("a forged passed receipt beside the runner's own Failed: the check fails and names the contradiction", () => {
    const v = renderCheckRun(
      row({ outcome: 'failed', status: 'failed', receiptJson: receipts({ 'spark-2': forged() }) }),
      ctx({ 'spark-2': failedRun() }),
    );
    expect(v).toMatchObject({ conclusion: 'failure', title: 'Spark test failed — evidence disagrees' });
    expect(v.summary).toContain(
      "**Contradiction:** the job's receipt from Spark 2 says passed, but the runner reported its job Failed.",
    );
    expect(v.summary).toContain('- Spark 2: preflight passed (gpu, disk); runner result Failed');
  });

  it('GitHub passed but the host evidence disagrees or does not confirm: failure, saying why', () => {
    const contradicted = renderCheckRun(row({}), ctx({ 'spark-2': failedRun() }));
    expect(contradicted).toMatchObject({
      conclusion: 'failure',
      title: 'Spark test failed — evidence disagrees',
    });
    expect(contradicted.summary).toContain(
      'GitHub reports the job passed, but the runner on Spark 2 reported Failed',
    );
    const moved = renderCheckRun(row({}), ctx({ 'spark-2': hostEvidence('c'.repeat(40)) }));
    expect(moved.summary).toContain(
      'the work tree on Spark 2 is at `ccccccc` after the job, not the admitted `7fc2a91`',
    );
    const unread = renderCheckRun(row({}), ctx({ 'spark-2': hostEvidence(SHA, { workTrees: [] }) }));
    expect(unread).toMatchObject({
      conclusion: 'failure',
      title: 'Spark test not verified — the host evidence does not confirm the pass',
    });
    expect(unread.summary).toContain('No commit could be read from the work tree on Spark 2 after the job');
    const preflight = renderCheckRun(
      row({}),
      ctx({
        'spark-2': hostEvidence(SHA, {
          preflight: {
            ok: false,
            at: 1,
            checks: [{ name: 'gpu', ok: false, fatal: true, detail: '1 compute process(es)' }],
          },
        }),
      }),
    );
    expect(preflight.conclusion).toBe('failure');
    expect(preflight.summary).toContain('The host preflight failed on Spark 2 (gpu: 1 compute process(es)).');
  });

  it("shows only sanitized facts: no log line the job's receipt carried, no token", () => {
    const r = forged({
      result: 'failed',
      exitCode: 1,
      lastLines: ['SECRET-LOG-LINE spk_job_abcdefabcdefabcdef'],
    });
    const v = renderCheckRun(
      row({ outcome: 'failed', status: 'failed', receiptJson: receipts({ 'spark-2': r }) }),
      ctx({ 'spark-2': failedRun() }),
    );
    expect(`${v.title}\n${v.summary}`).not.toMatch(/SECRET-LOG-LINE|spk_job|fencing/);
  });

  it("a task's receipt is the agent's own, shown as such", () => {
    const task = hostEvidence(SHA, {
      mode: 'task',
      workTrees: [{ path: 'checkout', sha: SHA, detail: 'commit binding ok' }],
    });
    const v = renderCheckRun(
      row({ receiptJson: receipts({ 'spark-2': forged({ mode: 'task' }) }) }),
      ctx({ 'spark-2': task }, { mode: 'task' }),
    );
    expect(v).toMatchObject({
      conclusion: 'success',
      title: 'Spark test passed — evidence receipt recorded',
    });
    expect(v.summary).toContain('Task receipts (built by the agent from the task):');
    expect(v.summary).toContain('task result Succeeded');
  });
});
