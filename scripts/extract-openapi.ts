#!/usr/bin/env -S npx tsx
/**
 * Extracts what the fake GitHub (`scripts/sim/fake-github/`) answers and checks from GitHub's own
 * descriptions into two committed fixtures:
 *
 * - `scripts/sim/fixtures/openapi/github-rest.json`: the REST operations below, from `@octokit/openapi`
 *   (`generated/api.github.com.deref.json`, GitHub's api.github.com description, OpenAPI 3.0,
 *   every `$ref` already resolved), each with its path/query parameters, request body and JSON
 *   response schema per status, fully dereferenced;
 * - `scripts/sim/fixtures/openapi/github-webhooks.json`: the payload schema of every action of the
 *   webhook events below, from `@octokit/openapi-webhooks` (`generated/api.github.com.json`,
 *   GitHub's webhook description, OpenAPI 3.1), with the `components.schemas` they reference
 *   (kept as `$ref`s: dereferenced, the same repository and user objects would repeat ~2 MB).
 *
 * Both packages are far too large to be dependencies (`@octokit/openapi` unpacks to ~385 MB), so
 * by default the script packs the newest of each into a temporary directory, extracts the one
 * file it needs and deletes the directory:
 *
 *   npx tsx scripts/extract-openapi.ts                 # newest published descriptions
 *   npx tsx scripts/extract-openapi.ts --rest-version 23.0.2 --webhooks-version 12.1.0
 *   npx tsx scripts/extract-openapi.ts --rest /tmp/oa/package --webhooks /tmp/owh/package
 *
 * Only documentation is dropped (`description`, `summary`, `title`, `example(s)`,
 * `externalDocs` and `x-*` extensions inside schemas); every validation keyword (`type`,
 * `nullable`, `enum`, `required`, `maxLength`, `maxItems`, `maxProperties`, `format`, …) is kept
 * as published. Each operation keeps its documentation URL (the `documentation_url` GitHub puts in
 * its error bodies). The package name and version are recorded in each fixture.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * `[method, path]` of every GitHub REST operation something of ours calls: the controller
 * (`functions/github/`), the CI task (`DELETE /installation/token`, ADR 0115), and the operations
 * the permission and Actions model of the fake serves. A request to anything else is answered 404
 * and recorded as a violation.
 */
export const OPERATIONS: ReadonlyArray<readonly [string, string]> = [
  // App authentication and installations
  ['post', '/app/installations/{installation_id}/access_tokens'],
  ['get', '/app/installations/{installation_id}'],
  ['get', '/orgs/{org}/installation'],
  ['get', '/repos/{owner}/{repo}/installation'],
  ['delete', '/installation/token'],
  ['post', '/app-manifests/{code}/conversions'],
  // repositories, permissions, pull requests, commits, contents
  ['get', '/repos/{owner}/{repo}'],
  ['get', '/repos/{owner}/{repo}/collaborators/{username}/permission'],
  ['get', '/repos/{owner}/{repo}/pulls/{pull_number}'],
  ['get', '/repos/{owner}/{repo}/commits/{ref}'],
  ['get', '/repos/{owner}/{repo}/contents/{path}'],
  ['get', '/repos/{owner}/{repo}/labels'],
  ['post', '/repos/{owner}/{repo}/labels'],
  ['get', '/repos/{owner}/{repo}/labels/{name}'],
  // check runs
  ['post', '/repos/{owner}/{repo}/check-runs'],
  ['patch', '/repos/{owner}/{repo}/check-runs/{check_run_id}'],
  ['get', '/repos/{owner}/{repo}/commits/{ref}/check-runs'],
  // workflows, runs and jobs: dispatch, run identity, cancellation
  ['get', '/repos/{owner}/{repo}/actions/workflows/{workflow_id}'],
  ['post', '/repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches'],
  ['get', '/repos/{owner}/{repo}/actions/runs'],
  ['get', '/repos/{owner}/{repo}/actions/workflows/{workflow_id}/runs'],
  ['get', '/repos/{owner}/{repo}/actions/runs/{run_id}'],
  ['get', '/repos/{owner}/{repo}/actions/runs/{run_id}/jobs'],
  ['post', '/repos/{owner}/{repo}/actions/runs/{run_id}/cancel'],
  ['post', '/repos/{owner}/{repo}/actions/runs/{run_id}/force-cancel'],
  // self-hosted runners and runner groups
  ['post', '/repos/{owner}/{repo}/actions/runners/generate-jitconfig'],
  ['post', '/orgs/{org}/actions/runners/generate-jitconfig'],
  ['get', '/repos/{owner}/{repo}/actions/runners'],
  ['get', '/orgs/{org}/actions/runners'],
  ['delete', '/repos/{owner}/{repo}/actions/runners/{runner_id}'],
  ['delete', '/orgs/{org}/actions/runners/{runner_id}'],
  ['get', '/orgs/{org}/actions/runner-groups/{runner_group_id}'],
  ['get', '/orgs/{org}/actions/runner-groups/{runner_group_id}/repositories'],
  // the App's webhook delivery log: deliveries missed while the controller was down (ADR 0091)
  ['get', '/app/hook/deliveries'],
  ['post', '/app/hook/deliveries/{delivery_id}/attempts'],
];

