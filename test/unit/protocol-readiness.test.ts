import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import {
  DoctorResponse,
  EnableBody,
  EnableRefused,
  EnableResponse,
  failing,
  OVERRIDABLE_CHECKS,
  type ReadinessReport,
} from '../../core/protocol/readiness.ts';
import { describeIssues } from '../../core/protocol/receipt.ts';

/**
 * The readiness wire shapes (core/protocol/readiness.ts, docs/adr/0165-enable-is-a-gate.md): the
 * controller answers them and sparkctl parses them, so a parse keeps every documented field, and
 * `enable`'s body refuses what the gate cannot take with a message that says what to fix.
 */
function accepts(schema: z.ZodType, value: unknown) {
  const r = schema.safeParse(value);
  expect(r.success ? r.data : describeIssues(r.error)).toEqual(value);
}
function refuses(schema: z.ZodType, value: unknown, message?: string | RegExp) {
  const r = schema.safeParse(value);
  expect(r.success, `accepted ${JSON.stringify(value)}`).toBe(false);
  if (message && !r.success) expect(describeIssues(r.error)).toMatch(message);
}

const report: ReadinessReport = {
  repository: 'acme/butter',
  ok: false,
  checks: [
    { id: 'installation', status: 'ok', summary: 'installed (id 7)', fix: null },
    { id: 'labels', status: 'warn', summary: '1 label missing', fix: 'create it' },
    { id: 'hosts', status: 'fail', summary: 'spark-1 never sent a heartbeat', fix: 'start the agent' },
    { id: 'deckard', status: 'fail', summary: 'no verified restore', fix: 'sparkctl deckard drill' },
  ],
  labelsToCreate: [{ name: 'spark:test', color: '0e8a16', description: 'run the Spark suite' }],
};

describe('readiness answers', () => {
  it('a doctor answer keeps the fleet and every repository report', () => {
    accepts(DoctorResponse, { ok: false, fleet: { ...report, repository: null }, repositories: [report] });
  });

  it('an enable answer keeps the repository, the report, the overrides and the labels', () => {
    accepts(EnableResponse, {
      repository: {
        fullName: 'acme/butter',
        installationId: 7,
        defaultBranch: 'main',
        pairEnabled: true,
        workflow: 'spark-pr-test.yml',
        enabled: true,
      },
      readiness: report,
      overridden: [{ id: 'hosts', summary: 'spark-1 never sent a heartbeat' }],
      labelsCreated: ['spark:test'],
      labelsExisting: ['spark:pair'],
      labelsFailed: [],
      labelsToCreate: [],
    });
  });

  it('a refused enable is the 409 not_ready answer with its report', () => {
    accepts(EnableRefused, { error: { code: 'not_ready', message: 'hosts: fail' }, readiness: report });
    refuses(EnableRefused, { error: { code: 'conflict', message: 'x' }, readiness: report });
  });

  it('failing lists the checks that refuse, in order', () => {
    expect(failing(report).map((c) => c.id)).toEqual(['hosts', 'deckard']);
    expect(failing({ checks: report.checks.slice(0, 2) })).toEqual([]);
  });
});

describe('enable body', () => {
  it('takes the documented options', () => {
    accepts(EnableBody, {});
    accepts(EnableBody, {
      pairEnabled: true,
      installationId: 7,
      workflow: 'spark-pr-test.yml',
      override: ['hosts', 'deckard'],
    });
    accepts(EnableBody, { workflow: 'a' });
    accepts(EnableBody, { workflow: 'w'.repeat(200) });
    accepts(EnableBody, { override: [...OVERRIDABLE_CHECKS] });
    refuses(EnableBody, { extra: 1 });
  });

  it('a workflow is one file name under .github/workflows, nothing around it', () => {
    const msg = 'workflow: a workflow is a file name under .github/workflows, e.g. "spark-pr-test.yml"';
    for (const workflow of ['', 'w'.repeat(201), '../ci.yml', 'dir/ci.yml', 'ci.yml ', ' ci.yml', 'ci yml'])
      refuses(EnableBody, { workflow }, msg);
  });

  it('overrides name overridable checks, each at most once in count', () => {
    refuses(
      EnableBody,
      { override: ['installation'] },
      'override.0: override names checks among permissions, runner-group, workflow, hosts, dstack, deckard (the installation and the labels cannot be overridden)',
    );
    refuses(EnableBody, { override: [...OVERRIDABLE_CHECKS, 'hosts'] });
  });
});
