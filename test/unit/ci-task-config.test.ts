import { describe, expect, it } from 'vitest';
import { ConfigError, ciModeForRepo, cloneUrlForRepo, parseConfig, revokeUrlFor } from '../../core/config.ts';
import { CiTaskSchema, DesiredStateSchema, ReportSchema } from '../../core/protocol/agent.ts';

/**
 * CI as a dstack task: the per-repository `ci` setting, its validation, and the task
 * workload the controller hands the agent (which the agent trusts no further than its schema).
 */

function problems(input: unknown): string[] {
  try {
    parseConfig(input, 'spark.config.json');
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return (e as ConfigError).problems;
  }
  throw new Error('accepted');
}

const SHA = 'a'.repeat(40);
const task = {
  repo: 'acme/butter',
  headSha: SHA,
  suite: 'smoke',
  script: 'scripts/ci/spark-test.sh',
  cloneUrl: 'https://github.com/acme/butter.git',
  revokeUrl: 'https://api.github.com/installation/token',
  lane: { name: 'spark-test', targetMinutes: 30 },
};

describe('repositories.<owner/name>.ci', () => {
  it('defaults to the runner; "task" with executor dstack runs the repository as a task', () => {
    const cfg = parseConfig({
      repositories: {
        'acme/butter': { executor: 'dstack', ci: 'task' },
        'acme/iron': { executor: 'dstack' },
      },
    });
    expect(ciModeForRepo(cfg, 'acme/butter')).toBe('task');
    expect(ciModeForRepo(cfg, 'acme/iron')).toBe('runner');
    expect(ciModeForRepo(cfg, 'acme/other')).toBe('runner');
    expect(ciModeForRepo(cfg, null)).toBe('runner');
    expect(cloneUrlForRepo(cfg, 'acme/butter')).toBe('https://github.com/acme/butter.git');
  });

  it('the clone URL follows github.gitUrl (GHES) unless the repository names its own', () => {
    const cfg = parseConfig({
      github: { gitUrl: 'https://ghe.example/' },
      repositories: {
        'acme/butter': { executor: 'dstack', ci: 'task' },
        'acme/iron': { executor: 'dstack', ci: 'task', cloneUrl: 'http://127.0.0.1:9/git/iron.git' },
      },
    });
    expect(cloneUrlForRepo(cfg, 'acme/butter')).toBe('https://ghe.example/acme/butter.git');
    expect(cloneUrlForRepo(cfg, 'acme/iron')).toBe('http://127.0.0.1:9/git/iron.git');
  });

  it('the revoke URL is DELETE <github.apiUrl>/installation/token, never a hard-coded api.github.com (ADR 0115)', () => {
    expect(revokeUrlFor(parseConfig({}))).toBe('https://api.github.com/installation/token');
    expect(revokeUrlFor(parseConfig({ github: { apiUrl: 'https://ghe.example/api/v3/' } }))).toBe(
      'https://ghe.example/api/v3/installation/token',
    );
  });

  it('task mode without dstack fails validation and says what to set', () => {
    expect(
      problems({
        repositories: { 'acme/butter': { ci: 'task' }, 'acme/iron': { executor: 'slurm', ci: 'task' } },
      }),
    ).toEqual([
      'repositories.acme/butter.ci: ci "task" runs scripts/ci/spark-test.sh as a dstack task: set "executor": "dstack" for acme/butter (it is unset), or drop "ci"',
      'repositories.acme/iron.ci: ci "task" runs scripts/ci/spark-test.sh as a dstack task: set "executor": "dstack" for acme/iron (it is "slurm"), or drop "ci"',
    ]);
  });

  it('an unknown mode, a clone URL with credentials, or one without task mode is named', () => {
    expect(problems({ repositories: { 'acme/butter': { executor: 'dstack', ci: 'job' } } })).toEqual([
      'repositories.acme/butter.ci: ci is one of runner, task',
    ]);
    expect(
      problems({
        repositories: {
          'acme/butter': { executor: 'dstack', ci: 'task', cloneUrl: 'https://x:y@github.com/a.git' },
        },
      }),
    ).toEqual(['repositories.acme/butter.cloneUrl: cloneUrl is an http(s) URL without credentials']);
    expect(
      problems({
        repositories: { 'acme/butter': { executor: 'dstack', cloneUrl: 'https://github.com/a.git' } },
      }),
    ).toEqual([
      'repositories.acme/butter.cloneUrl: cloneUrl is used only by ci "task"; set "ci": "task" for acme/butter or drop cloneUrl',
    ]);
  });
});