/**
 * `X-GitHub-Event` names whose every action's payload schema is extracted: the four the App
 * subscribes to (`docs/github-app-manifest.json` `default_events`), `ping` (sent when the webhook
 * is created) and the events tests deliver as ones the App never asked for.
 */
export const WEBHOOK_EVENTS: readonly string[] = [
  'pull_request',
  'issue_comment',
  'push',
  'workflow_job',
  'ping',
  'star',
  'watch',
  'issues',
];

const REST_FILE = 'generated/api.github.com.deref.json';
const WEBHOOKS_FILE = 'generated/api.github.com.json';
const FIXTURES = join(import.meta.dirname, 'sim', 'fixtures', 'openapi');

const DOCUMENTATION = new Set(['description', 'summary', 'title', 'example', 'examples', 'externalDocs']);
/** Keywords whose value is data, not a schema: copied as published. */
const DATA = new Set(['enum', 'const', 'default']);

/** A schema without its documentation; every validation keyword kept. */
function strip(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(strip);
  if (!node || typeof node !== 'object') return node;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(node)) {
    if (DOCUMENTATION.has(k) || k.startsWith('x-')) continue;
    if (DATA.has(k)) out[k] = v;
    else if (k === 'properties' || k === 'patternProperties')
      out[k] = Object.fromEntries(Object.entries(v as object).map(([p, s]) => [p, strip(s)]));
    else out[k] = strip(v);
  }
  return out;
}

interface Media {
  schema?: unknown;
}
interface SpecParameter {
  name: string;
  in: string;
  required?: boolean;
  schema?: unknown;
  'x-multi-segment'?: boolean;
}
interface SpecOperation {
  operationId: string;
  externalDocs?: { url?: string };
  parameters?: SpecParameter[];
  requestBody?: { required?: boolean; content?: Record<string, Media> };
  responses: Record<string, { content?: Record<string, Media> }>;
}

/** One REST operation as `scripts/sim/fake-github/` reads it. */
export interface RestOperationFixture<S = unknown> {
  method: string;
  path: string;
  operationId: string;
  /** GitHub's page for the operation: the `documentation_url` of its error bodies. */
  documentationUrl: string;
  parameters: {
    name: string;
    in: 'path' | 'query';
    required: boolean;
    /** A `{path}` that spans several segments (`contents/{path}`: `a/b/c.yml`). */
    multiSegment: boolean;
    schema: S;
  }[];
  /** The `application/json` request body, or null when the operation takes none. */
  requestBody: { required: boolean; schema: S | null } | null;
  /** Status → the media types GitHub documents and the `application/json` schema (null: no body). */
  responses: Record<string, { contentTypes: string[]; schema: S | null }>;
}

const jsonSchemaOf = (content: Record<string, Media> | undefined): unknown | null =>
  content?.['application/json']?.schema ? strip(content['application/json'].schema) : null;

function extractRest(dir: string): { count: number; file: string } {
  const spec = JSON.parse(readFileSync(join(dir, REST_FILE), 'utf8')) as {
    openapi: string;
    info: { version: string };
    paths: Record<string, Record<string, SpecOperation>>;
  };
  const version = packageVersion(dir);
  const operations: RestOperationFixture[] = OPERATIONS.map(([method, path]) => {
    const op = spec.paths[path]?.[method];
    if (!op) throw new Error(`${method.toUpperCase()} ${path} is not in @octokit/openapi@${version}`);
    const responses: RestOperationFixture['responses'] = {};
    for (const [status, r] of Object.entries(op.responses)) {
      responses[status] = { contentTypes: Object.keys(r.content ?? {}), schema: jsonSchemaOf(r.content) };
    }
    const body = op.requestBody;
    return {
      method,
      path,
      operationId: op.operationId,
      documentationUrl: op.externalDocs?.url ?? 'https://docs.github.com/rest',
      parameters: (op.parameters ?? [])
        .filter((p) => p.in === 'path' || p.in === 'query')
        .map((p) => ({
          name: p.name,
          in: p.in as 'path' | 'query',
          required: p.required === true,
          multiSegment: p['x-multi-segment'] === true,
          schema: strip(p.schema ?? {}),
        })),
      requestBody: body?.content
        ? { required: body.required === true, schema: jsonSchemaOf(body.content) }
        : null,
      responses,
    };
  });
  const file = join(FIXTURES, 'github-rest.json');
  writeFileSync(
    file,
    `${JSON.stringify({
      source: { package: '@octokit/openapi', version, file: REST_FILE },
      openapi: spec.openapi,
      operations,
    })}\n`,
  );
  return { count: operations.length, file };
}

