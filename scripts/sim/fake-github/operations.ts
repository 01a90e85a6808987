import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { RestOperationFixture } from '../../extract-openapi.ts';
import {
  describeProblems,
  exampleOf,
  fromOpenApi30,
  precompile,
  type Schema,
  type SchemaProblem,
  shareSubschemas,
  validate,
} from './schema.ts';

/**
 * The REST operations the fake GitHub serves, from GitHub's own description: the extract
 * `scripts/sim/fixtures/openapi/github-rest.json` (`scripts/extract-openapi.ts`, `@octokit/openapi`).
 * Each request is matched to one operation and checked against its path and query parameters
 * and request body; each response against the operation's response schema for that status.
 */

/** An operation of the extract, its schemas as the validator reads them. */
type FixtureOperation = RestOperationFixture<Schema>;

interface Fixture {
  source: { package: string; version: string; file: string };
  openapi: string;
  operations: FixtureOperation[];
}

export interface Operation {
  method: string;
  path: string;
  operationId: string;
  /** GitHub's page for the operation, the `documentation_url` of its error bodies. */
  documentationUrl: string;
  parameters: FixtureOperation['parameters'];
  /** JSON Schema of the `application/json` request body, or null when it takes none. */
  requestBody: Schema | null;
  requestBodyRequired: boolean;
  /** Status → JSON Schema of the `application/json` response (null: no JSON body documented). */
  responses: Record<string, Schema | null>;
  re: RegExp;
  names: string[];
}

const fixture = JSON.parse(
  readFileSync(join(import.meta.dirname, '..', 'fixtures', 'openapi', 'github-rest.json'), 'utf8'),
) as Fixture;

/** Where the REST schemas come from, e.g. `@octokit/openapi@23.0.2`. */
export const REST_SOURCE = `${fixture.source.package}@${fixture.source.version}`;

const literalSegments = (path: string) => path.split('/').filter((s) => s && !s.startsWith('{')).length;

/**
 * Every operation, most specific path first (more literal segments win), so
 * `…/runners/generate-jitconfig` is never read as `…/runners/{runner_id}`.
 */
export const operations: Operation[] = fixture.operations
  .map((o): Operation => {
    const names: string[] = [];
    const re = new RegExp(
      `^${o.path.replace(/\{([^}]+)\}/g, (_m, n: string) => {
        names.push(n);
        // `x-multi-segment` parameters span slashes (`contents/{path}`: `.github/workflows/x.yml`)
        return o.parameters.find((p) => p.name === n && p.in === 'path')?.multiSegment ? '(.+)' : '([^/]+)';
      })}$`,
    );
    const responses: Record<string, Schema | null> = {};
    for (const [status, r] of Object.entries(o.responses))
      responses[status] = r.schema ? (fromOpenApi30(r.schema) as Schema) : null;
    return {
      method: o.method,
      path: o.path,
      operationId: o.operationId,
      documentationUrl: o.documentationUrl,
      parameters: o.parameters.map((p) => ({ ...p, schema: fromOpenApi30(p.schema) as Schema })),
      requestBody: o.requestBody?.schema ? (fromOpenApi30(o.requestBody.schema) as Schema) : null,
      requestBodyRequired: o.requestBody?.required === true,
      responses,
      re,
      names,
    };
  })
  .sort((a, b) => literalSegments(b.path) - literalSegments(a.path));

// the repository, user and run objects the dereferenced description repeats compile once
shareSubschemas(
  'https://spark.invalid/github-rest-shared.json',
  operations.flatMap((o) =>
    [o.requestBody, ...Object.values(o.responses)].filter((x): x is Schema => x != null),
  ),
);

let warm = false;

/**
 * Compiles every operation's validators once per process (loading them from the cache on a
 * machine that compiled them before): done when a fake starts, so no request waits for a compile
 * that a loaded machine can stretch past the controller's GitHub timeout.
 */
