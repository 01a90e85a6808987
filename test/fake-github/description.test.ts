import { createSign } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { example, startHarness } from '../../scripts/sim/fake-github/harness.ts';
import { matchOperation, REST_SOURCE } from '../../scripts/sim/fake-github/operations.ts';
import { exampleOf, fromOpenApi30, overlay, validate } from '../../scripts/sim/fake-github/schema.ts';
import {
  type FakeGitHub,
  FakeGitHubViolations,
  startFakeGitHub,
} from '../../scripts/sim/fake-github/server.ts';
import { webhooksSource } from '../../scripts/sim/fake-github/webhooks.ts';
import { startFakeGitHubProcess } from '../../scripts/sim/load/fake-github-process.ts';

/**
 * The fake GitHub answers from GitHub's own descriptions (operations.ts, webhooks.ts): each
 * request is one operation of the REST description, checked with a complete JSON Schema
 * validator; what GitHub refuses is refused the way GitHub answers it and recorded as a
 * violation, which fails whoever started the fake unless the test takes it on purpose.
 */

let gh: FakeGitHub;
let now: number;

beforeEach(async () => {
  gh = await startFakeGitHub();
  now = Date.UTC(2026, 10, 30, 12, 0, 0);
  gh.clock = () => now;
  gh.addRepo('acme/butter', { installationId: 77, headSha: 'a'.repeat(40) });
});
afterEach(async () => {
  expect(gh.violations).toEqual([]);
  await gh.close();
});

function jwt(): string {
  const enc = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const s = Math.floor(now / 1000);
  const body = `${enc({ alg: 'RS256', typ: 'JWT' })}.${enc({ iss: gh.appId, iat: s - 30, exp: s + 540 })}`;
  return `${body}.${createSign('RSA-SHA256').update(body).sign(gh.privateKey).toString('base64url')}`;
}

