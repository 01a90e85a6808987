import { describe, expect, it } from 'vitest';
import { displayHost, renderCheckRun, renderRefusal } from '../../functions/github/check-run.ts';
import { retryAtFrom } from '../../functions/github/client.ts';
import type { ReservationRow } from '../../functions/ledger/ledger.ts';
import { hostEvidence } from '../helpers/host-evidence.ts';

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
    status: 'queued',
    reason: 'spark-2 is busy with r-11',
    position: 2,
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

const none = { hosts: [], keptHost: null };

describe('check-run rendering (the words on the PR)', () => {
  it("a draining check names the live plan's kept host in its title and its summary, whatever the row last recorded", () => {
    const kept = { hosts: [], keptHost: { id: 'spark-2', state: 'draining' as const } };
    // the row's reason is the last pass's (another host), or the creation placeholder (no pass yet)
    for (const over of [
      { reason: 'waiting for a host in pool spark: spark-1 draining for r-12', waitCode: 'hosts-busy' },
      { reason: 'waiting for the next admission pass', waitCode: null },
    ]) {
      const view = renderCheckRun(row(over), kept);
      expect(view.title).toBe('Spark 2 draining — active job finishing');
      expect(view.summary.split('\n')[0]).toBe(
        'Waiting: spark-2 draining for r-12: the host finishes its current job before this one starts',
      );
      expect(view.summary).not.toContain('spark-1');
    }
  });

  it('says where the request is, in the titles docs/architecture.md names', () => {
    expect(renderCheckRun(row({}), none)).toMatchObject({
      status: 'queued',
      title: 'Spark test queued — position 2',
    });
    expect(renderCheckRun(row({}), none).summary).toMatch(/^Waiting: spark-2 is busy with r-11/);
    // the title stays the spec's sentence; the queue ETA is a line of its own in the summary
    const withEta = renderCheckRun(row({}), { ...none, eta: 'starts in ~12–20 min' });
    expect(withEta.title).toBe('Spark test queued — position 2');
    expect(withEta.summary.split('\n')).toContain(
      'Estimate: starts in ~12–20 min, from the finished work in the ledger and the queue ahead; work that arrives later with a higher priority moves it back.',
    );
    expect(renderCheckRun(row({ position: null }), { ...none, eta: 'should start now' }).title).toBe(
      'Spark test queued',
    );
    expect(renderCheckRun(row({}), { hosts: [], keptHost: { id: 'spark-2', state: 'draining' } }).title).toBe(
      'Spark 2 draining — active job finishing',
    );
    expect(
      renderCheckRun(row({ status: 'allocated' }), { hosts: ['spark-2'], keptHost: null }),
    ).toMatchObject({
      status: 'in_progress',
      title: 'Spark 2 allocated — environment preparing',
    });
    expect(
      renderCheckRun(row({ status: 'allocated', topology: 'pair' }), {
        hosts: ['spark-1', 'spark-2'],
        keptHost: null,
      }).title,
    ).toBe('Spark 1 + Spark 2 allocated — environment preparing');
    expect(renderCheckRun(row({ status: 'running' }), { hosts: ['spark-2'], keptHost: null }).title).toBe(
      'Spark test running — exact SHA 7fc2a91',
    );
    // a pass is shown only with the host's own evidence confirming it (ADR 0160)
    expect(
      renderCheckRun(row({ status: 'releasing', outcome: 'passed' }), {
        hosts: ['spark-2'],
        keptHost: null,
        hostEvidence: { 'spark-2': hostEvidence(SHA) },
      }),
    ).toMatchObject({
      status: 'completed',
      conclusion: 'success',
      title: 'Spark test passed — evidence receipt recorded',
    });
    expect(renderCheckRun(row({ status: 'done', outcome: 'failed' }), none)).toMatchObject({
      conclusion: 'failure',
    });
    expect(
      renderCheckRun(
        row({ status: 'failed', outcome: 'queue_timeout', reason: 'queue timeout: waited 360 min' }),
        none,
      ),
    ).toMatchObject({
      conclusion: 'timed_out',
      title: 'Spark test timed out in the queue',
    });
    expect(renderCheckRun(row({ status: 'superseded' }), none)).toMatchObject({ conclusion: 'neutral' });
    expect(renderCheckRun(row({ status: 'cancelled' }), none)).toMatchObject({ conclusion: 'cancelled' });
    expect(displayHost('spark-10')).toBe('Spark 10');
  });

  it('renders only sanitized facts', () => {
    const v = renderCheckRun(row({ status: 'running', receiptJson: '{"log":"SECRET-LOG-LINE"}' }), {
      hosts: ['spark-2'],
      keptHost: null,
    });
    expect(`${v.title}\n${v.summary}`).not.toMatch(/SECRET-LOG-LINE|fencing|token/i);
    expect(renderRefusal('x'.repeat(200), 'mallory').title.length).toBeLessThan(120);
  });
});

describe('GitHub retry hints', () => {
  const now = 1_000_000;
  it('reads Retry-After seconds and dates, and primary rate-limit resets', () => {
    expect(retryAtFrom(403, new Headers({ 'retry-after': '30' }), now)).toBe(now + 30_000);
    expect(retryAtFrom(503, new Headers({ 'retry-after': new Date(now + 5000).toUTCString() }), now)).toBe(
      Math.floor((now + 5000) / 1000) * 1000,
    );
    expect(
      retryAtFrom(403, new Headers({ 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '2000' }), now),
    ).toBe(2_000_000);
    // a 403 with quota left is a permission problem, not a rate limit
    expect(
      retryAtFrom(403, new Headers({ 'x-ratelimit-remaining': '10', 'x-ratelimit-reset': '2000' }), now),
    ).toBeNull();
  });
});