export function warmValidators(): void {
  if (warm) return;
  warm = true;
  for (const o of operations) {
    if (o.requestBody) precompile(o.requestBody);
    for (const p of o.parameters) precompile(p.schema);
    for (const r of Object.values(o.responses))
      if (r) {
        precompile(r);
        exampleOf(r);
      }
  }
}

/** The operation `method pathname` calls, with its decoded path parameters; null when none does. */
export function matchOperation(
  method: string,
  pathname: string,
): { op: Operation; params: Record<string, string> } | null {
  const m = method.toLowerCase();
  for (const op of operations) {
    if (op.method !== m) continue;
    const hit = op.re.exec(pathname);
    if (!hit) continue;
    const params: Record<string, string> = {};
    for (const [i, n] of op.names.entries()) {
      try {
        params[n] = decodeURIComponent(hit[i + 1]!);
      } catch {
        return null;
      }
    }
    return { op, params };
  }
  return null;
}

/**
 * A path or query value as the description types it: GitHub reads `?per_page=50` and
 * `/runners/42` as integers, so a numeric string is checked as a number where the string itself
 * does not fit (`workflow_id` is `oneOf [integer, string]`, and `spark.yml` stays a string).
 */
function parameterValue(schema: Schema, raw: string): unknown {
  if (validate(schema, raw).length === 0) return raw;
  if (/^-?\d+(\.\d+)?$/.test(raw)) return Number(raw);
  if (raw === 'true' || raw === 'false') return raw === 'true';
  return raw;
}

/**
 * The dates in a date query value: GitHub's date filters (`created` of the workflow-run lists)
 * take the search syntax around the date-time the description types, `>=2026-11-30T08:00:00Z`,
 * `<2026-11-30`, `2026-11-01..2026-11-30`, `2026-11-01..*`
 * (https://docs.github.com/search-github/getting-started-with-searching-on-github/understanding-the-search-syntax#query-for-dates,
 * which the parameter's description links), and a day where it says date-time.
 */
function dateRangeParts(schema: Schema, raw: string): string[] {
  if (schema.format !== 'date-time' && schema.format !== 'date') return [raw];
  const parts = /^(?:>=|<=|>|<)(.+)$/.exec(raw)?.slice(1) ?? raw.split('..');
  return parts
    .filter((x) => x !== '*')
    .map((x) => (schema.format === 'date-time' && /^\d{4}-\d{2}-\d{2}$/.test(x) ? `${x}T00:00:00Z` : x));
}

export interface RequestCheck {
  /** The parsed JSON body (null when there is none or it is not JSON). */
  body: unknown;
  /** What the description rejects, as violation lines. */
  violations: string[];
  /** GitHub's answer to a request it rejects before the handler runs; null: handle it. */
  answer: { status: 400 | 404 | 422; body: { message: string; documentation_url: string } } | null;
}

/**
 * Checks a request against its operation. Malformed JSON is GitHub's 400 "Problems parsing JSON"
 * (https://docs.github.com/en/rest/using-the-rest-api/troubleshooting-the-rest-api, "400 Bad
 * Request"); a path value the description rejects (`/runners/abc` where `runner_id` is an
 * integer) names no resource, GitHub's 404; a body or query value it rejects is its 422
 * `Invalid request.` with one line per problem, worded as GitHub words them
 * (github-messages.ts). A query parameter the operation does not declare is ignored by GitHub, so
 * it is answered normally and only recorded: whatever the caller meant by it did not happen. Each
 * of these is a violation: the caller sent something GitHub does not take.
 */
