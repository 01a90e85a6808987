/**
 * Why each mutant of `core/` that no test kills is equivalent: no input the code can receive makes
 * it observable. `scripts/mutation-report.ts` matches a survivor to an entry by file, mutator and a
 * piece of the mutated line (`code`), optionally of the replacement, so an entry survives line
 * shifts but not a change of the code it is about. A survivor without an entry is "open" in
 * docs/mutation-testing.md: a test to write, not a reason to add.
 */
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
