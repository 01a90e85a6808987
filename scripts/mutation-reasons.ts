// biome-ignore-all lint/suspicious/noTemplateCurlyInString: the entries quote source code, template placeholders included
/**
 * Why each mutant of `core/` that no test kills is equivalent: no input the code can receive makes
 * it observable. `scripts/mutation-report.ts` matches a survivor to an entry by file, mutator and a
 * piece of the mutated line (`code`), optionally of the replacement, so an entry survives line
 * shifts but not a change of the code it is about. A survivor without an entry is "open" in
 * docs/mutation-testing.md: a test to write, not a reason to add.
 */
import { LATE_REASONS } from './mutation-reasons-late.ts';

export interface Reason {
  file: string;
  mutator: string;
  /** Text of the mutated line (or of the mutated code) the entry is about. */
  code: string;
  /** Text of the mutated line as the mutant reads it, when one line has mutants of the same kind with different verdicts. */
  replacement?: string;
  reason: string;
}

const LOOKUPS = 'core/config-lookups.ts';
const OWN_KEY =
  'reached only for a key `Object.hasOwn` found among the repositories, and zod gives every entry an object: the `?.` never meets `undefined`.';
const NO_ENTRY =
  'without the check a missing or inherited key (`constructor`, `toString`) reads the field of a function, `undefined`: the same default either way (`executor-per-repo` asserts `constructor`); a null repository reads the key `"null"`, missing too.';
const MERGE_DEFAULT =
  'zod defaults `mergeCi` to `true`, so a found entry always has a boolean: `?? true` never applies, and `b && true` is `b`.';

export const REASONS: Reason[] = [
  { file: LOOKUPS, mutator: 'ConditionalExpression', code: 'return null;', reason: NO_ENTRY },
  { file: LOOKUPS, mutator: 'LogicalOperator', code: 'return null;', reason: NO_ENTRY },
  { file: LOOKUPS, mutator: 'ConditionalExpression', code: "return 'runner';", reason: NO_ENTRY },
  { file: LOOKUPS, mutator: 'LogicalOperator', code: "return 'runner';", reason: NO_ENTRY },
  { file: LOOKUPS, mutator: 'OptionalChaining', code: '?.executor', reason: OWN_KEY },
  { file: LOOKUPS, mutator: 'OptionalChaining', code: '?.ci ??', reason: OWN_KEY },
  { file: LOOKUPS, mutator: 'OptionalChaining', code: '?.cloneUrl', reason: OWN_KEY },
  { file: LOOKUPS, mutator: 'OptionalChaining', code: '?.mergeCi', reason: OWN_KEY },
  { file: LOOKUPS, mutator: 'LogicalOperator', code: '?.mergeCi ?? true', reason: MERGE_DEFAULT },
  {
    file: LOOKUPS,
    mutator: 'BooleanLiteral',
    code: '?.mergeCi ?? true',
    replacement: '?.mergeCi ?? false',
    reason: MERGE_DEFAULT,
  },
];

const ETA = 'core/eta.ts';
const BOTH_NULL =
  'both simulations give a host list with the same ids and the same eligibility rules, so `startLo` and `startHi` are null together.';

