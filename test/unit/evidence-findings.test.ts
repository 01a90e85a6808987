import { describe, expect, it } from 'vitest';
import { judgeEvidence, workTreeOf } from '../../core/evidence.ts';
import {
  type HostEvidence,
  HostEvidenceSchema,
  isPassingResult,
  parseHostEvidence,
} from '../../core/protocol/host-evidence.ts';
import { describeIssues } from '../../core/protocol/receipt.ts';
import { hostEvidence, jobReceipt } from '../helpers/host-evidence.ts';

/**
 * The sentences of the evidence judgment (core/evidence.ts, ADR 0160): each host finding and each
 * contradiction is shown on the check run as written, so every one is asserted word for word, and
 * each source (receipt, GitHub, work tree) only counts where the module comment says it does.
 */

const SHA = '7fc2a91d0c7a3e2f5b6a9d8c1e4f3a2b1c0d9e8f';
const judge = (e: HostEvidence, over: Partial<Parameters<typeof judgeEvidence>[0]> = {}) =>
  judgeEvidence({
    admittedSha: SHA,
    repo: 'acme/butter',
    hosts: ['spark-2'],
    host: { 'spark-2': e },
    job: {},
    github: null,
    ...over,
  });
const runner = (result: HostEvidence['runner']['result'], detail = 'runner console') => ({
  ...hostEvidence(SHA).runner,
  result,
  detail,
});
const receipt = (result: 'passed' | 'failed') =>
  jobReceipt({ reservationId: 'r-1', hostId: 'spark-2', fencingToken: 3, headSha: SHA }, { result });
const tree = (path: string, sha: string | null = SHA, detail = 'detached HEAD') => ({ path, sha, detail });

describe('workTreeOf', () => {
  it("a runner's checkout is <name>/<name> of the repository, among several", () => {
    const e = hostEvidence(SHA, { workTrees: [tree('iron/iron'), tree('butter/butter', 'c'.repeat(40))] });
    expect(workTreeOf(e, 'acme/butter')?.sha).toBe('c'.repeat(40));
    expect(workTreeOf(e, 'acme/salt')).toBeNull();
  });

  it('without a repository only a lone work tree is the checkout', () => {
    const one = hostEvidence(SHA, { workTrees: [tree('iron/iron')] });
    expect(workTreeOf(one, null)).toEqual(tree('iron/iron'));
    expect(workTreeOf(one, 'no-slash')).toEqual(tree('iron/iron'));
    const two = hostEvidence(SHA, { workTrees: [tree('iron/iron'), tree('butter/butter')] });
    expect(workTreeOf(two, null)).toBeNull();
    expect(workTreeOf(hostEvidence(SHA, { workTrees: [] }), null)).toBeNull();
  });

  it("a task's checkout is its only work tree, whatever its path", () => {
    const task = hostEvidence(SHA, { mode: 'task', workTrees: [tree('checkout')] });
    expect(workTreeOf(task, 'acme/butter')).toEqual(tree('checkout'));
    expect(workTreeOf(hostEvidence(SHA, { mode: 'task', workTrees: [] }), 'acme/butter')).toBeNull();
  });
});

