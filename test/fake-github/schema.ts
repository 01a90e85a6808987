/**
 * Just enough OpenAPI 3.0 schema handling for the fake GitHub: validate a value against a
 * (dereferenced) schema, and build the smallest value that satisfies one, so the fake answers
 * with complete GitHub-shaped bodies without hand-typed payloads.
 */

export interface Schema {
  type?: string;
  nullable?: boolean;
  properties?: Record<string, Schema>;
  required?: string[];
  additionalProperties?: boolean | Schema;
  items?: Schema;
  enum?: unknown[];
  oneOf?: Schema[];
  anyOf?: Schema[];
  allOf?: Schema[];
  format?: string;
  minItems?: number;
  maxItems?: number;
  minimum?: number;
  maximum?: number;
  default?: unknown;
}

function typeOk(type: string, v: unknown): boolean {
  switch (type) {
    case 'object':
      return typeof v === 'object' && v !== null && !Array.isArray(v);
    case 'array':
      return Array.isArray(v);
    case 'integer':
      return typeof v === 'number' && Number.isInteger(v);
    case 'number':
      return typeof v === 'number';
    case 'string':
      return typeof v === 'string';
    case 'boolean':
      return typeof v === 'boolean';
    case 'null':
      return v === null;
    default:
      return true;
  }
}

/** Returns every violation as `path: problem`; an empty list means the value conforms. */
export function validate(schema: Schema | null | undefined, value: unknown, path = '$'): string[] {
  if (!schema) return [];
  if (value === null && schema.nullable) return [];
  const errs: string[] = [];
  if (schema.allOf) for (const s of schema.allOf) errs.push(...validate(s, value, path));
  if (schema.oneOf || schema.anyOf) {
    const alts = (schema.oneOf ?? schema.anyOf)!;
    if (!alts.some((s) => validate(s, value, path).length === 0))
      errs.push(`${path}: matches none of ${alts.length} alternatives`);
  }
  if (schema.enum && !schema.enum.includes(value)) {
    if (!(value === null && schema.enum.includes(null)))
      errs.push(`${path}: ${JSON.stringify(value)} not in enum ${JSON.stringify(schema.enum)}`);
  }
  if (schema.type) {
    if (!typeOk(schema.type, value)) {
      errs.push(
        `${path}: expected ${schema.type}${schema.nullable ? ' or null' : ''}, got ${value === null ? 'null' : Array.isArray(value) ? 'array' : typeof value}`,
      );
      return errs;
    }
  }
  if (schema.format === 'date-time' && typeof value === 'string' && Number.isNaN(Date.parse(value)))
    errs.push(`${path}: not a date-time`);
  if (typeOk('object', value) && (schema.type === 'object' || schema.properties)) {
    const obj = value as Record<string, unknown>;
    for (const r of schema.required ?? []) if (!(r in obj)) errs.push(`${path}.${r}: required`);
    for (const [k, v] of Object.entries(obj)) {
      const ps = schema.properties?.[k];
      if (ps) errs.push(...validate(ps, v, `${path}.${k}`));
      else if (schema.additionalProperties === false) errs.push(`${path}.${k}: unexpected property`);
      else if (typeof schema.additionalProperties === 'object')
        errs.push(...validate(schema.additionalProperties, v, `${path}.${k}`));
    }
  }
  if (Array.isArray(value)) {
    if (schema.minItems != null && value.length < schema.minItems)
      errs.push(`${path}: fewer than ${schema.minItems} items`);
    if (schema.maxItems != null && value.length > schema.maxItems)
      errs.push(`${path}: more than ${schema.maxItems} items`);
    if (schema.items) {
      for (const [i, v] of value.entries()) errs.push(...validate(schema.items, v, `${path}[${i}]`));
    }
  }
  return errs;
}

/** The smallest value satisfying `schema` (required fields only). */
export function exampleOf(schema: Schema | null | undefined, depth = 0): unknown {
  if (!schema || depth > 12) return null;
  if (schema.allOf) return Object.assign({}, ...schema.allOf.map((s) => exampleOf(s, depth + 1)));
  if (schema.oneOf || schema.anyOf) return exampleOf((schema.oneOf ?? schema.anyOf)![0], depth + 1);
  if (schema.enum) return schema.enum[0];
  switch (schema.type) {
    case 'object': {
      const out: Record<string, unknown> = {};
      for (const r of schema.required ?? []) out[r] = exampleOf(schema.properties?.[r], depth + 1);
      return out;
    }
    case 'array':
      return schema.minItems
        ? Array.from({ length: schema.minItems }, () => exampleOf(schema.items, depth + 1))
        : [];
    case 'integer':
    case 'number':
      return schema.minimum ?? 1;
    case 'boolean':
      return false;
    case 'string':
      if (schema.format === 'date-time') return '2026-11-30T08:00:00Z';
      if (schema.format === 'uri') return 'https://github.invalid/x';
      return 'x';
    default:
      return schema.nullable ? null : {};
  }
}

/** Deep-merges `over` onto `base` (objects only; arrays and scalars replace). */
export function overlay<T>(base: T, over: unknown): T {
  if (typeof over !== 'object' || over === null || Array.isArray(over)) return over as T;
  if (typeof base !== 'object' || base === null || Array.isArray(base)) return over as T;
  const out: Record<string, unknown> = { ...(base as Record<string, unknown>) };
  for (const [k, v] of Object.entries(over)) out[k] = overlay(out[k], v);
  return out as T;
}
