import { describe, expect, it } from 'vitest';
import { laneTiming, type Receipt, ReceiptSchema } from '../../core/protocol/receipt.ts';
import { renderCheckRun } from '../../functions/github/check-run.ts';
import type { ReservationRow } from '../../functions/ledger/ledger.ts';
import { hostEvidence } from '../helpers/host-evidence.ts';

/**
 * A lane's time target is a target, not a limit (docs/in-job.md): a run over it keeps its result,
 * and the check run's summary says it went over, per host, from the stored receipts.
 */

const SHA = 'c'.repeat(40);

function receipt(hostId: string, elapsedMs: number, over: Partial<Receipt> = {}): Receipt {
  return ReceiptSchema.parse({
    version: 1,
    reservationId: 'r-12',
    hostId,
    fencingToken: 4,
    headSha: SHA,
    suite: 'performance',
    topology: 'single',
    phases: [{ suite: 'performance', exitCode: 0, durationMs: elapsedMs }],
    startedAt: '2026-11-30T10:00:00.000Z',
    endedAt: new Date(Date.parse('2026-11-30T10:00:00.000Z') + elapsedMs).toISOString(),
    result: 'passed',
    exitCode: 0,
    log: { sha256: 'a'.repeat(64), bytes: 10, lines: 1 },
    lane: laneTiming('spark-test-long', 60, elapsedMs),
    toolchain: {},
    ...over,
  });
}

function row(receipts: Receipt[]): ReservationRow {
  return {
    id: 'r-12',
    seq: 12,
    kind: 'manual',
    priority: 80,
    topology: receipts.length > 1 ? 'pair' : 'single',
    pool: 'spark',
    targetHost: null,
    repo: 'acme/iron',
    pr: 7,
    headSha: SHA,
    suite: 'performance',
    requester: 'github:alice',
    status: 'done',
    reason: null,
    position: null,
    waitCode: null,
    outcome: 'passed',
    createdAt: 0,
    updatedAt: 0,
    queueDeadline: 0,
    grantedAt: 0,
    endedAt: 0,
    ttlS: 3600,
    attempt: 0,
    retryNotBefore: null,
    checkRunId: null,
    receiptJson: JSON.stringify({ byHost: Object.fromEntries(receipts.map((x) => [x.hostId, x])) }),
    metaJson: null,
  };
}

// the host's evidence confirms the pass (ADR 0160): a check passes only with it
const confirmed = hostEvidence(SHA, {
  workTrees: [{ path: 'iron/iron', sha: SHA, detail: 'detached HEAD' }],
});
const ctx = { hosts: ['spark-2'], keptHost: null, hostEvidence: { 'spark-2': confirmed } };

describe('the check run and the lane time target', () => {
  it('a run over its target passes and the summary says how far over, per host', () => {
    const v = renderCheckRun(row([receipt('spark-2', 72.5 * 60_000)]), ctx);
    expect(v).toMatchObject({
      conclusion: 'success',
      title: 'Spark test passed — evidence receipt recorded',
    });
    expect(v.summary).toContain(
      '- Over target: lane spark-test-long took 72.5 min on Spark 2, over its 60-minute target (a target, not a limit: the run was not stopped)',
    );
  });

  it('a run within its target adds no line; only the host that went over is named', () => {
    expect(renderCheckRun(row([receipt('spark-2', 12 * 60_000)]), ctx).summary).not.toContain('Over target');
    const pair = renderCheckRun(row([receipt('spark-1', 30 * 60_000), receipt('spark-2', 61 * 60_000)]), {
      hosts: ['spark-1', 'spark-2'],
      keptHost: null,
      hostEvidence: { 'spark-1': confirmed, 'spark-2': confirmed },
    });
    expect(pair.summary.match(/Over target/g)).toHaveLength(1);
    expect(pair.summary).toContain('took 61.0 min on Spark 2');
  });

  it('reads a receipt from an earlier action (withinTarget only) the same way', () => {
    const old = receipt('spark-2', 65 * 60_000, {
      lane: { name: 'spark-test-long', targetMinutes: 60, elapsedMs: 65 * 60_000, withinTarget: false },
    });
    expect(renderCheckRun(row([old]), ctx).summary).toContain(
      'took 65.0 min on Spark 2, over its 60-minute target',
    );
  });
});
