import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import {
  CiTaskSchema,
  DesiredStateSchema,
  HeartbeatResponseSchema,
  HostFactsSchema,
  ReportSchema,
} from '../../core/protocol/agent.ts';
import { describeIssues } from '../../core/protocol/receipt.ts';

/**
 * The agent turns a CI task's fields into a dstack task and a shell command (core/protocol/agent.ts,
 * docs/architecture.md "Relay agent protocol"), so every field must match its whole pattern: a
 * value right at one end and wrong at the other is refused, and the refusal names the field and
 * says what to send instead.
 */
function parse(schema: z.ZodType, value: unknown): string {
  const r = schema.safeParse(value);
  if (!r.success) return describeIssues(r.error);
  expect(r.data).toEqual(value);
  return 'accepted';
}

const SHA = 'a'.repeat(40);
const task = {
  repo: 'acme/butter',
  headSha: SHA,
  suite: 'smoke',
  script: 'scripts/ci/spark-test.sh',
  distributedAssertion: 'scripts/ci/assert.sh',
  cloneUrl: 'https://github.com/acme/butter.git',
  revokeUrl: 'https://api.github.com/installation/token',
  lane: { name: 'spark-test-long', targetMinutes: 60 },
};
const lease = {
  leaseId: 'l-spark-2-7',
  reservationId: 'r-12',
  fencingToken: 7,
  kind: 'manual',
  topology: 'single',
  lend: false,
  expiresInMs: 0,
};

describe('CI task fields', () => {
  it('the documented task parses unchanged', () => {
    expect(parse(CiTaskSchema, task)).toBe('accepted');
    expect(parse(CiTaskSchema, { ...task, cloneUrl: 'http://git.example:8080/acme/butter.git' })).toBe(
      'accepted',
    );
  });

  it('a repository is owner/name, nothing around it', () => {
    for (const repo of ['/acme/butter', 'acme/butter/', 'acme', 'x acme/butter'])
      expect(parse(CiTaskSchema, { ...task, repo }), repo).toBe('repo: repositories look like "owner/name"');
    expect(parse(DesiredStateSchema, { state: 'prepare', lease: { ...lease, repo: 'acme' } })).toBe(
      'lease.repo: repositories look like "owner/name"',
    );
  });

  it('a head SHA is exactly 40 lower-case hex digits', () => {
    for (const headSha of [`x${SHA}`, `${SHA}0`, `${SHA}x`])
      expect(parse(CiTaskSchema, { ...task, headSha }), headSha).toBe(
        'headSha: a head SHA is 40 lower-case hex digits',
      );
  });

  it('the script and the assertion are plain relative paths inside the checkout', () => {
    for (const path of ['spark-test.sh', 'a/b/c.sh', '..a', 'a..b/c', '.hidden/x.sh'])
      for (const field of ['script', 'distributedAssertion'])
        expect(parse(CiTaskSchema, { ...task, [field]: path }), `${field} ${path}`).toBe('accepted');
    for (const path of ['../x', 'a/..', 'a/.', './x', 'a/b/../c', '..', '/abs', 'a//b', 'x/', 'a b']) {
      expect(parse(CiTaskSchema, { ...task, script: path }), path).toBe(
        'script: a script is a relative path like "scripts/ci/spark-test.sh"',
      );
      expect(parse(CiTaskSchema, { ...task, distributedAssertion: path }), path).toBe(
        'distributedAssertion: a relative path inside the checkout',
      );
    }
  });

  it('URLs are http(s) from their first character, and a credential before the path is named', () => {
    expect(parse(CiTaskSchema, { ...task, cloneUrl: 'xhttps://github.com/acme/butter.git' })).toBe(
      'cloneUrl: a clone URL is http(s) without spaces or quotes',
    );
    expect(parse(CiTaskSchema, { ...task, revokeUrl: 'ftp://api.github.com/installation/token' })).toBe(
      'revokeUrl: a revoke URL is http(s) without spaces or quotes',
    );
    for (const cloneUrl of [
      'https://tok@github.com/acme/butter.git',
      'http://tok@git.example/acme/butter.git',
    ])
      expect(parse(CiTaskSchema, { ...task, cloneUrl }), cloneUrl).toBe(
        'cloneUrl: a clone URL is http(s) without spaces or quotes; cloneUrl: a clone URL carries no credentials',
      );
    expect(
      parse(CiTaskSchema, { ...task, revokeUrl: 'https://x:ghs_1@api.github.com/installation/token' }),
    ).toBe(
      'revokeUrl: a revoke URL is http(s) without spaces or quotes; revokeUrl: a revoke URL carries no credentials',
    );
    // an @ after the host is in the path: refused by the pattern, but no credential
    expect(
      parse(CiTaskSchema, { ...task, cloneUrl: 'https://github.com/acme/butter.git?via=https://a@b' }),
    ).toBe('cloneUrl: a clone URL is http(s) without spaces or quotes');
  });

  it('a clone token is one GitHub token, nothing around it', () => {
    const run = (cloneToken: string) =>
      parse(DesiredStateSchema, { state: 'run', lease, runnerName: 'spark-x-r-3-a0', task, cloneToken });
    expect(run('ghs_abcdefgh1234')).toBe('accepted');
    for (const t of [' ghs_abcdefgh1234', 'ghs_abcdefgh1234 ', 'ghs-abcdefgh'])
      expect(run(t), t).toBe('cloneToken: a clone token is a GitHub token like "ghs_…"');
  });

  it('a runner name is one plain name to its last character', () => {
    const run = (runnerName: string) => parse(DesiredStateSchema, { state: 'run', lease, runnerName });
    expect(run('spark-x-r-3-a0')).toBe('accepted');
    for (const n of ['spark-x/..', 'spark-x!'])
      expect(run(n), n).toBe('runnerName: runner names are one plain name like "spark-spark-2-r-12-a0"');
  });
});

