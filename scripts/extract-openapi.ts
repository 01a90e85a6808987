#!/usr/bin/env -S npx tsx
/**
 * Extracts the few GitHub REST operations the controller calls from the official OpenAPI
 * description (`@octokit/openapi`, dereferenced api.github.com spec) into a small committed
 * fixture, `test/fixtures/openapi/github-rest-subset.json`. The fake GitHub server in
 * `test/fake-github/` validates every request body and response body against it, so the fake
 * cannot drift from GitHub.
 *
 * `@octokit/openapi` is ~400 MB unpacked and is never a dependency of this repository. To refresh:
 *
 *   (cd /tmp/oa && npm pack @octokit/openapi && tar xzf octokit-openapi-*.tgz \
 *     package/package.json package/generated/api.github.com.deref.json)
 *   npx tsx scripts/extract-openapi.ts /tmp/oa/package
 *
 * Descriptions and examples are dropped to keep the fixture small; types, enums, required
 * fields and nullability are kept as published.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** [method, path] of every GitHub REST call the controller makes (functions/github/). */
export const OPERATIONS: ReadonlyArray<readonly [string, string]> = [
  ['post', '/app/installations/{installation_id}/access_tokens'],
  ['get', '/repos/{owner}/{repo}/installation'],
  ['get', '/repos/{owner}/{repo}'],
  ['get', '/repos/{owner}/{repo}/collaborators/{username}/permission'],
  ['get', '/repos/{owner}/{repo}/pulls/{pull_number}'],
  ['get', '/repos/{owner}/{repo}/commits/{ref}'],
  ['post', '/repos/{owner}/{repo}/check-runs'],
  ['patch', '/repos/{owner}/{repo}/check-runs/{check_run_id}'],
  ['get', '/repos/{owner}/{repo}/commits/{ref}/check-runs'],
  ['post', '/repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches'],
  ['post', '/repos/{owner}/{repo}/actions/runners/generate-jitconfig'],
  ['post', '/orgs/{org}/actions/runners/generate-jitconfig'],
  ['delete', '/repos/{owner}/{repo}/actions/runners/{runner_id}'],
  ['delete', '/orgs/{org}/actions/runners/{runner_id}'],
  ['get', '/repos/{owner}/{repo}/actions/runners'],
  ['get', '/orgs/{org}/actions/runner-groups/{runner_group_id}'],
  ['get', '/orgs/{org}/actions/runner-groups/{runner_group_id}/repositories'],
  ['post', '/repos/{owner}/{repo}/labels'],
  // run identity and job binding (issue 12): the dispatched run, its jobs, the org runner list
  ['get', '/repos/{owner}/{repo}/actions/runs'],
  ['get', '/repos/{owner}/{repo}/actions/workflows/{workflow_id}/runs'],
  ['get', '/repos/{owner}/{repo}/actions/runs/{run_id}'],
  ['get', '/repos/{owner}/{repo}/actions/runs/{run_id}/jobs'],
  ['post', '/repos/{owner}/{repo}/actions/runs/{run_id}/cancel'],
  ['get', '/orgs/{org}/actions/runners'],
  // deliveries missed while the controller was down (ADR 0091): list them, ask for a redelivery
  ['get', '/app/hook/deliveries'],
  ['post', '/app/hook/deliveries/{delivery_id}/attempts'],
  // a CI task revokes its clone token after the fetch (ADR 0115); the task calls it, not the
  // controller, but the fake GitHub serves it and checks it like the rest
  ['delete', '/installation/token'],
  // the dispatched workflow's declared inputs are read from the file on the default branch
  ['get', '/repos/{owner}/{repo}/contents/{path}'],
];

const DROP = new Set(['description', 'example', 'examples', 'summary', 'externalDocs', 'x-github', 'title']);

function strip(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(strip);
  if (node && typeof node === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(node)) {
      if (DROP.has(k)) continue;
      out[k] =
        k === 'properties'
          ? Object.fromEntries(Object.entries(v as object).map(([p, s]) => [p, strip(s)]))
          : strip(v);
    }
    return out;
  }
  return node;
}

type JsonContent = { content?: { 'application/json'?: { schema?: unknown } } } | undefined;
interface SpecOperation {
  requestBody?: JsonContent & { required?: boolean };
  responses: Record<string, JsonContent>;
}

interface OperationFixture {
  method: string;
  path: string;
  requestBody: unknown | null;
  requestBodyRequired: boolean;
  responses: Record<string, unknown | null>;
}

function main() {
  const pkg = process.argv[2];
  if (!pkg) {
    console.error('usage: npx tsx scripts/extract-openapi.ts <path to node_modules/@octokit/openapi>');
    process.exit(2);
  }
  const specPath = join(pkg, 'generated', 'api.github.com.deref.json');
  const spec = JSON.parse(readFileSync(specPath, 'utf8')) as {
    info: { version: string };
    paths: Record<string, Record<string, SpecOperation>>;
  };
  const version = (JSON.parse(readFileSync(join(pkg, 'package.json'), 'utf8')) as { version: string })
    .version;
  const operations: OperationFixture[] = [];
  for (const [method, path] of OPERATIONS) {
    const op = spec.paths[path]?.[method];
    if (!op) throw new Error(`${method.toUpperCase()} ${path} is not in ${specPath}`);
    const responses: Record<string, unknown | null> = {};
    for (const [status, r] of Object.entries(op.responses)) {
      responses[status] = strip(r?.content?.['application/json']?.schema ?? null);
    }
    operations.push({
      method,
      path,
      requestBody: strip(op.requestBody?.content?.['application/json']?.schema ?? null),
      requestBodyRequired: op.requestBody?.required === true,
      responses,
    });
  }
  const out = join(import.meta.dirname, '..', 'test', 'fixtures', 'openapi', 'github-rest-subset.json');
  writeFileSync(
    out,
    `${JSON.stringify({ source: `@octokit/openapi@${version} generated/api.github.com.deref.json`, openapi: spec.info.version, operations })}\n`,
  );
  console.log(`wrote ${operations.length} operations to ${out}`);
}

main();
