import { describe, expect, it } from 'vitest';
import {
  isNotRunOutcome,
  NOT_RUN_CAUSES,
  NOT_RUN_OUTCOMES,
  OUTCOMES,
  type Outcome,
} from '../../core/model.ts';
import type { Receipt } from '../../core/protocol/receipt.ts';
import { renderCheckRun } from '../../functions/github/check-run.ts';
import type { ReservationRow } from '../../functions/ledger/ledger.ts';
import { publicCause } from '../../functions/views.ts';
import { hostEvidence, jobReceipt } from '../helpers/host-evidence.ts';

/**
 * An infrastructure failure says so (ADR 0177): work that ended before the PR's script started is
 * rendered "Spark test not run — <the cause in the spec's words>" with GitHub's `cancelled`
 * conclusion, never "failed"; a test that ran and failed still reads "Spark test failed". The
 * public history names the cause with a fixed phrase.
 */

const SHA = 'e'.repeat(40);

function row(over: Partial<ReservationRow> = {}): ReservationRow {
  return {
    id: 'r-12',
    seq: 12,
    kind: 'manual',
    priority: 80,
    topology: 'single',
    pool: 'spark',
    targetHost: null,
    repo: 'acme/iron',
    pr: 7,
    headSha: SHA,
    suite: 'smoke',
    requester: 'github:alice',
    status: 'failed',
    reason: 'the reason the release gave',
    position: null,
    waitCode: null,
    outcome: 'failed',
    createdAt: 0,
    updatedAt: 0,
    queueDeadline: 0,
    grantedAt: 0,
    endedAt: 0,
    ttlS: 3600,
    attempt: 0,
    retryNotBefore: null,
    checkRunId: null,
    receiptJson: null,
    metaJson: null,
    ...over,
  };
}

const ctx = { hosts: ['spark-2'], keptHost: null };

const TITLES: Record<(typeof NOT_RUN_OUTCOMES)[number], string> = {
  task_not_started: 'Spark test not run — the task never started',
  runner_not_picked_up: 'Spark test not run — the runner never picked the job up',
  preflight_failed: 'Spark test not run — the host preflight refused',
  lease_lost: 'Spark test not run — the lease was lost',
};

describe('the not-run outcomes', () => {
  it('are outcomes, each with its cause in words; no test result is one', () => {
    expect(OUTCOMES).toEqual(expect.arrayContaining([...NOT_RUN_OUTCOMES]));
    expect(Object.keys(NOT_RUN_CAUSES).sort()).toEqual([...NOT_RUN_OUTCOMES].sort());
    for (const o of ['passed', 'failed', 'cancelled', 'released', 'expired', 'foreign_job', null])
      expect(isNotRunOutcome(o), String(o)).toBe(false);
  });
});

describe('a check run of work that never ran', () => {
  for (const outcome of NOT_RUN_OUTCOMES) {
    it(`${outcome}: "${TITLES[outcome]}", cancelled, the reason, and how to queue it again`, () => {
      const v = renderCheckRun(row({ outcome }), ctx);
      expect(v).toMatchObject({ status: 'completed', conclusion: 'cancelled', title: TITLES[outcome] });
      expect(v.summary.split('\n')[0]).toBe(
        `Not run: the reason the release gave. The PR's code did not run at \`${SHA}\`, so this is not a test result. Nothing is queued again by itself: comment \`/spark test\` on the PR to run it again.`,
      );
      expect(v.summary).not.toMatch(/failed/i);
    });
  }

  it('final at once while its hosts are still cleaned; the summary says they are', () => {
    const v = renderCheckRun(row({ status: 'releasing', outcome: 'lease_lost' }), ctx);
    expect(v).toMatchObject({ status: 'completed', conclusion: 'cancelled', title: TITLES.lease_lost });
    expect(v.summary.split('\n')[0]).toMatch(/ The hosts are being cleaned and released\.$/);
  });

  it('without a reason, the cause itself; the command that queues it again matches its lane', () => {
    const pairLong = renderCheckRun(
      row({ outcome: 'task_not_started', reason: null, topology: 'pair', suite: 'performance' }),
      { ...ctx, hosts: ['spark-1', 'spark-2'] },
    );
    expect(pairLong.summary).toContain('Not run: the task never started. ');
    expect(pairLong.summary).toContain('comment `/spark test --pair --long` on the PR');
    const long = renderCheckRun(row({ outcome: 'runner_not_picked_up', suite: 'performance' }), ctx);
    expect(long.summary).toContain('comment `/spark test --long` on the PR');
  });

  it('merge CI (no PR): the next push runs it again', () => {
    const v = renderCheckRun(row({ kind: 'merge', pr: null, outcome: 'preflight_failed' }), ctx);
    expect(v.title).toBe(TITLES.preflight_failed);
    expect(v.summary).toContain(
      'Nothing is queued again by itself: the next push to the branch runs merge CI again.',
    );
  });

  it('a test that ran and failed still reads "Spark test failed"', () => {
    const v = renderCheckRun(row({ outcome: 'failed' }), ctx);
    expect(v).toMatchObject({
      status: 'completed',
      conclusion: 'failure',
      title: `Spark test failed — exact SHA ${SHA.slice(0, 7)}`,
    });
    expect(v.summary).not.toContain('Not run');
  });
});

