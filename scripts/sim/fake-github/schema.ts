import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { _, Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import standaloneCodeModule from 'ajv/dist/standalone/index.js';
import addFormatsModule from 'ajv-formats';
import { githubMessage } from './github-messages.ts';

/**
 * Schema handling for the fake GitHub, on a complete JSON Schema validator (ajv, draft 2020-12)
 * instead of a hand-written one: every keyword GitHub's descriptions use is enforced (`type`,
 * `required`, `enum`, `maxLength`, `maxItems`, `maxProperties`, `format`, `oneOf`, …).
 *
 * Two dialects come in: the REST description (`@octokit/openapi`) is OpenAPI 3.0, whose Schema
 * Object marks null with `nullable: true` ({@link fromOpenApi30} rewrites it to JSON Schema);
 * the webhook description (`@octokit/openapi-webhooks`) is OpenAPI 3.1, plain JSON Schema
 * 2020-12 with type arrays (`["string", "null"]`), used as published.
 *
 * Besides validating, it builds the smallest value that satisfies a schema ({@link exampleOf}),
 * so the fake answers with complete GitHub-shaped bodies without hand-typed payloads, and fills
 * in what a recorded payload lacks ({@link completeToSchema}).
 */

// biome-ignore lint/suspicious/noExplicitAny: schemas are open JSON objects
export type Schema = Record<string, any>;

/** One way a value breaks a schema: where, which keyword, and how GitHub words it. */
export interface SchemaProblem {
  /** JSON pointer into the value (`/output/summary`; `` for the root). */
  path: string;
  keyword: string;
  /** ajv's wording, for violations. */
  message: string;
  /** GitHub's wording for the same problem (see {@link githubMessage}). */
  github: string;
}

const addFormats = ((addFormatsModule as unknown as { default?: unknown }).default ??
  addFormatsModule) as unknown as (ajv: Ajv2020) => Ajv2020;
const standaloneCode = ((standaloneCodeModule as unknown as { default?: unknown }).default ??
  standaloneCodeModule) as unknown as (ajv: Ajv2020, v: ValidateFunction) => string;

const OPTIONS = {
  allErrors: true,
  // unknown keywords are refused at compile time, so a keyword the descriptions start to use
  // cannot be skipped silently; GitHub's schemas mix types and list required properties that
  // only some alternatives define, which the remaining strict checks would refuse
  strict: true,
  strictTypes: false,
  strictRequired: false,
  strictTuples: false,
  allowUnionTypes: true,
  validateFormats: true,
  // compile cost, measured per test process (2026-12): GitHub's descriptions are published already
  // checked against their meta-schemas, so re-checking ~1 MB of schema on every start is skipped
  // (strict mode above still refuses unknown keywords at compile time); a `$ref` compiles once as
  // its own function instead of being inlined at every use (the same repository object appears
  // dozens of times in a pull_request payload); generated code is not optimised, which costs
  // nothing measurable when validating one request but a third of the time to compile it
  validateSchema: false,
  inlineRefs: false,
  // `source` and `formats` let a compiled validator be written out as a module (see validatorOf)
  code: { optimize: false, source: true, formats: _`require("ajv-formats/dist/formats").fullFormats` },
} as const;

const ajv = new Ajv2020(OPTIONS);
// date-time, uri, uri-template, email, int32, int64, …: the formats GitHub's descriptions use
addFormats(ajv);
// OpenAPI annotations that carry no validation (kept by neither extraction, accepted if present)
ajv.addVocabulary(['example', 'xml', 'externalDocs', 'discriminator']);

const compiled = new WeakMap<object, ValidateFunction>();

/**
 * Compiled validators are kept as modules under `node_modules/.cache/spark-fake-github/`, one per
 * schema (named by a hash of the schema, the documents it may reference, ajv's version and the
 * options above): compiling GitHub's large schemas costs 0.1–0.5 s each (a repository object is
 * ~30 KB of schema), which every test process paid again and which, paid in the middle of a
 * request, made the fake answer slower than the controller's 4 s GitHub timeout on a loaded
 * machine. Loading the generated module costs milliseconds.
 */
const CACHE_DIR = join(import.meta.dirname, '..', '..', '..', 'node_modules', '.cache', 'spark-fake-github');
const requireCached = createRequire(join(CACHE_DIR, 'index.cjs'));
const SALT = createHash('sha256')
  .update(
    JSON.parse(readFileSync(requireCached.resolve('ajv/package.json'), 'utf8')).version +
      JSON.stringify(OPTIONS, (_k, v) => (typeof v === 'object' && v && 'str' in v ? String(v) : v)),
  )
  .digest('hex');
/** Registered documents: id → hash of its content and the document text (for its own references). */
const documents = new Map<string, { hash: string; text: string }>();

/** Hashes of every registered document `text` references, directly or through another. */
function referencedDocuments(text: string): string[] {
  const seen = new Set<string>();
  const walk = (t: string) => {
    for (const [id, d] of documents)
      if (!seen.has(id) && t.includes(id)) {
        seen.add(id);
        walk(d.text);
      }
  };
  walk(text);
  return [...seen].sort().map((id) => documents.get(id)!.hash);
}

function validatorOf(schema: Schema): ValidateFunction {
  let v = compiled.get(schema);
  if (v) return v;
  const text = JSON.stringify(schema);
  const key = createHash('sha256')
    .update(SALT)
    .update(text.includes('"$ref"') ? referencedDocuments(text).join() : '')
    .update(text)
    .digest('hex');
  const file = join(CACHE_DIR, `${key}.cjs`);
  try {
    v = requireCached(file) as ValidateFunction;
  } catch {
    v = ajv.compile(schema);
    try {
      mkdirSync(CACHE_DIR, { recursive: true });
      // written whole, then renamed: a parallel test process reads the old or the new, never half
      const tmp = `${file}.${process.pid}.tmp`;
      writeFileSync(tmp, standaloneCode(ajv, v));
      renameSync(tmp, file);
    } catch {
      // a read-only checkout only loses the cache, never the check
    }
  }
  compiled.set(schema, v);
  return v;
}

/** Registers a document other schemas `$ref` by `id` (the webhook components). */
export function addSchemaDocument(id: string, doc: Schema): void {
  if (ajv.getSchema(id)) return;
  ajv.addSchema({ ...doc, $id: id });
  const text = JSON.stringify(doc);
  documents.set(id, { hash: createHash('sha256').update(id).update(text).digest('hex'), text });
}

/** Schema → the same schema with its shared parts as references (see {@link shareSubschemas}). */
const shared = new WeakMap<object, Schema>();

/** Keywords whose value is a schema, a list of schemas, or a map of them. */
const ONE = ['items', 'additionalProperties', 'not', 'if', 'then', 'else', 'contains', 'propertyNames'];
const LIST = ['allOf', 'anyOf', 'oneOf', 'prefixItems'];
const MAP = ['properties', 'patternProperties', '$defs', 'dependentSchemas'];

/** Rebuilds every subschema of `node` with `f` (children first). */
function mapSubschemas(node: Schema, f: (s: Schema) => Schema): Schema {
  const out: Schema = { ...node };
  for (const k of ONE) if (out[k] && typeof out[k] === 'object') out[k] = f(out[k]);
  for (const k of LIST) if (Array.isArray(out[k])) out[k] = out[k].map(f);
  for (const k of MAP)
    if (out[k] && typeof out[k] === 'object')
      out[k] = Object.fromEntries(Object.entries(out[k] as Schema).map(([p, x]) => [p, f(x as Schema)]));
  return out;
}

/**
 * What ajv compiles for `schemas`: every large subschema that occurs more than once among them
 * (GitHub's dereferenced description repeats the ~30 KB repository object in `parent`, `source`,
 * `template_repository`, in every pull_request payload, …) becomes one entry of a document
 * registered as `id`, referenced where it occurred. Each shared part then compiles once per
 * process instead of once per occurrence; `validate` is given the original schema and uses the
 * shared form, and the originals stay as they are for everything else (exampleOf, handlers).
 */
export function shareSubschemas(id: string, schemas: Schema[], minLength = 1500): void {
  const text = new Map<Schema, string>();
  const count = new Map<string, number>();
  const visit = (s: Schema): void => {
    if (!s || typeof s !== 'object' || text.has(s)) return;
    mapSubschemas(s, (c) => {
      visit(c);
      return c;
    });
    const t = JSON.stringify(s);
    text.set(s, t);
    if (t.length >= minLength) count.set(t, (count.get(t) ?? 0) + 1);
  };
  for (const s of schemas) visit(s);
  const names = new Map<string, string>();
  for (const [t, n] of count)
    if (n > 1) names.set(t, createHash('sha256').update(t).digest('hex').slice(0, 16));
  const defs: Schema = {};
  const built = new Map<Schema, Schema>();
  const build = (s: Schema, top: boolean): Schema => {
    if (!s || typeof s !== 'object') return s;
    const t = text.get(s)!;
    const name = names.get(t);
    if (name && !top) {
      if (!(name in defs)) defs[name] = build(s, true);
      return { $ref: `${id}#/$defs/${name}` };
    }
    let b = built.get(s);
    if (!b) {
      b = mapSubschemas(s, (c) => build(c, false));
      built.set(s, b);
    }
    return b;
  };
  const compact = schemas.map((s) => build(s, true));
  addSchemaDocument(id, { $defs: defs });
  for (const [i, s] of schemas.entries()) if (s && typeof s === 'object') shared.set(s, compact[i]!);
}

/**
 * OpenAPI 3.0 Schema Object → JSON Schema 2020-12. `nullable: true` becomes a type array with
 * `"null"` (or `anyOf [schema, {type: null}]` where no `type` is given), and `null` joins an
 * `enum`: GitHub's description marks e.g. a check run's or job's `conclusion` as a nullable enum
 * without listing null, and GitHub answers `"conclusion": null` for everything unfinished (its own
 * example `example-of-in-progress-conclusion` in the same description). Boolean
 * `exclusiveMinimum`/`exclusiveMaximum` (3.0) become the numeric form.
 */
export function fromOpenApi30(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(fromOpenApi30);
  if (!node || typeof node !== 'object') return node;
  const s = node as Schema;
  const out: Schema = {};
  for (const [k, v] of Object.entries(s)) {
    if (k === 'nullable') continue;
    if (k === 'enum' || k === 'const' || k === 'default') out[k] = v;
    else if (k === 'properties' || k === 'patternProperties')
      out[k] = Object.fromEntries(Object.entries(v as object).map(([p, x]) => [p, fromOpenApi30(x)]));
    else out[k] = fromOpenApi30(v);
  }
  if (s.exclusiveMaximum === true && typeof s.maximum === 'number') {
    out.exclusiveMaximum = s.maximum;
    delete out.maximum;
  } else if (s.exclusiveMaximum === false) delete out.exclusiveMaximum;
  if (s.exclusiveMinimum === true && typeof s.minimum === 'number') {
    out.exclusiveMinimum = s.minimum;
    delete out.minimum;
  } else if (s.exclusiveMinimum === false) delete out.exclusiveMinimum;
  if (s.nullable !== true) return out;
  if (Array.isArray(out.enum) && !out.enum.includes(null)) out.enum = [...out.enum, null];
  if (typeof out.type === 'string') return { ...out, type: [out.type, 'null'] };
  if (Array.isArray(out.type))
    return out.type.includes('null') ? out : { ...out, type: [...out.type, 'null'] };
  return { anyOf: [out, { type: 'null' }] };
}

/**
 * Every way `value` breaks `schema`; an empty list means it conforms. Problems inside a failed
 * `oneOf`/`anyOf` alternative are folded into that keyword's one problem.
 */
export function validate(schema: Schema | null | undefined, value: unknown): SchemaProblem[] {
  if (!schema) return [];
  const v = validatorOf(shared.get(schema) ?? schema);
  if (v(value)) return [];
  return fold(v.errors ?? []).map((e) => ({
    path: e.instancePath,
    keyword: e.keyword,
    message: `${e.instancePath || '/'} ${e.message ?? e.keyword}${e.keyword === 'enum' ? ` ${JSON.stringify((e.params as { allowedValues?: unknown }).allowedValues)}` : ''}`,
    github: githubMessage(e, value),
  }));
}

/** Compiles (or loads from the cache) the validator of `schema` now, instead of at its first use. */
export function precompile(schema: Schema): void {
  validatorOf(shared.get(schema) ?? schema);
}

/** `path: problem` lines, as the fake records violations. */
export function describeProblems(problems: SchemaProblem[], max = 8): string {
  const shown = problems.slice(0, max).map((p) => p.message);
  if (problems.length > max) shown.push(`… ${problems.length - max} more`);
  return shown.join('; ');
}

function fold(errors: ErrorObject[]): ErrorObject[] {
  const combinators = errors.filter((e) => e.keyword === 'oneOf' || e.keyword === 'anyOf');
  return errors.filter(
    (e) =>
      e.keyword === 'oneOf' ||
      e.keyword === 'anyOf' ||
      !combinators.some(
        (c) => e.schemaPath.startsWith(`${c.schemaPath}/`) && e.instancePath.startsWith(c.instancePath),
      ),
  );
}

function typesOf(schema: Schema): string[] {
  if (Array.isArray(schema.type)) return schema.type as string[];
  if (typeof schema.type === 'string') return [schema.type];
  return [];
}

function jsonType(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number';
  return typeof v;
}

/** Resolves a local `$ref` (`#/components/schemas/x`) in a schema document. */
export type Resolve = (ref: string) => Schema | undefined;

const noRefs: Resolve = () => undefined;

function deref(schema: Schema | null | undefined, resolve: Resolve): Schema | null {
  let s = schema ?? null;
  for (let i = 0; s && typeof s.$ref === 'string' && i < 20; i++) s = resolve(s.$ref) ?? null;
  return s;
}

/** The smallest value satisfying `schema` (required properties only). */
export function exampleOf(schema: Schema | null | undefined, resolve: Resolve = noRefs, depth = 0): unknown {
  const s = deref(schema, resolve);
  if (!s || depth > 14) return null;
  if ('const' in s) return s.const;
  if (s.allOf) return Object.assign({}, ...s.allOf.map((x: Schema) => exampleOf(x, resolve, depth + 1)));
  for (const alts of [s.oneOf, s.anyOf] as (Schema[] | undefined)[]) {
    if (!alts) continue;
    // the first alternative whose smallest value the whole schema accepts (`oneOf` wants exactly
    // one to match); a schema with references is not compiled on its own, so there the first
    for (const alt of alts) {
      const v = exampleOf(alt, resolve, depth + 1);
      if (resolve !== noRefs || validate(s, v).length === 0) return v;
    }
    return exampleOf(alts[0], resolve, depth + 1);
  }
  if (Array.isArray(s.enum)) return s.enum.find((x: unknown) => x !== null) ?? s.enum[0];
  const types = typesOf(s);
  const type = types.find((t) => t !== 'null') ?? (types.includes('null') ? 'null' : undefined);
  switch (type) {
    case 'object':
      return exampleObject(s, resolve, depth);
    case 'array':
      return Array.from({ length: s.minItems ?? 0 }, () => exampleOf(s.items, resolve, depth + 1));
    case 'integer':
    case 'number':
      return s.minimum ?? (typeof s.exclusiveMinimum === 'number' ? s.exclusiveMinimum + 1 : 1);
    case 'boolean':
      return false;
    case 'string':
      return exampleString(s);
    case 'null':
      return null;
    default:
      return s.properties || s.required ? exampleObject(s, resolve, depth) : null;
  }
}

function exampleObject(s: Schema, resolve: Resolve, depth: number): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const r of (s.required ?? []) as string[]) {
    const ps =
      s.properties?.[r] ?? (typeof s.additionalProperties === 'object' ? s.additionalProperties : {});
    out[r] = exampleOf(ps, resolve, depth + 1);
  }
  return out;
}