async function call(method: string, path: string, auth: string | null, body?: unknown, raw?: string) {
  const res = await fetch(`${gh.url}${path}`, {
    method,
    headers: { ...(auth ? { authorization: auth } : {}), 'content-type': 'application/json' },
    ...(raw !== undefined ? { body: raw } : body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

async function token(): Promise<string> {
  const r = await call('POST', '/app/installations/77/access_tokens', `Bearer ${jwt()}`);
  expect(r.status).toBe(201);
  return `token ${r.body.token as string}`;
}

const checkRun = (over: Record<string, unknown> = {}) => ({
  name: 'Spark test',
  head_sha: 'a'.repeat(40),
  status: 'queued',
  output: { title: 'Spark test queued', summary: 'Waiting' },
  ...over,
});

describe(`request bodies against GitHub's description (${REST_SOURCE})`, () => {
  it('a 70,000-character check-run summary is 422 with GitHub’s words, a violation, and creates nothing', async () => {
    const t = await token();
    const r = await call(
      'POST',
      '/repos/acme/butter/check-runs',
      t,
      checkRun({ output: { title: 'x', summary: 's'.repeat(70_000) } }),
    );
    expect(r.status).toBe(422);
    // GitHub's answer: https://github.com/reviewdog/action-rubocop/issues/67
    expect(r.body).toEqual({
      message: 'Invalid request.\n\nOnly 65535 characters are allowed; 70000 were supplied.',
      documentation_url: expect.stringMatching(/^https:\/\/docs\.github\.com\/rest\/.*#create-a-check-run$/),
    });
    expect(gh.checkRuns).toEqual([]);
    expect(gh.refused).toMatchObject([
      { method: 'POST', path: '/repos/acme/butter/check-runs', status: 422 },
    ]);
    expect(gh.takeViolations()).toEqual([
      'request POST /repos/{owner}/{repo}/check-runs: /output/summary must NOT have more than 65535 characters',
    ]);
    // exactly at the limit is accepted
    const ok = await call(
      'POST',
      '/repos/acme/butter/check-runs',
      t,
      checkRun({ output: { title: 'x', summary: 's'.repeat(65_535) } }),
    );
    expect(ok.status).toBe(201);
  });

  it('26 workflow_dispatch inputs are 422 (maxProperties 25) and queue no run', async () => {
    const t = await token();
    const inputs = Object.fromEntries(Array.from({ length: 26 }, (_, i) => [`in${i}`, 'x']));
    const r = await call('POST', '/repos/acme/butter/actions/workflows/spark-pr-test.yml/dispatches', t, {
      ref: 'main',
      inputs,
    });
    expect(r.status).toBe(422);
    expect(r.body.message).toBe(
      'Invalid request.\n\nNo more than 25 properties are allowed; 26 were supplied.',
    );
    expect(gh.runs).toEqual([]);
    expect(gh.dispatches).toEqual([]);
    expect(gh.takeViolations()).toEqual([
      'request POST /repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches: /inputs must NOT have more than 25 properties',
    ]);
  });

  it('missing required fields, wrong types and enums are each one line of the 422', async () => {
    const t = await token();
    const r = await call('POST', '/repos/acme/butter/check-runs', t, {
      name: 5,
      status: 'waiting-for-godot',
    });
    expect(r.status).toBe(422);
    expect(r.body.message.split('\n').slice(2).sort()).toEqual(
      [
        `"head_sha" wasn't supplied.`,
        "For 'properties/name', 5 is not a string.",
        '"waiting-for-godot" is not a member of ["queued", "in_progress", "completed"].',
      ].sort(),
    );
    // no body at all where one is required: GitHub's words for nil
    const none = await call('POST', '/repos/acme/butter/check-runs', t);
    expect(none).toMatchObject({
      status: 422,
      body: { message: "Invalid request.\n\nFor 'links/0/schema', nil is not an object." },
    });
    expect(gh.takeViolations()).toHaveLength(2);
  });

  it('malformed JSON is 400 "Problems parsing JSON"; a body sent to an operation that takes none is recorded', async () => {
    const t = await token();
    const bad = await call('POST', '/repos/acme/butter/check-runs', t, undefined, '{"name": ');
    expect(bad).toMatchObject({ status: 400, body: { message: 'Problems parsing JSON' } });
    expect(gh.takeViolations()).toEqual([
      'request POST /repos/{owner}/{repo}/check-runs: the body is not JSON',
    ]);
    await call('POST', '/repos/acme/butter/actions/workflows/spark-pr-test.yml/dispatches', t, {
      ref: 'main',
      inputs: {
        reservation_id: 'r-1',
        nonce: '0123456789abcdef01',
        head_sha: 'b'.repeat(40),
        topology: 'single',
        suite: 'smoke',
      },
    });
    const cancel = await call('POST', `/repos/acme/butter/actions/runs/${gh.runs[0]!.id}/cancel`, t, {
      force: true,
    });
    expect(cancel.status).toBe(202);
    expect(gh.takeViolations()).toEqual([
      'request POST /repos/{owner}/{repo}/actions/runs/{run_id}/cancel: sends a body, but the operation takes none',
    ]);
  });
});

describe('routes, path and query parameters', () => {
  it('an unknown route, or a method the path does not support, is 404 and a violation', async () => {
    const t = await token();
    expect(await call('GET', '/repos/acme/butter/secrets', t)).toMatchObject({
      status: 404,
      body: { message: 'Not Found' },
    });
    expect((await call('PUT', '/repos/acme/butter', t, {})).status).toBe(404);
    expect(gh.takeViolations()).toEqual([
      "GET /repos/acme/butter/secrets: not an operation of GitHub's description the fake serves",
      "PUT /repos/acme/butter: not an operation of GitHub's description the fake serves",
    ]);
  });

  it('a path value the description rejects names nothing (404); a query value it rejects is 422', async () => {
    const t = await token();
    expect((await call('DELETE', '/repos/acme/butter/actions/runners/abc', t)).status).toBe(404);
    const page = await call('GET', '/repos/acme/butter/actions/runners?per_page=many', t);
    expect(page.status).toBe(422);
    expect(page.body.message).toBe(`Invalid request.\n\nFor 'per_page', "many" is not an integer.`);
    const status = await call('GET', '/repos/acme/butter/actions/runs?status=bogus', t);
    expect(status.status).toBe(422);
    expect(gh.takeViolations()).toEqual([
      'request DELETE /repos/{owner}/{repo}/actions/runners/{runner_id}: path parameter runner_id="abc": must be integer',
      'request GET /repos/{owner}/{repo}/actions/runners: query parameter per_page="many": must be integer',
      expect.stringMatching(
        /^request GET \/repos\/\{owner\}\/\{repo\}\/actions\/runs: query parameter status="bogus": must be equal to one of the allowed values/,
      ),
    ]);
  });

  it('an undeclared query parameter is ignored as GitHub ignores it, and recorded', async () => {
    const t = await token();
    const r = await call('GET', '/repos/acme/butter/actions/runs?labels=spark', t);
    expect(r.status).toBe(200);
    expect(gh.takeViolations()).toEqual([
      'request GET /repos/{owner}/{repo}/actions/runs: query parameter "labels" is not in the description (GitHub ignores it)',
    ]);
  });

  it('`created` takes the search syntax around the date-time the description types', async () => {
    const t = await token();
    for (const created of [
      '>=2026-11-30T08:00:00Z',
      '<2026-11-30',
      '2026-11-01..2026-11-30',
      '2026-11-01T00:00:00Z..*',
    ]) {
      const r = await call(
        'GET',
        `/repos/acme/butter/actions/workflows/spark-pr-test.yml/runs?created=${encodeURIComponent(created)}`,
        t,
      );
      expect(r.status, created).toBe(200);
    }
    expect((await call('GET', '/repos/acme/butter/actions/runs?created=yesterday', t)).status).toBe(422);
    expect(gh.takeViolations()).toHaveLength(1);
  });
});

describe('responses and webhooks', () => {
  it('a response that breaks the operation’s schema, or a status it does not list, is a violation', async () => {
    const t = await token();
    // a complete repository but for one field of the wrong type, then one missing its fields
    const repo = matchOperation('get', '/repos/acme/butter')!.op.responses['200'];
    gh.fail({
      method: 'GET',
      path: /^\/repos\/acme\/butter$/,
      status: 200,
      body: overlay(exampleOf(repo), { full_name: 7 }),
    });
    await call('GET', '/repos/acme/butter', t);
    gh.fail({
      method: 'GET',
      path: /^\/repos\/acme\/butter$/,
      status: 200,
      body: { full_name: 'acme/butter' },
    });
    await call('GET', '/repos/acme/butter', t);
    gh.fail({ method: 'GET', path: /^\/repos\/acme\/butter$/, status: 418, body: { message: 'teapot' } });
    await call('GET', '/repos/acme/butter', t);
    const v = gh.takeViolations();
    expect(v[0]).toBe('response GET /repos/{owner}/{repo} 200: /full_name must be string');
    expect(v[1]).toMatch(
      /^response GET \/repos\/\{owner\}\/\{repo\} 200: \/ must have required property '\w+'; .* more$/,
    );
    expect(v[2]).toBe('response GET /repos/{owner}/{repo} 418: status 418 is not documented');
    expect(v).toHaveLength(3);
    // GitHub's error answers on any endpoint are not violations
    gh.fail({ method: 'GET', path: /^\/repos\/acme\/butter$/, status: 502 });
    expect((await call('GET', '/repos/acme/butter', t)).status).toBe(502);
  });

  it(`webhook payloads are checked against GitHub's webhook description (${webhooksSource()})`, () => {
    gh.checkWebhook('pull_request', example('pull_request', 'labeled'));
    gh.checkWebhook('workflow_job', example('workflow_job', 'in_progress'));
    gh.checkWebhook('push', example('push'));
    expect(gh.violations).toEqual([]);
    const p = example('pull_request', 'labeled');
    p.pull_request.labels = [{ name: 'spark-test' }];
    gh.checkWebhook('pull_request', p);
    gh.checkWebhook('pull_request', { ...example('pull_request', 'labeled'), action: 'teleported' });
    gh.checkWebhook('check_suite', {});
    expect(gh.takeViolations()).toEqual([
      expect.stringMatching(
        /^webhook pull_request\.labeled: \/pull_request\/labels\/0 must have required property 'id'/,
      ),
      'webhook pull_request: action "teleported" is not one GitHub sends for pull_request',
      expect.stringMatching(/^webhook check_suite: not an event of GitHub's webhook description/),
    ]);
  });

  it('nullable in OpenAPI 3.0: null joins the type and the enum, as GitHub answers unfinished work', () => {
    const conclusion = fromOpenApi30({
      type: 'string',
      nullable: true,
      enum: ['success', 'failure'],
    }) as Record<string, unknown>;
    expect(validate(conclusion, null)).toEqual([]);
    expect(validate(conclusion, 'success')).toEqual([]);
    expect(validate(conclusion, 'maybe')).toHaveLength(1);
    expect(validate(fromOpenApi30({ type: 'string' }) as Record<string, unknown>, null)).toHaveLength(1);
    const nullableRef = fromOpenApi30({ nullable: true, anyOf: [{ type: 'integer' }] }) as Record<
      string,
      unknown
    >;
    expect(validate(nullableRef, null)).toEqual([]);
  });
});

describe('violations fail whoever started the fake', () => {
  it('FakeGitHub.close() throws them; takeViolations() clears them', async () => {
    const other = await startFakeGitHub();
    await fetch(`${other.url}/nowhere`);
    const closed = other.close();
    await expect(closed).rejects.toBeInstanceOf(FakeGitHubViolations);
    await expect(closed).rejects.toThrow(/GET \/nowhere: not an operation/);
    // the server is down all the same
    await expect(fetch(`${other.url}/nowhere`)).rejects.toThrow();
  });

  it('the harness (startHarness) fails on close after stopping everything', async () => {
    const h = await startHarness();
    h.gh.checkWebhook('pull_request', { action: 'labeled' });
    await expect(h.close()).rejects.toBeInstanceOf(FakeGitHubViolations);
    await expect(fetch(`${h.c.url}/healthz`)).rejects.toThrow();
  });

  it('the fake GitHub in its own process (load tests, bench) fails on close too', async () => {
    const p = await startFakeGitHubProcess([]);
    expect((await fetch(`${p.url}/nowhere`)).status).toBe(404);
    await expect(p.close()).rejects.toThrow(/GET \/nowhere: not an operation/);
  });
});