REASONS.push(
  {
    file: ETA,
    mutator: 'ConditionalExpression',
    code: 'if (sorted.length === 0) return 0;',
    reason:
      'a quantile is only taken of a level with at least `MIN_SAMPLES` (5) samples, never of an empty list.',
  },
  {
    file: ETA,
    mutator: 'ConditionalExpression',
    code: 'if (hit) return hit;',
    reason: 'the cache only saves recomputing the same stats for a class seen before (speed only).',
  },
  {
    file: ETA,
    mutator: 'EqualityOperator',
    code: 'end > a.expiresAt) end = Math.max(now, a.expiresAt)',
    replacement: 'end >= a.expiresAt',
    reason:
      'when `end` equals the expiry, `Math.max(now, expiry)` is that same `end` (`end` is never before `now` here).',
  },
  {
    file: ETA,
    mutator: 'ConditionalExpression',
    code: "const n = r.topology === 'pair' ? 2 : 1;",
    replacement: 'const n = true ?',
    reason:
      'unreachable for single work: with a schedulable host and no target a single request always gets a start, so this reason only ever explains a pair.',
  },
  {
    file: ETA,
    mutator: 'LogicalOperator',
    code: 'startHi: startHi == null || startLo == null',
    reason: BOTH_NULL,
  },
  {
    file: ETA,
    mutator: 'ConditionalExpression',
    code: 'startHi: startHi == null || startLo == null',
    replacement: 'false',
    reason: BOTH_NULL,
  },
  {
    file: ETA,
    mutator: 'EqualityOperator',
    code: 'if (s < 90) return',
    replacement: 's <= 90',
    reason: 'at exactly 90 s both branches give "2 min".',
  },
  {
    file: ETA,
    mutator: 'EqualityOperator',
    code: 'h < 10 ? Math.round(h * 10) / 10',
    replacement: 'h <= 10',
    reason: 'at exactly 10 h both branches give "10 h".',
  },
  {
    file: ETA,
    mutator: 'Regex',
    code: 'a.replace(/ (min|h)$/,',
    reason:
      'a duration text is `<number> min` or `<number> h`: the unit occurs once, at the end, so the anchor changes nothing.',
  },
  {
    file: ETA,
    mutator: 'StringLiteral',
    code: "a.endsWith(' h') && b.endsWith(' h')",
    replacement: 'b.endsWith("")',
    reason:
      'the late end `b` is never shorter than the early one `a`, so when `a` is in hours so is `b`: the second test is always true where it is reached.',
  },
  {
    file: 'core/model.ts',
    mutator: 'ConditionalExpression',
    code: 'return s != null && has(JOB_OUTCOMES, s);',
    replacement: 'return true && has',
    reason: '`has(JOB_OUTCOMES, null)` is false anyway.',
  },
);

const ISSUE_CODE =
  'the issue code is never shown: a config or receipt error renders `path: message` (asserted), and zod keeps a custom issue whatever its `code`.';

REASONS.push(
  { file: 'core/config-schema.ts', mutator: 'StringLiteral', code: "code: 'custom'", reason: ISSUE_CODE },
  { file: 'core/protocol/receipt.ts', mutator: 'StringLiteral', code: "code: 'custom'", reason: ISSUE_CODE },
  {
    file: 'core/config-schema.ts',
    mutator: 'ConditionalExpression',
    code: 'if (l.maxTtlS != null && l.maxTtlS > cfg.timings.devLeaseMaxTtlS)',
    replacement: 'if (true && l.maxTtlS',
    reason: 'with no `maxTtlS`, `undefined > n` is false: the null check only states the intent.',
  },
  {
    file: 'core/config.ts',
    mutator: 'StringLiteral',
    code: "return parseConfig({}, 'defaults');",
    reason: 'the source only appears in an error, and the defaults always parse.',
  },
  {
    file: 'core/config.ts',
    mutator: 'Regex',
    code: "raw.replace(/[?#].*$/s, '')",
    reason: 'with the `s` flag `.*` runs to the end of the text, so the `$` anchor changes nothing.',
  },
);

const FLEET = 'core/admission-fleet.ts';
const LEASES = 'core/admission-leases.ts';
const BUDGETS = 'core/admission-budgets.ts';
const QUEUE = 'core/admission-queue.ts';
const HOT_PATH =
  'the hot path only short-cuts what the general path computes for the same request (no free host: claim the busy hosts it is next in line for, then `hosts-busy` with the same pool text); docs/adr/0060-admission-pass-cost.md.';
const NO_STALE_TEXT =
  'a pool text is computed only once the pool has no free host; after that no hold or grant happens in it in the same pass, so the cached text is never stale here (speed only).';
