// biome-ignore-all lint/suspicious/noTemplateCurlyInString: the entries quote source code, template placeholders included
/**
 * More equivalence reasons for `scripts/mutation-reasons.ts` (same shape, same rules: one entry per
 * equivalent mutant, matched by file, mutator and a piece of the mutated line), kept apart so
 * neither file outgrows the size limit (`scripts/lint/sizes.ts`). These are the modules whose
 * survivors the first run with isolation on showed: events, the wire protocol.
 */
export const LATE_REASONS: {
  file: string;
  mutator: string;
  code: string;
  replacement?: string;
  reason: string;
}[] = [];

const EVENTS = 'core/events.ts';
const GRANTS_NOTHING =
  'every path of the mutant still ends in `leaseGrantsOfData`, which grants nothing for a row type other than the two grant rows and for data that is not an object (`test/unit/events-grants.test.ts`): the early exits only skip parsing.';

LATE_REASONS.push(
  {
    file: EVENTS,
    mutator: 'ConditionalExpression',
    code: "if (row.type !== 'reservation.allocated' && row.type !== 'lease.granted') return [];",
    reason: GRANTS_NOTHING,
  },
  {
    file: EVENTS,
    mutator: 'StringLiteral',
    code: "JSON.parse(row.dataJson ?? 'null')",
    reason: GRANTS_NOTHING,
  },
  {
    file: EVENTS,
    mutator: 'BlockStatement',
    code: '} catch {',
    reason: `data that is not JSON leaves \`data\` undefined: ${GRANTS_NOTHING}`,
  },
  {
    file: EVENTS,
    mutator: 'ArrayDeclaration',
    code: 'const leases = Array.isArray(data.leases) ? data.leases : [];',
    reason: 'the stand-in element is a string, not an object, so it grants nothing: the same empty list.',
  },
);

const API = 'core/protocol/api.ts';
const DOC_ONLY =
  "a request body's `.describe()` text is documentation of the schema only: nothing reads it (no JSON Schema is generated from the API bodies, and `cli/mcp.ts` declares its own tool input schemas), and parsing ignores it.";

LATE_REASONS.push(
  { file: API, mutator: 'StringLiteral', code: "describe('Ask for one named host", reason: DOC_ONLY },
  { file: API, mutator: 'StringLiteral', code: "describe('Lease TTL in seconds", reason: DOC_ONLY },
  {
    file: API,
    mutator: 'StringLiteral',
    code: '"A restore drill (sparkctl deckard drill)',
    reason: DOC_ONLY,
  },
  {
    file: API,
    mutator: 'StringLiteral',
    code: "describe('Seconds until the token stops working",
    reason: DOC_ONLY,
  },
);

LATE_REASONS.push({
  file: 'core/protocol/host-evidence.ts',
  mutator: 'ConditionalExpression',
  code: 'if (!json) return null;',
  replacement: 'if (false)',
  reason:
    'without the guard, `""` makes `JSON.parse` throw and `null` parses as `null`, which the schema refuses: `null` either way.',
});

LATE_REASONS.push({
  file: 'core/protocol/receipt.ts',
  mutator: 'ConditionalExpression',
  code: 'if (!json) return null;',
  replacement: 'if (false)',
  reason:
    'without the guard, `""` makes `JSON.parse` throw and `null` parses as `null`, which the schema refuses: `null` either way.',
});

const QUEUE = 'core/admission-queue.ts';
const ONE_CANDIDATE =
  'unreachable: a pool request with no free host takes the hot path (`hosts-busy` there) or waits `pool-too-small`, and a named one always has its target, so a blocked request reaches `holdForPair` with at least one candidate.';

LATE_REASONS.push(
  {
    file: QUEUE,
    mutator: 'ArrayDeclaration',
    code: 'return (free ?? []).slice(0, need);',
    reason:
      'unreachable: a pool without a free list either takes the hot path or waits `pool-too-small` before this line, so `free` is always defined here.',
  },
  {
    file: QUEUE,
    mutator: 'ArrayDeclaration',
    code: 'const free = (this.fleet.freeByPool.get(pool) ?? []).filter(servesDevelopment);',
    reason:
      'the stand-in element is a string, which has no `facts`: `servesDevelopment` drops it, so the list is empty either way.',
  },
  {
    file: QUEUE,
    mutator: 'Regex',
    code: '.replace(/^waiting for a host in pool [^:]*: /,',
    reason: 'the pool text always starts with the phrase, so the anchor changes nothing.',
  },
  {
    file: QUEUE,
    mutator: 'BlockStatement',
    code: "} else {\n      this.wait(r, 'hosts-busy', this.describePool(pool));",
    reason: ONE_CANDIDATE,
  },
  {
    file: QUEUE,
    mutator: 'StringLiteral',
    code: "this.wait(r, 'hosts-busy', this.describePool(pool));",
    reason: ONE_CANDIDATE,
  },
);

LATE_REASONS.push({
  file: QUEUE,
  mutator: 'ArrayDeclaration',
  code: 'for (const h of this.fleet.freeByPool.get(pool) ?? [])',
  reason:
    'the stand-in element is a string, which has no `facts`: `servesDevelopment` refuses it, so no candidate is added either way.',
});

const FLEET = 'core/admission-fleet.ts';
const RANKS_MEMO =
  'the id-rank memo only decides whether to sort again: a mutant either sorts every pass (same ranks) or returns the last ranks when the hosts are a prefix of the last fleet in the same order, whose ranks order those ids exactly as a fresh sort would (ranks are only compared).';

LATE_REASONS.push(
  {
    file: FLEET,
    mutator: 'ConditionalExpression',
    code: 'let same = hosts.length === lastIds.length;',
    reason: RANKS_MEMO,
  },
  {
    file: FLEET,
    mutator: 'EqualityOperator',
    code: 'let same = hosts.length === lastIds.length;',
    reason: RANKS_MEMO,
  },
  {
    file: FLEET,
    mutator: 'ConditionalExpression',
    code: 'same = hosts[i]!.id === lastIds[i];',
    reason: RANKS_MEMO,
  },
  { file: FLEET, mutator: 'ConditionalExpression', code: 'if (same) return lastRank;', reason: RANKS_MEMO },
);

const MODEL = 'core/model.ts';
LATE_REASONS.push(
  {
    file: MODEL,
    mutator: 'ConditionalExpression',
    code: 'return s != null && has(NOT_RUN_OUTCOMES, s);',
    reason:
      '`Array.prototype.includes` of `null` or `undefined` in a list of strings is false: the guard only narrows the type.',
  },
  {
    file: MODEL,
    mutator: 'ConditionalExpression',
    code: "return typeof outcome === 'string' && isNotRunOutcome(outcome)",
    reason:
      '`isNotRunOutcome` is `includes` over a list of strings, false for any value that is not one of them: the `typeof` only narrows the type.',
  },
);