function exampleString(s: Schema): string {
  const pad = (v: string) => (s.minLength && v.length < s.minLength ? v.padEnd(s.minLength, 'x') : v);
  switch (s.format) {
    case 'date-time':
      return '2026-11-30T08:00:00Z';
    case 'date':
      return '2026-11-30';
    case 'uri':
    case 'uri-reference':
      return 'https://github.invalid/x';
    case 'uri-template':
      return 'https://github.invalid/x{/y}';
    case 'email':
      return 'octocat@github.invalid';
    default:
      return pad('x');
  }
}

/**
 * `value` with every property `schema` requires and `value` lacks filled in with its smallest
 * value, recursively; nothing present is changed. It brings a payload recorded before GitHub added
 * fields (e.g. `has_discussions` on repositories) up to the current description.
 */
export function completeToSchema<T>(
  schema: Schema | null | undefined,
  value: T,
  resolve: Resolve = noRefs,
): T {
  return complete(schema, value, resolve, 0) as T;
}

function complete(
  schema: Schema | null | undefined,
  value: unknown,
  resolve: Resolve,
  depth: number,
): unknown {
  const s = deref(schema, resolve);
  if (!s || depth > 40 || value === undefined) return value;
  if (s.allOf)
    return (s.allOf as Schema[]).reduce<unknown>((v, x) => complete(x, v, resolve, depth + 1), value);
  const alts = (s.oneOf ?? s.anyOf) as Schema[] | undefined;
  if (alts) {
    const t = jsonType(value);
    const fits = alts
      .map((a) => deref(a, resolve))
      .filter((a): a is Schema => a != null)
      .find((a) => {
        const ts = typesOf(a);
        return ts.length === 0
          ? t === 'object'
          : ts.includes(t) || (t === 'integer' && ts.includes('number'));
      });
    return fits ? complete(fits, value, resolve, depth + 1) : value;
  }
  if (Array.isArray(value)) {
    return s.items ? value.map((x) => complete(s.items, x, resolve, depth + 1)) : value;
  }
  if (value === null || typeof value !== 'object') return value;
  const types = typesOf(s);
  if (types.length && !types.includes('object')) return value;
  const out: Record<string, unknown> = { ...(value as Record<string, unknown>) };
  for (const r of (s.required ?? []) as string[])
    if (!(r in out)) out[r] = exampleOf(s.properties?.[r] ?? {}, resolve, 0);
  for (const [k, v] of Object.entries(out)) {
    const ps = s.properties?.[k];
    if (ps) out[k] = complete(ps, v, resolve, depth + 1);
  }
  return out;
}

/** Deep-merges `over` onto `base` (objects only; arrays and scalars replace). */
export function overlay<T>(base: T, over: unknown): T {
  if (typeof over !== 'object' || over === null || Array.isArray(over)) return over as T;
  if (typeof base !== 'object' || base === null || Array.isArray(base)) return over as T;
  const out: Record<string, unknown> = { ...(base as Record<string, unknown>) };
  for (const [k, v] of Object.entries(over)) out[k] = overlay(out[k], v);
  return out as T;
}