const TEXT_SAME =
  'recomputing the pool text gives the same text: the cache is dropped whenever the text can change (speed only).';
const NOT_FREE =
  'unreachable: a pool text is computed only once the pool has no free host left (the hot path requires it; a shortage holds every free host), so no listed host is free and not held.';
const OTHER_LEASE =
  'reached only for a lease whose reservation is not active; such a reservation is absent from the input (the ledger passes only open reservations, and a reservation is queued only when created, before it has a lease), so the search finds nothing and the lease counts either way.';
const IN_LIST = '`removeFree` is only called for hosts taken from that very pool list.';

REASONS.push(
  {
    file: FLEET,
    mutator: 'ConditionalExpression',
    code: 'return host.lastHeartbeatAt != null && now',
    replacement: 'return true && now',
    reason:
      '`now - null` is `now`, far beyond any `offlineAfterS`: a host never heard from is offline either way.',
  },
  {
    file: FLEET,
    mutator: 'ConditionalExpression',
    code: "if (b.kind === 'out' && b.note) plan.hostNotes",
    replacement: 'if (true && b.note)',
    reason: 'only an `out` standing carries `note`, so `b.note` alone decides.',
  },
  {
    file: FLEET,
    mutator: 'ConditionalExpression',
    code: "(b.kind === 'free' && b.state === 'service' ? 1_000_000 : 0)",
    replacement: "(true && b.state === 'service'",
    reason:
      'the rank only orders free lists; a busy host in state `service` is in none (busy standings are `allocated`, `cleaning` or `restoring`).',
  },
  {
    file: FLEET,
    mutator: 'EqualityOperator',
    code: 'for (let i = 0; i < sortedIds.length; i++)',
    replacement: 'i <= sortedIds.length',
    reason: 'one extra step ranks `undefined`, which is no host id.',
  },
  { file: FLEET, mutator: 'ConditionalExpression', code: 'if (!list) return;', reason: IN_LIST },
  { file: FLEET, mutator: 'BooleanLiteral', code: 'if (!list) return;', reason: IN_LIST },
  {
    file: FLEET,
    mutator: 'ConditionalExpression',
    code: 'if (i >= 0) list.splice(i, 1);',
    replacement: 'if (true)',
    reason: IN_LIST,
  },
  {
    file: FLEET,
    mutator: 'EqualityOperator',
    code: 'if (i >= 0) list.splice(i, 1);',
    replacement: 'i > 0',
    reason: IN_LIST,
  },
  {
    file: LEASES,
    mutator: 'MethodExpression',
    code: 'healthyHosts: hostIds.filter((id) => !lost.includes(id)).sort(byHostId)',
    reason: 'a pair has two nodes, so when one is lost at most one is healthy: nothing to sort.',
  },
  {
    file: LEASES,
    mutator: 'BooleanLiteral',
    code: 'const fresh = host ? isHeartbeatFresh(host, now, offlineAfterS) : false;',
    reason:
      'with no host, `procs` is `undefined` too, so `clean` is false either way: the lease is `release-required`.',
  },
  {
    file: LEASES,
    mutator: 'ConditionalExpression',
    code: 'if (queueOrder(queued[i - 1]!, queued[i]!) > 0) {',
    reason:
      'the ledger loads queued work in admission order and the sort is stable: sorting an ordered list again changes nothing (speed only, docs/adr/0060-admission-pass-cost.md).',
  },
  {
    file: LEASES,
    mutator: 'EqualityOperator',
    code: 'if (queueOrder(queued[i - 1]!, queued[i]!) > 0) {',
    replacement: '>= 0',
    reason:
      'the ledger loads queued work in admission order and the sort is stable: sorting an ordered list again changes nothing (speed only, docs/adr/0060-admission-pass-cost.md).',
  },
  {
    file: BUDGETS,
    mutator: 'MethodExpression',
    code: '!input.reservations.some((r) => r.id === rid)',
    reason: OTHER_LEASE,
  },
  {
    file: BUDGETS,
    mutator: 'ArrowFunction',
    code: '!input.reservations.some((r) => r.id === rid)',
    reason: OTHER_LEASE,
  },
  {
    file: BUDGETS,
    mutator: 'ConditionalExpression',
    code: '!input.reservations.some((r) => r.id === rid)',
    replacement: '=> false',
    reason: OTHER_LEASE,
  },
  {
    file: BUDGETS,
    mutator: 'LogicalOperator',
    code: '!input.reservations.some((r) => r.id === rid)',
    reason: OTHER_LEASE,
  },
  {
    file: BUDGETS,
    mutator: 'ConditionalExpression',
    code: 'if (!keptSlots?.length) return keptOnly;',
    replacement: 'if (false)',
    reason: 'with no kept slots the loop keeps nothing: the same empty set.',
  },
  {
    file: QUEUE,
    mutator: 'ConditionalExpression',
    code: 'if (candidates.length > 0) this.poolBusyReason.delete(pool);',
    reason: NO_STALE_TEXT,
  },
  {
    file: QUEUE,
    mutator: 'EqualityOperator',
    code: 'if (candidates.length > 0) this.poolBusyReason.delete(pool);',
    reason: NO_STALE_TEXT,
  },
  {
    file: QUEUE,
    mutator: 'Regex',
    code: "replace(/^waiting for a host in/, 'waiting for a second host in')",
    reason: 'the pool text always starts with the phrase, so the anchor changes nothing.',
  },
  {
    file: QUEUE,
    mutator: 'StringLiteral',
    code: "`holding ${candidates.map((h) => h.id).join(', ')}",
    replacement: '.join("")',
    reason:
      'a blocked pair holds at most one host (it would be granted with two), so the join has one element.',
  },
  {
    file: QUEUE,
    mutator: 'ConditionalExpression',
    code: 'if (claimed > 0) this.claimChangesText(pool);',
    reason: TEXT_SAME,
  },
  {
    file: QUEUE,
    mutator: 'EqualityOperator',
    code: 'if (claimed > 0) this.claimChangesText(pool);',
    replacement: 'claimed >= 0',
    reason: TEXT_SAME,
  },
  {
    file: QUEUE,
    mutator: 'ConditionalExpression',
    code: 'if (this.fleet.poolHosts.get(pool)!.length <= LIST_HOSTS_UP_TO) this.poolBusyReason.delete(pool);',
    replacement: 'if (true)',
    reason: TEXT_SAME,
  },
  {
    file: QUEUE,
    mutator: 'ConditionalExpression',
    code: 'if (cached) return cached;',
    replacement: 'if (false)',
    reason: TEXT_SAME,
  },
  {
    file: QUEUE,
    mutator: 'ConditionalExpression',
    code: "return b.kind === 'free' ? `${h.id} free` : b.why;",
    reason: NOT_FREE,
  },
  {
    file: QUEUE,
    mutator: 'StringLiteral',
    code: "return b.kind === 'free' ? `${h.id} free` : b.why;",
    reason: NOT_FREE,
  },
  {
    file: QUEUE,
    mutator: 'EqualityOperator',
    code: "return b.kind === 'free' ? `${h.id} free` : b.why;",
    reason: NOT_FREE,
  },
  {
    file: QUEUE,
    mutator: 'ConditionalExpression',
    code: 'else if (this.held.has(h.id)) kept++;',
    replacement: 'else if (true)',
    reason:
      'a host that is neither busy nor out is free, and every free host of a pool being described is held.',
  },
  {
    file: QUEUE,
    mutator: 'OptionalChaining',
    code: "if (b?.kind === 'free' && !this.held.has(targetId) && target?.homeService)",
    replacement: 'target.homeService',
    reason:
      "a target missing from the fleet has no standing either, so `b?.kind === 'free'` is false before `target.homeService` is read.",
  },
  {
    file: QUEUE,
    mutator: 'LogicalOperator',
    code: 'if (!target || !b || target.pool !== pool)',
    replacement: '!target && !b',
    reason: 'every host of the fleet has a standing, so `!target` and `!b` are always equal.',
  },
  {
    file: QUEUE,
    mutator: 'ConditionalExpression',
    code: 'if (need <= 1) return [target];',
    replacement: 'if (false)',
    reason: 'for a single request `others.slice(0, 0)` adds nothing: `[target]` either way.',
  },
  {
    file: QUEUE,
    mutator: 'EqualityOperator',
    code: 'if (need <= 1) return [target];',
    replacement: 'need < 1',
    reason: 'for a single request `others.slice(0, 0)` adds nothing: `[target]` either way.',
  },
  {
    file: QUEUE,
    mutator: 'ArrayDeclaration',
    code: 'const others = (this.fleet.freeByPool.get(pool) ?? [])',
    reason: "unreachable: a free, unheld target is in its pool's free list, so the list exists.",
  },
  {
    file: QUEUE,
    mutator: 'ConditionalExpression',
    code: "`${target.id} draining: ${b.kind === 'busy' ? b.why : ''}; active job finishing`",
    reason: 'unreachable: in that branch the target is not held, so it is busy.',
  },
  {
    file: QUEUE,
    mutator: 'StringLiteral',
    code: "`${target.id} draining: ${b.kind === 'busy' ? b.why : ''}; active job finishing`",
    replacement: '"Stryker was here!"',
    reason: 'unreachable: in that branch the target is not held, so it is busy.',
  },
  {
    file: QUEUE,
    mutator: 'ConditionalExpression',
    code: 'if ((!free || free.length === 0) && need <= schedulable)',
    reason: HOT_PATH,
  },
  {
    file: QUEUE,
    mutator: 'LogicalOperator',
    code: 'if ((!free || free.length === 0) && need <= schedulable)',
    reason: HOT_PATH,
  },
  {
    file: QUEUE,
    mutator: 'EqualityOperator',
    code: 'if ((!free || free.length === 0) && need <= schedulable)',
    reason: HOT_PATH,
  },
  {
    file: QUEUE,
    mutator: 'StringLiteral',
    code: 'if ((!free || free.length === 0) && need <= schedulable)',
    reason: HOT_PATH,
  },
  {
    file: QUEUE,
    mutator: 'BlockStatement',
    code: 'if ((!free || free.length === 0) && need <= schedulable)',
    reason: HOT_PATH,
  },
);

