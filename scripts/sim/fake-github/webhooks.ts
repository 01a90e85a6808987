import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  addSchemaDocument,
  completeToSchema,
  describeProblems,
  type Resolve,
  type Schema,
  shareSubschemas,
  validate,
} from './schema.ts';

/**
 * GitHub's webhook payload schemas, from GitHub's own description: the extract
 * `scripts/sim/fixtures/openapi/github-webhooks.json` (`scripts/extract-openapi.ts`,
 * `@octokit/openapi-webhooks`, OpenAPI 3.1, i.e. JSON Schema 2020-12). Every payload the fake
 * GitHub and the harnesses send is checked against the schema of its event and action.
 */

interface Fixture {
  source: { package: string; version: string; file: string };
  openapi: string;
  /** `X-GitHub-Event` → `action` (`''` for an event without actions) → payload schema. */
  webhooks: Record<string, Record<string, Schema>>;
  components: { schemas: Record<string, Schema> };
}

const DOC_ID = 'https://spark.invalid/github-webhooks.json';
const LOCAL = '#/components/schemas/';

/** The same schema with its `#/components/schemas/x` references pointing into the registered document. */
function absolute(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(absolute);
  if (!node || typeof node !== 'object') return node;
  const out: Schema = {};
  for (const [k, v] of Object.entries(node)) {
    if (k === '$ref' && typeof v === 'string' && v.startsWith(LOCAL))
      out[k] = `${DOC_ID}#/$defs/${v.slice(LOCAL.length)}`;
    else if (k === 'enum' || k === 'const' || k === 'default') out[k] = v;
    else out[k] = absolute(v);
  }
  return out;
}

interface Loaded {
  fixture: Fixture;
  /** `event.action` → the schema with absolute references, as ajv compiles it. */
  schemas: Map<string, Schema>;
  resolve: Resolve;
}

let loaded: Loaded | null = null;

/** Read on first use: ~0.8 MB that a test process without webhooks never parses. */
function load(): Loaded {
  if (loaded) return loaded;
  const fixture = JSON.parse(
    readFileSync(join(import.meta.dirname, '..', 'fixtures', 'openapi', 'github-webhooks.json'), 'utf8'),
  ) as Fixture;
  addSchemaDocument(DOC_ID, { $defs: absolute(fixture.components.schemas) as Schema });
  const schemas = new Map<string, Schema>();
  for (const [event, actions] of Object.entries(fixture.webhooks))
    for (const [action, schema] of Object.entries(actions))
      schemas.set(`${event}.${action}`, absolute(schema) as Schema);
  // the pull_request, issue and repository objects each action's payload inlines compile once
  shareSubschemas('https://spark.invalid/github-webhooks-shared.json', [...schemas.values()]);
  const resolve: Resolve = (ref) => fixture.components.schemas[ref.slice(ref.lastIndexOf('/') + 1)];
  loaded = { fixture, schemas, resolve };
  return loaded;
}

/** Where the webhook schemas come from, e.g. `@octokit/openapi-webhooks@12.1.0`. */
export function webhooksSource(): string {
  const { source } = load().fixture;
  return `${source.package}@${source.version}`;
}

/** Events the extract covers (`scripts/extract-openapi.ts` WEBHOOK_EVENTS). */
export function webhookEvents(): string[] {
  return Object.keys(load().fixture.webhooks);
}

/** The payload schema of `event` (`pull_request`) and `action` (`labeled`; `''` for `push`), or null. */
export function webhookSchema(event: string, action: string): Schema | null {
  const actions = actionsOf(event);
  return actions && Object.hasOwn(actions, action) ? (actions[action] ?? null) : null;
}

/** The actions of `event` (own properties only: `valueOf` is no event). */
function actionsOf(event: string): Record<string, Schema> | null {
  const { webhooks } = load().fixture;
  return Object.hasOwn(webhooks, event) ? (webhooks[event] ?? null) : null;
}

const actionOf = (payload: unknown): string =>
  payload && typeof payload === 'object' && typeof (payload as { action?: unknown }).action === 'string'
    ? ((payload as { action: string }).action ?? '')
    : '';

/**
 * Why `payload` is not what GitHub sends as `event`, as violation lines; empty when it is. An
 * event or action GitHub's description does not have is one too (GitHub never sends it).
 */
export function webhookViolations(event: string, payload: unknown): string[] {
  const { schemas } = load();
  const actions = actionsOf(event);
  if (!actions) {
    return [
      `webhook ${event}: not an event of GitHub's webhook description (${webhooksSource()}; extracted: ${webhookEvents().join(', ')})`,
    ];
  }
  const action = '' in actions ? '' : actionOf(payload);
  const schema = schemas.get(`${event}.${action}`);
  if (!schema) return [`webhook ${event}: action "${action}" is not one GitHub sends for ${event}`];
  const problems = validate(schema, payload);
  return problems.length
    ? [`webhook ${event}${action ? `.${action}` : ''}: ${describeProblems(problems)}`]
    : [];
}

/**
 * A payload with every property GitHub's description now requires and the payload lacks filled
 * in (its smallest value); nothing present changes. The community recordings
 * (`@octokit/webhooks-examples`) predate fields GitHub added since, e.g. `has_discussions` on
 * every repository object; GitHub sends them today.
 */
export function completeWebhook<T>(event: string, payload: T): T {
  const { resolve } = load();
  const schema = webhookSchema(event, '' in (actionsOf(event) ?? {}) ? '' : actionOf(payload));
  return schema ? completeToSchema(schema, payload, resolve) : payload;
}