interface SpecWebhook {
  post: {
    operationId: string;
    requestBody: { content: Record<string, Media> };
  };
}

function extractWebhooks(dir: string): { count: number; file: string } {
  const spec = JSON.parse(readFileSync(join(dir, WEBHOOKS_FILE), 'utf8')) as {
    openapi: string;
    webhooks: Record<string, SpecWebhook>;
    components: { schemas: Record<string, unknown> };
  };
  const version = packageVersion(dir);
  const wanted = new Set(WEBHOOK_EVENTS.map((e) => e.replace(/_/g, '-')));
  // X-GitHub-Event → action ('' for an event without actions, e.g. push) → payload schema
  const webhooks: Record<string, Record<string, unknown>> = {};
  const used = new Set<string>();
  const collect = (node: unknown) => {
    if (Array.isArray(node)) node.forEach(collect);
    else if (node && typeof node === 'object') {
      for (const [k, v] of Object.entries(node)) {
        if (k === '$ref' && typeof v === 'string') {
          const name = v.replace('#/components/schemas/', '');
          if (!(name in spec.components.schemas)) throw new Error(`unresolvable ${v}`);
          if (!used.has(name)) {
            used.add(name);
            collect(spec.components.schemas[name]);
          }
        } else if (!DATA.has(k) && !DOCUMENTATION.has(k)) collect(v);
      }
    }
  };
  for (const w of Object.values(spec.webhooks)) {
    // operationId is `<event with dashes>/<action with dashes>` or just the event (`push`)
    const [event, action = ''] = w.post.operationId.split('/') as [string, string?];
    if (!wanted.has(event)) continue;
    const schema = w.post.requestBody.content['application/json']?.schema;
    if (!schema) throw new Error(`webhook ${w.post.operationId} has no application/json payload`);
    collect(schema);
    const name = event.replace(/-/g, '_');
    webhooks[name] ??= {};
    // actions are sent with underscores (`in_progress`, `ready_for_review`)
    webhooks[name][action.replace(/-/g, '_')] = strip(schema);
  }
  for (const e of WEBHOOK_EVENTS)
    if (!webhooks[e]) throw new Error(`no webhook ${e} in @octokit/openapi-webhooks@${version}`);
  const schemas = Object.fromEntries(
    [...used].sort().map((name) => [name, strip(spec.components.schemas[name])]),
  );
  const file = join(FIXTURES, 'github-webhooks.json');
  writeFileSync(
    file,
    `${JSON.stringify({
      source: { package: '@octokit/openapi-webhooks', version, file: WEBHOOKS_FILE },
      openapi: spec.openapi,
      webhooks,
      components: { schemas },
    })}\n`,
  );
  return { count: Object.values(webhooks).reduce((n, a) => n + Object.keys(a).length, 0), file };
}

function packageVersion(dir: string): string {
  return (JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { version: string }).version;
}

/** `npm pack <pkg>@<version>` into `tmp` and unpack only `package.json` and `file`; the package dir. */
function packed(tmp: string, pkg: string, version: string, file: string): string {
  const dest = mkdtempSync(join(tmp, 'pkg-'));
  execFileSync('npm', ['pack', `${pkg}@${version}`, '--pack-destination', dest, '--silent'], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const tgz = readdirSync(dest).find((f) => f.endsWith('.tgz'));
  if (!tgz) throw new Error(`npm pack ${pkg}@${version} produced no tarball`);
  execFileSync('tar', ['-xzf', join(dest, tgz), '-C', dest, 'package/package.json', `package/${file}`]);
  rmSync(join(dest, tgz));
  return join(dest, 'package');
}

function main() {
  const args = process.argv.slice(2);
  const opt = (name: string) => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : undefined;
  };
  const tmp = mkdtempSync(join(tmpdir(), 'spark-openapi-'));
  try {
    const rest =
      opt('--rest') ?? packed(tmp, '@octokit/openapi', opt('--rest-version') ?? 'latest', REST_FILE);
    const hooks =
      opt('--webhooks') ??
      packed(tmp, '@octokit/openapi-webhooks', opt('--webhooks-version') ?? 'latest', WEBHOOKS_FILE);
    const r = extractRest(rest);
    console.log(`wrote ${r.count} operations of @octokit/openapi@${packageVersion(rest)} to ${r.file}`);
    const w = extractWebhooks(hooks);
    console.log(
      `wrote ${w.count} webhook payload schemas of @octokit/openapi-webhooks@${packageVersion(hooks)} to ${w.file}`,
    );
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

main();
