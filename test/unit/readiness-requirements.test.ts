import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../core/config.ts';
import { formatCheck } from '../../core/protocol/readiness.ts';
import { ago } from '../../functions/github/readiness-fleet.ts';
import { requirements } from '../../functions/github/readiness-github.ts';

/**
 * What a repository needs of the App installation (docs/github-app.md "Minimum permissions",
 * docs/adr/0165-enable-is-a-gate.md), by runner scope and CI mode, and how a check is printed.
 */
describe('readiness requirements', () => {
  const needs = (cfg: unknown, repo = 'acme/butter') => {
    const r = requirements(parseConfig(cfg), repo);
    return { permissions: r.permissions.map((p) => `${p.key}:${p.access}`), events: r.events };
  };

  it('organization runners (the default): the spec’s list plus Organization → Self-hosted runners', () => {
    expect(needs({ github: { runnerGroupId: 2 } })).toEqual({
      permissions: [
        'actions:write',
        'checks:write',
        'contents:read',
        'metadata:read',
        'pull_requests:read',
        'issues:read',
        'organization_self_hosted_runners:write',
      ],
      events: ['pull_request', 'issue_comment', 'push', 'workflow_job'],
    });
  });

  it('repository runners need Administration instead', () => {
    expect(needs({ github: { runnerScope: 'repo' } }).permissions).toContain('administration:write');
    expect(needs({ github: { runnerScope: 'repo' } }).permissions).not.toContain(
      'organization_self_hosted_runners:write',
    );
  });

  it('a CI task needs neither Actions nor a runner scope nor workflow_job; merge CI off drops push', () => {
    const task = needs({
      github: { runnerGroupId: 2 },
      repositories: { 'acme/butter': { executor: 'dstack', ci: 'task', mergeCi: false } },
    });
    expect(task).toEqual({
      permissions: ['checks:write', 'contents:read', 'metadata:read', 'pull_requests:read', 'issues:read'],
      events: ['pull_request', 'issue_comment'],
    });
    // another repository keeps the whole list
    expect(needs({ repositories: { 'acme/butter': { mergeCi: false } } }, 'acme/iron').events).toContain(
      'push',
    );
  });

  it('prints one line per check, the fix after a dash; ages in words', () => {
    expect(
      formatCheck({
        id: 'hosts',
        status: 'fail',
        summary: 'spark-1 is not adopted',
        fix: 'sparkctl host adopt spark-1',
      }),
    ).toBe('fail hosts         spark-1 is not adopted — fix: sparkctl host adopt spark-1');
    expect(formatCheck({ id: 'runner-group', status: 'ok', summary: 'fine', fix: null })).toBe(
      'ok   runner-group  fine',
    );
    expect([ago(41_000), ago(600_000), ago(3 * 3_600_000), ago(3 * 86_400_000)]).toEqual([
      '41 s',
      '10 min',
      '3 h',
      '3 d',
    ]);
  });
});