describe('repositories.<owner/name>.distributedAssertion', () => {
  it('a pair task gets the declared assertion; it must be a path inside the repository, for task mode only', () => {
    expect(
      problems({
        repositories: {
          'acme/butter': { executor: 'dstack', ci: 'task', distributedAssertion: '../outside.sh' },
          'acme/iron': { executor: 'dstack', distributedAssertion: 'scripts/ci/assert.sh' },
        },
      }),
    ).toEqual([
      'repositories.acme/butter.distributedAssertion: distributedAssertion is a path inside the repository like "scripts/ci/assert-pair.sh"',
      'repositories.acme/iron.distributedAssertion: distributedAssertion is used only by ci "task" (a runner job declares it in its workflow); set "ci": "task" for acme/iron or drop it',
    ]);
  });
});

describe('the task workload on the wire', () => {
  const lease = {
    leaseId: 'l-spark-2-7',
    reservationId: 'r-3',
    fencingToken: 7,
    kind: 'manual',
    topology: 'single',
    lend: false,
    executor: 'dstack',
    expiresInMs: 60_000,
  };

  it('a run state carries the task and, once, its clone token', () => {
    const d = DesiredStateSchema.parse({
      state: 'run',
      lease,
      runnerName: 'spark-spark-2-r-3-a0',
      task,
      cloneToken: 'ghs_0123456789abcdef',
      jobToken: `spk_job_${'x'.repeat(20)}`,
    });
    expect(d.state === 'run' && d.task?.headSha).toBe(SHA);
  });

  it('refuses a script outside the checkout, a short SHA, a URL with credentials or quotes, a bad token', () => {
    const bad = (patch: Record<string, unknown>) => CiTaskSchema.safeParse({ ...task, ...patch }).success;
    expect(bad({ script: '../etc/passwd' })).toBe(false);
    expect(bad({ script: 'scripts/../../x.sh' })).toBe(false);
    expect(bad({ script: '/bin/sh' })).toBe(false);
    expect(bad({ headSha: 'abc1234' })).toBe(false);
    expect(bad({ cloneUrl: 'https://tok@github.com/acme/butter.git' })).toBe(false);
    expect(bad({ cloneUrl: "https://github.com/acme/butter.git' ; rm -rf /" })).toBe(false);
    expect(bad({ cloneUrl: 'file:///etc' })).toBe(false);
    expect(bad({ revokeUrl: 'https://x-access-token:ghs_x@api.github.com/installation/token' })).toBe(false);
    expect(bad({ revokeUrl: 'https://api.github.com/installation/token" ; curl evil' })).toBe(false);
    expect(bad({ revokeUrl: 'ftp://api.github.com/installation/token' })).toBe(false);
    // a state file written before revoke URLs existed still loads (the task then fails closed)
    expect(CiTaskSchema.safeParse({ ...task, revokeUrl: undefined }).success).toBe(true);
    expect(bad({ repo: 'acme' })).toBe(false);
    expect(bad({})).toBe(true);
    const token = (cloneToken: string) =>
      DesiredStateSchema.safeParse({ state: 'run', lease, runnerName: 'spark-x-r-3-a0', task, cloneToken })
        .success;
    expect(token('ghs_abc def')).toBe(false);
    expect(token("ghs_abc'")).toBe(false);
  });

  it('runner_exited may carry the task receipt, checked against the receipt schema', () => {
    const receipt = {
      version: 1,
      reservationId: 'r-3',
      hostId: 'spark-2',
      fencingToken: 7,
      headSha: SHA,
      suite: 'smoke',
      topology: 'single',
      executor: 'dstack',
      mode: 'task',
      phases: [{ suite: 'smoke', exitCode: 0, durationMs: 10 }],
      startedAt: '2026-11-30T10:00:00.000Z',
      endedAt: '2026-11-30T10:00:01.000Z',
      result: 'passed',
      exitCode: 0,
      log: { sha256: 'f'.repeat(64), bytes: 10, lines: 1 },
      toolchain: {},
    };
    const base = {
      type: 'runner_exited',
      fencingToken: 7,
      runnerName: 'spark-x',
      exitCode: 0,
      lastLines: [],
    };
    expect(ReportSchema.safeParse({ ...base, receipt }).success).toBe(true);
    expect(ReportSchema.safeParse({ ...base, receipt: { ...receipt, mode: 'pod' } }).success).toBe(false);
    expect(ReportSchema.safeParse({ ...base, receipt: { ...receipt, lastLines: ['x'] } }).success).toBe(
      false,
    );
  });
});