describe("one host's finding", () => {
  it('no preflight recorded', () => {
    const j = judge(hostEvidence(SHA, { preflight: null }));
    expect(j.findings[0]).toMatchObject({
      result: 'failed',
      why: 'no host preflight was recorded on spark-2',
      sha: SHA,
      runnerResult: 'Succeeded',
    });
  });

  it('a failed preflight names its failed fatal checks only, or says none was named', () => {
    const checks = [
      { name: 'gpu', ok: false, fatal: true, detail: '1 compute process(es)' },
      { name: 'disk', ok: true, fatal: true, detail: '900 GB free' },
      { name: 'ptrace-scope', ok: false, fatal: false, detail: 'no Yama LSM' },
      { name: 'driver', ok: false, fatal: true, detail: '550 < 570' },
    ];
    const j = judge(hostEvidence(SHA, { preflight: { ok: false, at: 1, checks } }));
    expect(j.findings[0]!.why).toBe(
      'the host preflight failed on spark-2 (gpu: 1 compute process(es); driver: 550 < 570)',
    );
    const soft = judge(hostEvidence(SHA, { preflight: { ok: false, at: 1, checks: [checks[2]!] } }));
    expect(soft.findings[0]).toMatchObject({
      result: 'failed',
      why: 'the host preflight failed on spark-2 (no check named)',
    });
  });

  it('no job result: the runner or the task says so', () => {
    expect(judge(hostEvidence(SHA, { runner: runner(null, 'no result line') })).findings[0]).toMatchObject({
      result: 'failed',
      why: 'the runner on spark-2 reported no job result (no result line)',
    });
    const task = hostEvidence(SHA, { mode: 'task', runner: runner(null, 'never started') });
    expect(judge(task).findings[0]!.why).toBe('the task on spark-2 reported no job result (never started)');
  });

  it('a Canceled job is cancelled, and so is the verdict', () => {
    const j = judge(hostEvidence(SHA, { runner: runner('Canceled') }));
    expect(j.findings[0]).toMatchObject({
      hostId: 'spark-2',
      result: 'cancelled',
      why: 'the runner on spark-2 reported its job Canceled',
      runnerResult: 'Canceled',
    });
    expect(j.verdict).toBe('cancelled');
    const task = judge(hostEvidence(SHA, { mode: 'task', runner: runner('Canceled') }));
    expect(task.findings[0]!.why).toBe('the task on spark-2 reported its job Canceled');
  });

  it('any other non-passing result fails, in its own word', () => {
    const j = judge(hostEvidence(SHA, { runner: runner('Abandoned') }));
    expect(j.findings[0]).toMatchObject({
      result: 'failed',
      why: 'the runner on spark-2 reported its job Abandoned',
    });
    expect(j.verdict).toBe('failed');
  });

  it('a pass with no readable commit fails with the reader’s detail, or says no checkout was found', () => {
    const unread = judge(hostEvidence(SHA, { workTrees: [tree('butter/butter', null, 'HEAD unreadable')] }));
    expect(unread.findings[0]!.why).toBe(
      'no commit could be read from the work tree on spark-2 after the job (HEAD unreadable)',
    );
    const none = judge(hostEvidence(SHA, { workTrees: [] }));
    expect(none.findings[0]).toMatchObject({
      result: 'failed',
      sha: null,
      why: 'no commit could be read from the work tree on spark-2 after the job (no checkout of the repository found)',
    });
  });

  it('a pass names the commit when one was read, and nothing more when none was asked for', () => {
    const j = judge(hostEvidence(SHA));
    expect(j.findings[0]).toMatchObject({
      result: 'passed',
      why: 'the runner on spark-2 reported its job Succeeded at `7fc2a91`',
    });
    expect(j.verdict).toBe('passed');
    const unbound = judge(hostEvidence(SHA, { workTrees: [] }), { admittedSha: null });
    expect(unbound.findings[0]).toMatchObject({
      result: 'passed',
      why: 'the runner on spark-2 reported its job Succeeded',
    });
    const task = judge(hostEvidence(SHA, { mode: 'task', workTrees: [tree('checkout')] }));
    expect(task.findings[0]!.why).toBe('the task on spark-2 reported its job Succeeded at `7fc2a91`');
  });
});

describe('contradictions', () => {
  it('a receipt only contradicts a result the host reported', () => {
    const silent = judge(hostEvidence(SHA, { runner: runner(null) }), {
      job: { 'spark-2': receipt('passed') },
    });
    expect(silent.contradictions).toEqual([]);
  });

  it('a receipt that agrees with the host adds nothing', () => {
    const failed = judge(hostEvidence(SHA, { runner: runner('Failed') }), {
      job: { 'spark-2': receipt('failed') },
    });
    expect(failed).toMatchObject({ contradictions: [], verdict: 'failed' });
    const passed = judge(hostEvidence(SHA), { job: { 'spark-2': receipt('passed') } });
    expect(passed).toMatchObject({ contradictions: [], verdict: 'passed' });
  });

  it('a failed receipt beside a passing runner is a contradiction', () => {
    const j = judge(hostEvidence(SHA), { job: { 'spark-2': receipt('failed') } });
    expect(j.contradictions).toEqual([
      "the job's receipt from spark-2 says failed, but the runner reported its job Succeeded",
    ]);
    expect(j.verdict).toBe('failed');
  });

  it("a passed receipt beside a task's failure names the task", () => {
    const task = hostEvidence(SHA, { mode: 'task', runner: runner('Failed'), workTrees: [tree('checkout')] });
    expect(judge(task, { job: { 'spark-2': receipt('passed') } }).contradictions).toEqual([
      "the job's receipt from spark-2 says passed, but the task reported its job Failed",
    ]);
  });

  it("GitHub's conclusion is weighed against a runner's result only, never a task's or a missing one", () => {
    const task = hostEvidence(SHA, { mode: 'task', runner: runner('Failed'), workTrees: [tree('checkout')] });
    expect(judge(task, { github: 'passed' }).contradictions).toEqual([]);
    expect(judge(hostEvidence(SHA, { runner: runner(null) }), { github: 'passed' }).contradictions).toEqual(
      [],
    );
    expect(judge(hostEvidence(SHA, { runner: runner('Failed') }), { github: null }).contradictions).toEqual(
      [],
    );
    expect(
      judge(hostEvidence(SHA, { runner: runner('Failed') }), { github: 'failed' }).contradictions,
    ).toEqual([]);
  });
});

