import type { ErrorObject } from 'ajv/dist/2020.js';

/**
 * How GitHub words a request body its description rejects, one line per problem of a 422
 * `Invalid request.` answer (operations.ts).
 */

/** Ruby's `inspect` of a JSON value, as GitHub's messages print the offending value. */
function inspect(v: unknown): string {
  if (v === null || v === undefined) return 'nil';
  if (typeof v === 'string') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(inspect).join(', ')}]`;
  if (typeof v === 'object')
    return `{${Object.entries(v)
      .map(([k, x]) => `${JSON.stringify(k)}=>${inspect(x)}`)
      .join(', ')}}`;
  return String(v);
}

function at(value: unknown, pointer: string): unknown {
  let cur = value;
  for (const raw of pointer.split('/').slice(1)) {
    const k = raw.replace(/~1/g, '/').replace(/~0/g, '~');
    if (cur === null || typeof cur !== 'object') return undefined;
    cur = (cur as Record<string, unknown>)[k];
  }
  return cur;
}

const plural = (n: number, one: string, many: string) => (n === 1 ? one : many);
const article = (t: string) => (/^[aeiou]/.test(t) ? `an ${t}` : `a ${t}`);

/**
 * GitHub's wording of one schema problem in a 422 `Invalid request.` body. GitHub validates
 * request bodies with the `json_schema` Ruby gem (brandur/json_schema, lib/json_schema/validator.rb),
 * whose messages its answers carry verbatim, e.g. "Only 65535 characters are allowed; 70292 were
 * supplied." (https://github.com/reviewdog/action-rubocop/issues/67), "\"annotation_level\",
 * \"path\" weren't supplied." (https://github.com/humanmade/linter-bot/issues/71), "\"per_page\" is
 * not a permitted key." (https://github.com/emilyriederer/projmgr/issues/43) and "For 'items',
 * nil is not a string or object." (https://github.com/ixxmu/mp_duty/issues/3639).
 */
export function githubMessage(e: ErrorObject, root: unknown): string {
  const p = e.params as Record<string, unknown>;
  const data = at(root, e.instancePath);
  const pointer = e.instancePath
    .split('/')
    .slice(1)
    .map((k) => `properties/${k}`)
    .join('/');
  switch (e.keyword) {
    case 'required':
      return `"${String(p.missingProperty)}" wasn't supplied.`;
    case 'additionalProperties':
      return `"${String(p.additionalProperty)}" is not a permitted key.`;
    case 'maxLength': {
      const n = String(data ?? '').length;
      return `Only ${p.limit} ${plural(Number(p.limit), 'character is', 'characters are')} allowed; ${n} ${plural(n, 'was', 'were')} supplied.`;
    }
    case 'minLength': {
      const n = String(data ?? '').length;
      return `At least ${p.limit} ${plural(Number(p.limit), 'character is', 'characters are')} required; only ${n} ${plural(n, 'was', 'were')} supplied.`;
    }
    case 'maxItems': {
      const n = Array.isArray(data) ? data.length : 0;
      return `No more than ${p.limit} ${plural(Number(p.limit), 'item is', 'items are')} allowed; ${n} ${plural(n, 'was', 'were')} supplied.`;
    }
    case 'minItems': {
      const n = Array.isArray(data) ? data.length : 0;
      return `${p.limit} ${plural(Number(p.limit), 'item', 'items')} required; only ${n} ${plural(n, 'was', 'were')} supplied.`;
    }
    case 'maxProperties': {
      const n = data && typeof data === 'object' ? Object.keys(data).length : 0;
      return `No more than ${p.limit} ${plural(Number(p.limit), 'property is', 'properties are')} allowed; ${n} ${plural(n, 'was', 'were')} supplied.`;
    }
    case 'type': {
      const types = (Array.isArray(p.type) ? p.type : String(p.type).split(',')) as string[];
      const list = types.filter((t) => t !== 'null');
      return `For '${pointer}', ${inspect(data)} is not ${article(list.join(' or ') || 'null')}.`;
    }
    case 'enum':
      return `${inspect(data)} is not a member of ${inspect(p.allowedValues)}.`;
    case 'format':
      return `${String(data)} is not a valid ${String(p.format)}.`;
    case 'maximum':
      return `${String(data)} must be less than or equal to ${p.limit}.`;
    case 'minimum':
      return `${String(data)} must be greater than or equal to ${p.limit}.`;
    case 'oneOf':
      return `No subschema in "oneOf" matched.`;
    case 'anyOf':
      return `No subschema in "anyOf" matched.`;
    default:
      return `For '${pointer}', ${inspect(data)} ${e.message ?? 'is invalid'}.`;
  }
}