export function checkRequest(
  op: Operation,
  params: Record<string, string>,
  query: URLSearchParams,
  text: string,
): RequestCheck {
  const what = `${op.method.toUpperCase()} ${op.path}`;
  const violations: string[] = [];
  let body: unknown = null;
  if (text) {
    try {
      body = JSON.parse(text);
    } catch {
      violations.push(`request ${what}: the body is not JSON`);
      return {
        body: null,
        violations,
        answer: {
          status: 400,
          body: { message: 'Problems parsing JSON', documentation_url: op.documentationUrl },
        },
      };
    }
  }
  const problems: SchemaProblem[] = [];
  const pathProblems: string[] = [];
  for (const p of op.parameters) {
    const raw = p.in === 'path' ? params[p.name] : query.get(p.name);
    if (raw == null) {
      if (p.required) problems.push(missing(p.name));
      continue;
    }
    if (p.in === 'path') {
      for (const x of validate(p.schema, parameterValue(p.schema, raw)))
        pathProblems.push(
          `path parameter ${p.name}=${JSON.stringify(raw)}: ${x.message.replace(/^\/ /, '')}`,
        );
      continue;
    }
    for (const value of dateRangeParts(p.schema, raw))
      for (const x of validate(p.schema, parameterValue(p.schema, value)))
        problems.push({
          ...x,
          path: `/${p.name}${x.path}`,
          message: `${p.in} parameter ${p.name}=${JSON.stringify(value)}: ${x.message.replace(/^\/ /, '')}`,
          github: x.github.replace("For ''", `For '${p.name}'`),
        });
  }
  for (const k of new Set(query.keys()))
    if (!op.parameters.some((p) => p.in === 'query' && p.name === k))
      violations.push(
        `request ${what}: query parameter "${k}" is not in the description (GitHub ignores it)`,
      );
  if (op.requestBody) {
    if (body == null && op.requestBodyRequired)
      problems.push({
        path: '',
        keyword: 'type',
        message: '/ a request body is required',
        github: "For 'links/0/schema', nil is not an object.",
      });
    else if (body != null) problems.push(...validate(op.requestBody, body));
  } else if (body != null) {
    violations.push(`request ${what}: sends a body, but the operation takes none`);
  }
  if (pathProblems.length) {
    violations.push(`request ${what}: ${pathProblems.join('; ')}`);
    return {
      body,
      violations,
      answer: { status: 404, body: { message: 'Not Found', documentation_url: op.documentationUrl } },
    };
  }
  if (!problems.length) return { body, violations, answer: null };
  violations.push(`request ${what}: ${describeProblems(problems)}`);
  return {
    body,
    violations,
    answer: {
      status: 422,
      body: {
        message: `Invalid request.\n\n${problems.map((p) => p.github).join('\n')}`,
        documentation_url: op.documentationUrl,
      },
    },
  };
}

const missing = (name: string): SchemaProblem => ({
  path: `/${name}`,
  keyword: 'required',
  message: `/${name} is required`,
  github: `"${name}" wasn't supplied.`,
});

/** An error body as GitHub sends one: `message` and `documentation_url`. */
function errorShapeOk(data: unknown): boolean {
  const e = data as { message?: unknown; documentation_url?: unknown } | null;
  return typeof e?.message === 'string' && typeof e.documentation_url === 'string';
}

/**
 * Checks a response against the operation's schema for its status. A status the description does
 * not list for the operation is a violation, except GitHub's answers on any endpoint: 401/403 and
 * 5xx, a 404 for what does not exist or the caller cannot see (DOC.notFound in server.ts), and a
 * refusal the fake answers as GitHub does (`refusal`: a rejected request, a dispatch GitHub
 * refuses), each in GitHub's error shape.
 */
export function checkResponse(
  op: Operation,
  status: number,
  data: unknown,
  refusal: boolean,
): { violations: string[]; refused: boolean } {
  const what = `response ${op.method.toUpperCase()} ${op.path} ${status}`;
  const key = String(status);
  if (key in op.responses) {
    const schema = op.responses[key];
    if (schema && data == null)
      return { violations: [`${what}: no body, but one is documented`], refused: false };
    if (!schema || data == null) return { violations: [], refused: false };
    const problems = validate(schema, data);
    return { violations: problems.length ? [`${what}: ${describeProblems(problems)}`] : [], refused: false };
  }
  if (status >= 500 || status === 401 || status === 403) return { violations: [], refused: false };
  if (status === 404 || refusal) {
    return {
      violations: errorShapeOk(data) ? [] : [`${what}: not GitHub's error shape`],
      refused: true,
    };
  }
  return { violations: [`${what}: status ${status} is not documented`], refused: false };
}