describe('host facts and reports', () => {
  const facts = {
    gpuProcesses: [],
    freeDiskBytes: 1e12,
    serviceState: 'none',
    runnerState: 'none',
    interconnectOk: true,
    executor: 'dstack',
  };

  it('dstack enrolment: a fleet name of lower-case letters, digits and dashes, and a short detail', () => {
    const dstack = { fleet: 'spark-fleet', ok: true, detail: 'enrolled' };
    expect(parse(HostFactsSchema, { ...facts, dstack })).toBe('accepted');
    expect(parse(HostFactsSchema, { ...facts, dstack: { ...dstack, fleet: 'sp' } })).toBe('accepted');
    for (const fleet of [' spark', 'spark ', 'Spark', '1spark', 's', `s${'x'.repeat(41)}`, 'spark_fleet'])
      expect(parse(HostFactsSchema, { ...facts, dstack: { ...dstack, fleet } }), fleet).toMatch(
        /^dstack\.fleet: /,
      );
    expect(parse(HostFactsSchema, { ...facts, dstack: { ...dstack, detail: 'd'.repeat(501) } })).toMatch(
      /^dstack\.detail: /,
    );
  });

  it('a heartbeat answer keeps its interval', () => {
    expect(parse(HeartbeatResponseSchema, { heartbeatIntervalS: 10 })).toBe('accepted');
  });

  it('cleanup_failed and service_down carry a reason of 1 to 1000 characters', () => {
    for (const type of ['cleanup_failed', 'service_down']) {
      expect(parse(ReportSchema, { type, fencingToken: 3, reason: 'work area would not go' }), type).toBe(
        'accepted',
      );
      expect(parse(ReportSchema, { type, fencingToken: 3, reason: '' }), type).toMatch(/^reason: /);
      expect(parse(ReportSchema, { type, fencingToken: 3, reason: 'r'.repeat(1001) }), type).toMatch(
        /^reason: /,
      );
    }
    expect(parse(ReportSchema, { type: 'service_down', fencingToken: 0, reason: 'x' })).toBe('accepted');
  });
});
