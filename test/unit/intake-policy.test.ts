import { describe, expect, it } from 'vitest';
import { echoSpan, parseSparkCommand } from '../../functions/github/commands.ts';
import {
  commandRefusal,
  isForkPr,
  mergePushRefusal,
  pairDisabledReason,
  pushRefusal,
  refusalFor,
} from '../../functions/github/intake/policy.ts';

/** The refusal decision of webhook intake, without a database. */

const pr = (over: { state?: string; head?: string | null; base?: string } = {}) => ({
  number: 7,
  state: over.state ?? 'open',
  head: { repo: over.head === null ? null : { full_name: over.head ?? 'acme/butter' } },
  base: { repo: { full_name: over.base ?? 'acme/butter' } },
});
const repo = { fullName: 'acme/butter', pairEnabled: false };
const allowed = { allowed: true, reason: '@alice has maintain' };
const denied = { allowed: false, reason: '@mallory has read; maintain or admin is required' };

describe('fork detection', () => {
  it('a head repository other than the base, or a deleted one, is a fork', () => {
    expect(isForkPr(pr())).toBe(false);
    expect(isForkPr(pr({ head: 'mallory/butter' }))).toBe(true);
    expect(isForkPr(pr({ head: null }))).toBe(true);
  });
  it('compares names the way GitHub does: case-insensitively', () => {
    expect(isForkPr(pr({ head: 'ACME/Butter' }))).toBe(false);
  });
});

describe('refusalFor (label and /spark command)', () => {
  it('lets an authorized sender test an open PR', () => {
    expect(refusalFor({ pr: pr(), auth: allowed, topology: 'single', repo })).toBeNull();
    expect(refusalFor({ pr: pr(), auth: allowed, topology: null, repo })).toBeNull();
  });

  it('refuses a fork first, naming the head repository, without a permission answer', () => {
    expect(refusalFor({ pr: pr({ head: 'mallory/butter' }), auth: null, topology: 'single', repo })).toBe(
      'PR #7 comes from a fork (mallory/butter); fork PRs never run on Spark hardware',
    );
    expect(refusalFor({ pr: pr({ head: null }), auth: null, topology: 'single', repo })).toMatch(
      /\(deleted repository\)/,
    );
    // a fork is refused even when it is also closed and asks for a pair
    expect(
      refusalFor({ pr: pr({ head: 'mallory/butter', state: 'closed' }), auth: null, topology: 'pair', repo }),
    ).toMatch(/comes from a fork/);
  });

  it('refuses a sender without the permission with the authorizer’s reason', () => {
    expect(refusalFor({ pr: pr(), auth: denied, topology: 'single', repo })).toBe(denied.reason);
    // permission is checked before the PR state
    expect(refusalFor({ pr: pr({ state: 'closed' }), auth: denied, topology: 'single', repo })).toBe(
      denied.reason,
    );
  });

  it('refuses a PR that is not open', () => {
    expect(refusalFor({ pr: pr({ state: 'closed' }), auth: allowed, topology: 'single', repo })).toBe(
      'PR #7 is closed; only open PRs are tested',
    );
    expect(refusalFor({ pr: pr({ state: 'closed' }), auth: allowed, topology: null, repo })).toMatch(
      /is closed/,
    );
  });

  it('refuses a pair test while the repository has no distributed test, and only a pair test', () => {
    expect(refusalFor({ pr: pr(), auth: allowed, topology: 'pair', repo })).toBe(
      pairDisabledReason('acme/butter'),
    );
    expect(pairDisabledReason('acme/butter')).toMatch(
      /not enabled for acme\/butter; an operator must enable/,
    );
    expect(
      refusalFor({ pr: pr(), auth: allowed, topology: 'pair', repo: { ...repo, pairEnabled: true } }),
    ).toBeNull();
    expect(refusalFor({ pr: pr(), auth: allowed, topology: 'single', repo })).toBeNull();
  });

  it('a non-fork without a permission answer is a programming error, not a pass', () => {
    expect(() => refusalFor({ pr: pr(), auth: null, topology: 'single', repo })).toThrow(TypeError);
  });
});

describe('pushRefusal (new commits on a PR, ADR 0003)', () => {
  it('never requeues a fork', () => {
    expect(pushRefusal({ fork: true, auth: allowed, sender: 'alice' })).toBe(
      'new commits on a fork PR are never queued',
    );
  });
  it('requeues only for an authorized pusher and says what a maintainer must do otherwise', () => {
    expect(pushRefusal({ fork: false, auth: allowed, sender: 'alice' })).toBeNull();
    expect(pushRefusal({ fork: false, auth: denied, sender: 'mallory' })).toMatch(
      /^new commits pushed by @mallory were not queued: @mallory has read; .* re-apply the label or comment "\/spark test"/,
    );
    expect(pushRefusal({ fork: false, auth: null, sender: 'mallory' })).toMatch(/sender not authorized/);
  });
});

describe('commandRefusal (authorize first)', () => {
  const invalid = { kind: 'invalid' as const, message: 'unknown command `/spark deploy`' };
  it('refuses a stranger for lack of permission whatever the command says', () => {
    expect(commandRefusal({ pr: pr(), auth: denied, command: invalid, repo })).toBe(denied.reason);
    expect(
      commandRefusal({ pr: pr({ head: 'mallory/butter' }), auth: null, command: invalid, repo }),
    ).toMatch(/comes from a fork/);
  });
  it('an authorized sender gets the invalid command explained, then state and pair checks', () => {
    expect(commandRefusal({ pr: pr(), auth: allowed, command: invalid, repo })).toBe(invalid.message);
    expect(
      commandRefusal({ pr: pr(), auth: allowed, command: { kind: 'test', topology: 'pair' }, repo }),
    ).toBe(pairDisabledReason('acme/butter'));
    expect(
      commandRefusal({ pr: pr({ state: 'closed' }), auth: allowed, command: { kind: 'other' }, repo }),
    ).toMatch(/is closed/);
    expect(
      commandRefusal({ pr: pr(), auth: allowed, command: { kind: 'test', topology: 'single' }, repo }),
    ).toBeNull();
  });
});

describe('echoSpan and command parsing (echo at most 80 characters)', () => {
  it('bounds and neutralizes echoed text', () => {
    const span = echoSpan(`a\`b\n${'x'.repeat(500)}`);
    expect(span.startsWith('`') && span.endsWith('`')).toBe(true);
    expect(span.slice(1, -1)).not.toMatch(/[`\n]/);
    expect(span.length - 2).toBeLessThanOrEqual(80);
  });
  it('a 64 KB option list is echoed in 80 characters at most', () => {
    const cmd = parseSparkCommand(`/spark test ${'--x '.repeat(16_000)}`);
    expect(cmd?.kind).toBe('invalid');
    expect((cmd as { message: string }).message.length).toBeLessThan(200);
  });
});

describe('mergePushRefusal (ADR 0003: merge CI needs the pusher permission)', () => {
  it('queues for an authorized pusher and refuses others, naming the commit', () => {
    expect(mergePushRefusal({ auth: allowed, sender: 'alice', sha: 'a'.repeat(40) })).toBeNull();
    expect(mergePushRefusal({ auth: denied, sender: 'mallory', sha: 'b'.repeat(40) })).toMatch(
      /^merge CI for bbbbbbb was not queued: the push by @mallory is not authorized/,
    );
  });
});