REASONS.push(
  {
    file: FLEET,
    mutator: 'ConditionalExpression',
    code: 'default:',
    reason:
      'without its `return null` the `default` case falls out of the switch and the function returns `undefined`, which the caller tests the same way (`if (phase)`).',
  },
  {
    file: LEASES,
    mutator: 'ArrayDeclaration',
    code: 'const active: ReservationRecord[] = [];',
    reason:
      'a string in the list of active work has no leases and no repository: it adds 0 GPUs and no budget slot (the pair and lease steps read `activeById`).',
  },
  {
    file: QUEUE,
    mutator: 'ConditionalExpression',
    code: "return b.kind === 'free' && b.state === 'service';",
    replacement: "return true && b.state === 'service'",
    reason:
      "granted hosts are candidates, and candidates are free hosts: `b.kind === 'free'` is always true here (the state decides).",
  },
  {
    file: QUEUE,
    mutator: 'ArrayDeclaration',
    code: 'const hosts = this.fleet.poolHosts.get(pool) ?? [];',
    reason:
      'unreachable: a pool is described only for a request whose pool has hosts (otherwise it waits `pool-too-small`).',
  },
  {
    file: 'core/config-schema.ts',
    mutator: 'OptionalChaining',
    code: 'rc?.',
    reason:
      '`rc` is the entry of a key taken from `Object.keys` of the same record, and zod makes every entry an object: the `?.` never meets `undefined`.',
  },
);

REASONS.push(...LATE_REASONS);
