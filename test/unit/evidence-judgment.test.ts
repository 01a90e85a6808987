import { describe, expect, it } from 'vitest';
import { judgeEvidence, workTreeOf } from '../../core/evidence.ts';
import { type HostEvidence, HostEvidenceSchema } from '../../core/protocol/host-evidence.ts';
import { hostEvidence, jobReceipt } from '../helpers/host-evidence.ts';

/**
 * The evidence judgment (core/evidence.ts, ADR 0160): the verdict comes from each host's own
 * evidence; a job's receipt, GitHub's conclusion and the work tree may only confirm it, and any
 * disagreement fails it with a sentence saying what disagrees.
 */

const SHA = '7fc2a91d0c7a3e2f5b6a9d8c1e4f3a2b1c0d9e8f';
const OTHER = 'b'.repeat(40);
const facts = (host: Record<string, HostEvidence>, over: Partial<Parameters<typeof judgeEvidence>[0]> = {}) =>
  judgeEvidence({
    admittedSha: SHA,
    repo: 'acme/butter',
    hosts: ['spark-2'],
    host,
    job: {},
    github: 'passed',
    ...over,
  });
const forged = (over = {}) =>
  jobReceipt({ reservationId: 'r-1', hostId: 'spark-2', fencingToken: 3, headSha: SHA }, over);

describe('judgeEvidence', () => {
  it('passes only when every leased host reported a clean run at the admitted commit', () => {
    expect(facts({ 'spark-2': hostEvidence(SHA) })).toMatchObject({
      complete: true,
      verdict: 'passed',
      contradictions: [],
    });
    // a pair: one host's evidence alone is not the reservation's
    const half = facts({ 'spark-2': hostEvidence(SHA) }, { hosts: ['spark-1', 'spark-2'] });
    expect(half).toMatchObject({ complete: false, missing: ['spark-1'], verdict: null });
    expect(facts({})).toMatchObject({ complete: false, verdict: null });
  });

  it("a forged passed receipt contradicts the runner's own Failed: the verdict fails and says so", () => {
    const j = facts(
      { 'spark-2': hostEvidence(SHA, { runner: { ...hostEvidence(SHA).runner, result: 'Failed' } }) },
      { job: { 'spark-2': forged() }, github: 'failed' },
    );
    expect(j.verdict).toBe('failed');
    expect(j.contradictions).toEqual([
      "the job's receipt from spark-2 says passed, but the runner reported its job Failed",
    ]);
  });

  it('GitHub passing while the runner printed Failed is a contradiction, and so is the reverse', () => {
    const failedRun = hostEvidence(SHA, { runner: { ...hostEvidence(SHA).runner, result: 'Failed' } });
    expect(facts({ 'spark-2': failedRun }).contradictions).toEqual([
      'GitHub reports the job passed, but the runner on spark-2 reported Failed',
    ]);
    expect(facts({ 'spark-2': hostEvidence(SHA) }, { github: 'failed' }).contradictions).toEqual([
      'GitHub reports the job failed, but the runner on spark-2 reported Succeeded',
    ]);
  });

  it('a work tree at another commit contradicts the admission; one that cannot be read never passes', () => {
    const moved = facts({ 'spark-2': hostEvidence(OTHER) });
    expect(moved.verdict).toBe('failed');
    expect(moved.contradictions).toEqual([
      'the work tree on spark-2 is at `bbbbbbb` after the job, not the admitted `7fc2a91`',
    ]);
    const unread = facts({
      'spark-2': hostEvidence(SHA, {
        workTrees: [{ path: 'butter/butter', sha: null, detail: 'HEAD is neither a commit id nor a ref' }],
      }),
    });
    expect(unread).toMatchObject({ verdict: 'failed', contradictions: [] });
    expect(unread.findings[0]!.why).toContain('no commit could be read from the work tree on spark-2');
    // a run that failed at another commit (a task's commit binding) says so itself: no contradiction
    const boundWrong = facts(
      {
        'spark-2': hostEvidence(OTHER, { runner: { ...hostEvidence(SHA).runner, result: 'Failed' } }),
      },
      { github: 'failed' },
    );
    expect(boundWrong).toMatchObject({ verdict: 'failed', contradictions: [] });
    // a checkout of another repository is not this one's
    const otherRepo = facts({
      'spark-2': hostEvidence(SHA, { workTrees: [{ path: 'iron/iron', sha: SHA, detail: '' }] }),
    });
    expect(otherRepo.verdict).toBe('failed');
  });

  it('a failed or missing host preflight, or no runner result, fails the host', () => {
    const base = hostEvidence(SHA);
    const pre = facts({
      'spark-2': hostEvidence(SHA, {
        preflight: {
          ok: false,
          at: 1,
          checks: [{ name: 'gpu', ok: false, fatal: true, detail: '1 compute process(es)' }],
        },
      }),
    });
    expect(pre.verdict).toBe('failed');
    expect(pre.findings[0]!.why).toBe('the host preflight failed on spark-2 (gpu: 1 compute process(es))');
    expect(facts({ 'spark-2': hostEvidence(SHA, { preflight: null }) }).verdict).toBe('failed');
    const silent = facts({
      'spark-2': hostEvidence(SHA, {
        runner: { ...base.runner, result: null, detail: 'the runner printed no job result' },
      }),
    });
    expect(silent.verdict).toBe('failed');
    // a soft warning (ptrace scope, disk) does not fail the preflight
    const warned = hostEvidence(SHA);
    warned.preflight!.checks.push({ name: 'ptrace-scope', ok: false, fatal: false, detail: 'no Yama LSM' });
    expect(facts({ 'spark-2': warned }).verdict).toBe('passed');
  });

  it("a task's evidence is judged on its own checkout and exit, without GitHub", () => {
    const task = hostEvidence(SHA, {
      mode: 'task',
      workTrees: [{ path: 'checkout', sha: SHA, detail: 'commit binding ok' }],
    });
    expect(workTreeOf(task, 'acme/butter')?.sha).toBe(SHA);
    expect(facts({ 'spark-2': task }, { github: null }).verdict).toBe('passed');
  });

  it('names hosts the way the caller does', () => {
    const j = facts({ 'spark-2': hostEvidence(OTHER) }, { name: (h) => h.toUpperCase() });
    expect(j.contradictions[0]).toContain('the work tree on SPARK-2');
  });
});

describe('HostEvidenceSchema', () => {
  it('refuses paths that leave the work folder and ids that are no commit', () => {
    const ok = hostEvidence(SHA);
    expect(HostEvidenceSchema.safeParse(ok).success).toBe(true);
    for (const path of ['../etc', 'a/../b', '/abs', 'a//b', '.', '..', 'a/./b']) {
      const bad = { ...ok, workTrees: [{ path, sha: SHA, detail: '' }] };
      expect(HostEvidenceSchema.safeParse(bad).success, path).toBe(false);
    }
    expect(
      HostEvidenceSchema.safeParse({ ...ok, workTrees: [{ path: 'a/a', sha: 'ABC', detail: '' }] }).success,
    ).toBe(false);
    expect(HostEvidenceSchema.safeParse({ ...ok, extra: 1 }).success).toBe(false);
    expect(HostEvidenceSchema.safeParse({ ...ok, runner: { ...ok.runner, result: 'Passed' } }).success).toBe(
      false,
    );
  });
});
