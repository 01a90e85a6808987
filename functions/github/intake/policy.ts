import type { Topology } from '../../../core/model.ts';

/**
 * The refusal decision for webhook intake (docs/architecture.md "GitHub integration": a fork PR is never
 * admitted; the sender must hold the configured permission; only open PRs are tested; pair tests
 * are refused while a repository has no distributed test enabled). Pure: every fact comes in as
 * a value, so it is unit-tested without a database (test/unit/intake-policy.test.ts).
 */

/** The parts of a pull request the policy reads (webhook payload or REST resource). */
export interface PrFacts {
  number: number;
  state: string;
  head: { repo: { full_name: string } | null };
  base: { repo: { full_name: string } };
}

/** The permission check's answer for the sender (null when it was not asked: a fork). */
export interface AuthFacts {
  allowed: boolean;
  reason: string;
}

/**
 * A PR whose head repository differs from its base repository (or was deleted) is a fork.
 * GitHub compares names case-insensitively.
 */
export function isForkPr(pr: Pick<PrFacts, 'head' | 'base'>): boolean {
  return (
    pr.head.repo == null || pr.head.repo.full_name.toLowerCase() !== pr.base.repo.full_name.toLowerCase()
  );
}

/** The one message a refused pair test gets. */
export function pairDisabledReason(repo: string): string {
  return `pair (distributed) tests are not enabled for ${repo}; an operator must enable them first`;
}

/**
 * Why a request to test a PR (a Spark label, or a `/spark` command) is refused, or null when it
 * may proceed. Checked in this order: fork, permission, PR state, and — for a test request
 * (`topology` given) — pair enablement. `auth` is null only for a fork (not asked).
 */
export function refusalFor(f: {
  pr: PrFacts;
  auth: AuthFacts | null;
  topology: Topology | null;
  repo: { fullName: string; pairEnabled: boolean };
}): string | null {
  const { pr } = f;
  if (isForkPr(pr)) {
    return `PR #${pr.number} comes from a fork (${pr.head.repo?.full_name ?? 'deleted repository'}); fork PRs never run on Spark hardware`;
  }
  if (!f.auth) throw new TypeError('refusalFor: a PR that is not a fork needs the sender permission check');
  if (!f.auth.allowed) return f.auth.reason;
  if (pr.state !== 'open') return `PR #${pr.number} is ${pr.state}; only open PRs are tested`;
  if (f.topology === 'pair' && !f.repo.pairEnabled) return pairDisabledReason(f.repo.fullName);
  return null;
}

/**
 * Why new commits pushed to a PR are not queued again (ADR 0003: only when the pusher is
 * authorized, because nobody authorized has seen those commits otherwise), or null.
 */
export function pushRefusal(f: { fork: boolean; auth: AuthFacts | null; sender: string }): string | null {
  if (f.fork) return 'new commits on a fork PR are never queued';
  if (!f.auth?.allowed) {
    return `new commits pushed by @${f.sender} were not queued: ${f.auth?.reason ?? 'sender not authorized'}. A maintainer must re-apply the label or comment "/spark test" after reviewing them`;
  }
  return null;
}

/**
 * Why a `/spark` command is refused, or null. Authorization comes first: a
 * fork or a sender without the permission is refused before the command is even looked at, so a
 * stranger's malformed command costs no more than a well-formed one and never has its text
 * echoed; then an invalid command; then the PR state and pair enablement (`refusalFor`).
 */
export function commandRefusal(f: {
  pr: PrFacts;
  auth: AuthFacts | null;
  command: { kind: 'invalid'; message: string } | { kind: 'test'; topology: Topology } | { kind: 'other' };
  repo: { fullName: string; pairEnabled: boolean };
}): string | null {
  const { pr } = f;
  if (isForkPr(pr) || !f.auth?.allowed) return refusalFor({ pr, auth: f.auth, topology: null, repo: f.repo });
  if (f.command.kind === 'invalid') return f.command.message;
  return refusalFor({
    pr,
    auth: f.auth,
    topology: f.command.kind === 'test' ? f.command.topology : null,
    repo: f.repo,
  });
}

/** Refusals to one PR commit are written at most once per this window. */
export const REFUSAL_THROTTLE_MS = 10 * 60_000;

/**
 * Why a push to the default branch is not queued for merge CI, or null (ADR 0003, "Merge CI on
 * push"): the pusher must hold the configured permission, the same check as for PR pushes.
 * Branch protection is not relied on: the controller cannot see whether it is configured, and a
 * direct push by someone with plain write access would otherwise run unreviewed code on Spark.
 */
export function mergePushRefusal(f: { auth: AuthFacts; sender: string; sha: string }): string | null {
  if (f.auth.allowed) return null;
  return `merge CI for ${f.sha.slice(0, 7)} was not queued: the push by @${f.sender} is not authorized (${f.auth.reason}). An operator can queue it after review`;
}