describe("a task receipt's line", () => {
  const receipt = (over: Partial<Receipt>) =>
    jobReceipt(
      { reservationId: 'r-12', hostId: 'spark-2', fencingToken: 4, headSha: SHA },
      { executor: 'dstack', mode: 'task', result: 'failed', exitCode: null, toolchain: {}, ...over },
    );
  const render = (x: Receipt, outcome: Outcome) =>
    renderCheckRun(row({ outcome, receiptJson: JSON.stringify({ byHost: { 'spark-2': x } }) }), {
      ...ctx,
      mode: 'task',
      hostEvidence: {
        'spark-2': hostEvidence(SHA, {
          mode: 'task',
          runner: {
            result: null,
            job: null,
            exitCode: null,
            stoppedByAgent: false,
            detail: 'dstack: failed',
          },
        }),
      },
    }).summary;

  it('a task that ended before the script started reads "not run" with the reason the agent gave', () => {
    const why =
      'the task never started: dstack run spark-r-12-spark-2-t1-a0 failed before its commands ended (failed_to_start_due_to_no_capacity: Failed to use specified fleets); the script did not run';
    expect(render(receipt({ phases: [], reason: why }), 'task_not_started')).toMatch(
      new RegExp(`^- Spark 2: not run — ${why.replace(/[().]/g, '\\$&')} \\(log sha256 `, 'm'),
    );
  });

  it('a task killed inside the script (no phase reported) ran: it reads "failed", not "not run"', () => {
    const s = render(receipt({ phases: [], exitCode: 137, reason: 'smoke phase exited 137' }), 'failed');
    expect(s).toMatch(/^- Spark 2: failed \(smoke, exit 137, /m);
    expect(s).not.toContain('not run');
  });
});

describe('the public history of a release', () => {
  const event = (type: string, outcome: string | null) => ({
    type,
    fromState: type === 'reservation.releasing' ? 'preparing' : 'releasing',
    toState: type === 'reservation.releasing' ? 'releasing' : 'failed',
    actor: 'agent:spark-2',
    dataJson: outcome ? JSON.stringify({ outcome }) : null,
  });

  it('names the cause of work that never ran, as a fixed phrase; never for a test result', () => {
    expect(publicCause(event('reservation.releasing', 'task_not_started'))).toBe(
      'releasing (preparing → releasing) by an agent: not run — the task never started',
    );
    expect(publicCause(event('reservation.failed', 'lease_lost'))).toBe(
      'failed (releasing → failed) by an agent: not run — the lease was lost',
    );
    expect(publicCause(event('reservation.failed', 'failed'))).toBe(
      'failed (releasing → failed) by an agent',
    );
    expect(publicCause(event('reservation.releasing', null))).toBe(
      'releasing (preparing → releasing) by an agent',
    );
    // a malformed data column is not an error on a public page
    expect(publicCause({ ...event('reservation.failed', null), dataJson: '{' })).toBe(
      'failed (releasing → failed) by an agent',
    );
  });
});