describe('the verdict', () => {
  it('no leased host: nothing is complete and nothing is decided', () => {
    expect(judge(hostEvidence(SHA), { hosts: [], host: {} })).toEqual({
      complete: false,
      missing: [],
      findings: [],
      contradictions: [],
      verdict: null,
    });
  });

  it('a failure wins over a cancel, a cancel over a pass', () => {
    const pair = (a: HostEvidence, b: HostEvidence) =>
      judgeEvidence({
        admittedSha: SHA,
        repo: 'acme/butter',
        hosts: ['spark-1', 'spark-2'],
        host: { 'spark-1': a, 'spark-2': b },
        job: {},
        github: null,
      }).verdict;
    const cancelled = hostEvidence(SHA, { runner: runner('Canceled') });
    const failed = hostEvidence(SHA, { runner: runner('Failed') });
    expect(pair(hostEvidence(SHA), cancelled)).toBe('cancelled');
    expect(pair(cancelled, failed)).toBe('failed');
    expect(pair(hostEvidence(SHA), hostEvidence(SHA))).toBe('passed');
  });
});

describe('stored evidence', () => {
  it('parses what an agent reported, and nothing else', () => {
    const e = hostEvidence(SHA);
    expect(parseHostEvidence(JSON.stringify(e))).toEqual(e);
    expect(parseHostEvidence(null)).toBeNull();
    expect(parseHostEvidence('')).toBeNull();
    expect(parseHostEvidence('{not json')).toBeNull();
    expect(parseHostEvidence(JSON.stringify({ ...e, version: 2 }))).toBeNull();
  });

  it('a runner result passes as GitHub maps it to success: Succeeded or SucceededWithIssues', () => {
    expect(isPassingResult('Succeeded')).toBe(true);
    expect(isPassingResult('SucceededWithIssues')).toBe(true);
    for (const r of ['Failed', 'Canceled', 'Skipped', 'Abandoned', null] as const)
      expect(isPassingResult(r), String(r)).toBe(false);
    expect(judge(hostEvidence(SHA, { runner: runner('SucceededWithIssues') })).verdict).toBe('passed');
  });
});

describe('HostEvidenceSchema: whole values and what to fix', () => {
  const issues = (e: unknown): string => {
    const r = HostEvidenceSchema.safeParse(e);
    return r.success ? 'accepted' : describeIssues(r.error);
  };
  const withTree = (path: string, sha: string | null = SHA) =>
    hostEvidence(SHA, { workTrees: [{ path, sha, detail: '' }] });
  const withCheck = (name: string) =>
    hostEvidence(SHA, {
      preflight: { ok: true, at: 1, checks: [{ name, ok: true, fatal: true, detail: '' }] },
    });

  it('a commit is exactly 40 lower-case hex digits', () => {
    expect(issues(withTree('butter/butter', SHA))).toBe('accepted');
    for (const sha of [`x${SHA}`, `${SHA}x`, `a${SHA}`, SHA.slice(1)])
      expect(issues(withTree('butter/butter', sha)), sha).toBe(
        'workTrees.0.sha: expected a full 40-character lower-case commit SHA',
      );
  });

  it('a check name is one short lower-case word', () => {
    for (const name of ['gpu', 'ptrace-scope', 'disk:work_root.1', 'a'.repeat(60)])
      expect(issues(withCheck(name)), name).toBe('accepted');
    for (const name of ['GPU gpu', 'gpu GPU', ' gpu', 'gpu!', 'a'.repeat(61)])
      expect(issues(withCheck(name)), name).toBe('preflight.checks.0.name: a check name like "gpu"');
  });

  it('a work tree path has one or more plain segments', () => {
    for (const path of ['checkout', 'butter/butter', 'a/b/c', '.hidden/x', 'a..b'])
      expect(issues(withTree(path)), path).toBe('accepted');
    for (const path of ['../etc', 'a/../b', '/abs', 'a//b', 'a/', '..'])
      expect(issues(withTree(path)), path).toBe('workTrees.0.path: a relative path like "butter/butter"');
  });
});
