import { createHmac } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { type ServerType, serve } from '@hono/node-server';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiToken } from '../../functions/auth/tokens.ts';
import { drainGitHubOutbox } from '../../functions/github/module.ts';
import { githubService } from '../../functions/github/service.ts';
import { WEBHOOK_BODY_DEADLINE_MS } from '../../functions/github/webhook.ts';
import { silentLogger } from '../../functions/log.ts';
import { appModules } from '../../functions/modules.ts';
import { type RunningController, startController } from '../../functions/node-server.ts';
import { settingsFromEnv } from '../../functions/settings.ts';
import { example, SECRET } from '../../scripts/sim/fake-github/harness.ts';
import { type FakeGitHub, startFakeGitHub } from '../../scripts/sim/fake-github/server.ts';
import { tempDir } from '../../scripts/sim/ledger.ts';
import { expectRejectedWroteNothing, type LedgerWatch, watchLedger } from '../helpers/load/ledger-watch.ts';

/**
 * fuzzing the webhook endpoint: fast-check generates requests (random and truncated
 * bodies, real example payloads with fields set to wrong types, huge fields, bodies over the
 * 2 MB limit, bad / missing / wrong-length / wrong-secret signatures, valid signatures over
 * garbage, unknown events and actions, bad delivery ids) and sends them through the real app
 * (`app.request()`, in process) to a controller on a real libSQL file with an enabled
 * repository and the fake GitHub behind it.
 *
 * For every request: no 5xx, and an `{"error":{code,message}}` body on every 4xx.
 * "Rejected" means any 4xx answer. A rejected request writes nothing: a second connection's
 * `PRAGMA data_version` is unchanged (no commit at all) and so are the row counts of every table
 * and the last event id. An accepted (2xx) delivery may write, but only as a delivery: a `ping`
 * or a redelivery of a known id writes nothing; any other accepted delivery records its
 * X-GitHub-Delivery exactly once in webhook_deliveries (a validly signed unknown event does
 * that and nothing else).
 *
 * Replay a failure with SPARK_FUZZ_SEED=<seed> (printed with the counterexample).
 */

const LONG = process.env.SPARK_TEST_LONG === '1';
const RUNS = Number(process.env.SPARK_FUZZ_WEBHOOK_RUNS ?? (LONG ? 50_000 : 10_000));
/**
 * `npm test` runs these recorded seeds, so a CI run never fails by the luck of a seed. Every
 * seed that ever failed stays here as a regression case, with what it found:
 * - 742671736: a `/spark test` comment on a PR GitHub answers 404 for got a 502; now
 *   the delivery ends with the reason.
 * - 758852289: its first accepted delivery was an unknown event on a fresh ledger, which creates
 *   the `result="ignored"` sample of the deliveries counter; the "nothing else" check counted
 *   that row as a write (a test gap, not a product bug): counters are now compared sample by sample.
 * `npm run test:long` explores a new random seed and prints it; SPARK_FUZZ_SEED replays one.
 */
/**
 * Recorded seeds with their request counts. fast-check draws the same values for a seed whatever
 * `numRuns` is, so a regression seed runs at least up to the requests that failed (758852289 failed
 * at requests 5 and 1,612) and leaves the wide exploration to the first seed.
 */
const RECORDED_SEEDS: ReadonlyArray<readonly [seed: number, runs: number]> = [
  [742671736, RUNS],
  [758852289, Math.min(RUNS, 2_000)],
];
const SEEDS = process.env.SPARK_FUZZ_SEED
  ? [Number(process.env.SPARK_FUZZ_SEED)]
  : LONG
    ? [Date.now() % 2 ** 31]
    : RECORDED_SEEDS.map(([seed]) => seed);
const runsFor = (seed: number) => RECORDED_SEEDS.find(([s]) => s === seed)?.[1] ?? RUNS;
const REPO = 'Codertocat/Hello-World';
const MAX = 2 * 1024 * 1024;

let gh: FakeGitHub;
let c: RunningController;
let watch: LedgerWatch;
let cleanup: () => void;

/** A controller on a fresh ledger file in `dir`, answering through `app.request()` only. */
async function fuzzController(dir: string): Promise<{ c: RunningController; url: string }> {
  const url = `file:${join(dir, 'spark.db')}`;
  const settings = settingsFromEnv(
    {
      SPARK_LEDGER_URL: url,
      SPARK_WEBHOOK_SECRET: SECRET,
      SPARK_GITHUB_APP_ID: String(gh.appId),
      SPARK_GITHUB_PRIVATE_KEY: gh.privateKey,
    },
    {
      text: JSON.stringify({
        listen: { host: '127.0.0.1', port: 0 },
        github: { apiUrl: gh.url, runnerGroupId: 1 },
      }),
      source: 'fuzz config',
    },
  );
  // no background ticks: every write must come from the request under test
  const c = await startController({
    settings,
    modules: appModules,
    log: silentLogger,
    noListen: true,
    tickMs: 3_600_000,
    admissionIntervalMs: 3_600_000,
  });
  return { c, url };
}

/**
 * Waits until the controller writes nothing more by itself: an accepted delivery's processing may
 * kick an admission pass, whose grant fills the outbox, whose background sender (woken by that
 * commit, not by the tick) writes each send's result. Until all of that has landed, a later
 * rejected request's "wrote nothing" would see it.
 */
async function quiesce(c: RunningController, watch: LedgerWatch): Promise<void> {
  for (let round = 0; round < 50; round++) {
    const version = await watch.dataVersion();
    await c.loop.runNow();
    await drainGitHubOutbox(c.ctx);
    await new Promise((r) => setImmediate(r));
    if ((await watch.dataVersion()) === version) return;
  }
  throw new Error('the controller kept writing by itself after 50 rounds');
}

/** Serves `app` on a loopback port, as `npm start` does (`@hono/node-server`). */
async function serveOnLoopback(app: RunningController['app']): Promise<{ server: ServerType; port: number }> {
  const server = await new Promise<ServerType>((res) => {
    const s = serve({ fetch: app.fetch, hostname: '127.0.0.1', port: 0 }, () => res(s));
  });
  return { server, port: (server.address() as AddressInfo).port };
}

async function closeServer(server: ServerType): Promise<void> {
  (server as unknown as { closeAllConnections(): void }).closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
}

/**
 * The stalled-body case waits out the controller's body deadline (10 s). It runs against a
 * controller and ledger of its own, started here before the fuzzing, so the deadline passes while
 * the seeds run instead of after them; its test checks the answer and that this ledger, which
 * nothing else writes, got no write at all.
 */
let stall: {
  c: RunningController;
  server: ServerType;
  watch: LedgerWatch;
  before: { version: number; counts: Record<string, number> };
  answer: Promise<StreamResult | Error>;
} | null = null;

beforeAll(async () => {
  gh = await startFakeGitHub();
  // the fake must not close idle keep-alive connections first: on a loaded machine the client
  // can reuse one the server is closing (ECONNRESET → 502), a race of the test setup
  gh.server.keepAliveTimeout = 0;
  const pr = example('pull_request', 'labeled');
  gh.addRepo(REPO, {
    installationId: pr.installation.id,
    collaborators: { Codertocat: 'maintain', outsider: 'write' },
    pulls: { 1: { state: 'open', headSha: 'a'.repeat(40), headRepo: REPO, labels: [] } },
  });
  const tmp = tempDir('spark-fuzz-gh-');
  cleanup = tmp.cleanup;

  mkdirSync(join(tmp.dir, 'stall'));
  const stalled = await fuzzController(join(tmp.dir, 'stall'));
  const { server, port } = await serveOnLoopback(stalled.c.app);
  const stallWatch = await watchLedger(stalled.url);
  // the admission pass a controller starts with writes what it writes before the snapshot
  await stalled.c.loop.settle();
  stall = {
    c: stalled.c,
    server,
    watch: stallWatch,
    before: { version: await stallWatch.dataVersion(), counts: await stallWatch.counts() },
    answer: stream(port, validHeaders('stalled'), { total: 4 * 1024 * 1024, stallAfter: 1024 * 1024 }).catch(
      (e: Error) => e,
    ),
  };

  const main = await fuzzController(tmp.dir);
  c = main.c;
  const { token } = await createApiToken(c.ledger, { name: 'fuzz', scopes: ['operate'] }, 'test');
  const enabled = await c.app.request(`/api/v1/repositories/${REPO}/enable`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    // hosts stay unadopted (no grants, so no runner is ever registered, in the organization's
    // "Default" group 1 either): the readiness checks this does not play are overridden, as an
    // operator may (docs/adr/0165-enable-is-a-gate.md)
    body: JSON.stringify({ pairEnabled: true, override: ['hosts', 'deckard', 'dstack', 'runner-group'] }),
  });
  expect(enabled.status).toBe(200);
  watch = await watchLedger(main.url);
});

afterAll(async () => {
  // whatever the fuzzed webhooks made the controller ask of GitHub matched its schema
  expect(gh?.violations ?? []).toEqual([]);
  watch?.close();
  await c?.close();
  if (stall) {
    await closeServer(stall.server);
    stall.watch.close();
    await stall.c.close();
  }
  await gh?.close();
  cleanup?.();
});

interface StreamResult {
  status: number;
  body: string;
  sent: number;
  peakRss: number;
}

/** Streams `total` bytes to the webhook route on `port` as chunks of one reused buffer until the server answers. */
function stream(
  port: number,
  headers: Record<string, string>,
  o: { total: number; stallAfter?: number },
): Promise<StreamResult> {
  const chunk = Buffer.alloc(1024 * 1024, 'x');
  let peakRss = process.memoryUsage.rss();
  const sampler = setInterval(() => {
    peakRss = Math.max(peakRss, process.memoryUsage.rss());
  }, 10);
  return new Promise((resolve, reject) => {
    let sent = 0;
    let answered = false;
    const req = httpRequest(
      {
        host: '127.0.0.1',
        port,
        path: '/github/webhooks',
        method: 'POST',
        headers: { ...headers, 'transfer-encoding': 'chunked' },
      },
      (res) => {
        answered = true;
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => {
          body += d;
        });
        res.on('end', () => {
          clearInterval(sampler);
          peakRss = Math.max(peakRss, process.memoryUsage.rss());
          req.destroy();
          resolve({ status: res.statusCode ?? 0, body, sent, peakRss });
        });
      },
    );
    req.on('error', (e) => {
      // the server may close the socket once it has answered; the answer is what counts
      if (!answered) {
        clearInterval(sampler);
        reject(e);
      }
    });
    req.write('{"action":"labeled","x":"');
    const pump = () => {
      while (!answered && sent < o.total) {
        if (o.stallAfter !== undefined && sent >= o.stallAfter) return;
        sent += chunk.length;
        if (!req.write(chunk)) {
          req.once('drain', pump);
          return;
        }
      }
      if (!answered && o.stallAfter === undefined) req.end('"}');
    };
    pump();
  });
}

const validHeaders = (id: string) => ({
  'content-type': 'application/json',
  'x-github-event': 'pull_request',
  'x-github-delivery': id,
  // well-formed, but over another body: the body is read (bounded) before it can be checked
  'x-hub-signature-256': `sha256=${'0'.repeat(64)}`,
});

// ------------------------------------------------------------------------------ generators

// biome-ignore lint/suspicious/noExplicitAny: payloads are mutated field by field
type Json = any;

/** Real payloads the controller acts on (enabled repo, authorized sender), as mutation bases. */
function bases(): Array<{ event: string; payload: Json }> {
  const labeled = example('pull_request', 'labeled');
  labeled.label.name = 'spark-test';
  labeled.pull_request.labels = [{ ...labeled.label }];
  const synchronize = example('pull_request', 'synchronize');
  const closed = example('pull_request', 'closed');
  const unlabeled = example('pull_request', 'unlabeled');
  unlabeled.label.name = 'spark-test';
  const comment = example('issue_comment', 'created');
  comment.issue.number = 1;
  comment.issue.pull_request = { url: 'https://api.github.com/repos/Codertocat/Hello-World/pulls/1' };
  comment.comment.body = '/spark test';
  comment.sender.login = 'Codertocat';
  comment.sender.type = 'User';
  const push = example('push');
  push.ref = 'refs/heads/main';
  push.repository.default_branch = 'main';
  const job = example('workflow_job', 'completed');
  job.workflow_job.labels = ['self-hosted', `spark-r-1-${'0123456789abcdef'.repeat(2)}`];
  job.workflow_job.runner_name = 'spark-spark-2-r-1-a0';
  return [
    { event: 'pull_request', payload: labeled },
    { event: 'pull_request', payload: synchronize },
    { event: 'pull_request', payload: closed },
    { event: 'pull_request', payload: unlabeled },
    { event: 'pull_request', payload: example('pull_request', 'assigned') },
    { event: 'issue_comment', payload: comment },
    { event: 'push', payload: push },
    { event: 'workflow_job', payload: job },
    { event: 'workflow_job', payload: example('workflow_job', 'queued') },
    { event: 'star', payload: example('star', 'created') },
    { event: 'ping', payload: example('ping') },
  ];
}
const BASES = bases();

function paths(v: Json, prefix: string[] = [], out: string[][] = [], depth = 0): string[][] {
  if (depth > 5 || v === null || typeof v !== 'object') return out;
  for (const k of Object.keys(v)) {
    out.push([...prefix, k]);
    paths(v[k], [...prefix, k], out, depth + 1);
  }
  return out;
}

const hugeString = fc.integer({ min: 10_000, max: 100_000 }).map((n) => 'x'.repeat(n));
const sparkish = fc.constantFrom(
  'spark-test',
  'spark-pair-test',
  'spark-test-long',
  '/spark test',
  '/spark test --pair',
  '/spark cancel',
  '/spark status',
  '/spark deploy',
  'Codertocat',
  'outsider',
  REPO,
  'evil/Hello-World',
  'refs/heads/main',
  'spark-r-1',
  `spark-r-1-${'0123456789abcdef'.repeat(2)}`,
  'spark-spark-2-r-1-a0',
  'Bot',
);
const anyValue: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 6, arbitrary: fc.jsonValue({ maxDepth: 2 }) },
  { weight: 4, arbitrary: sparkish },
  { weight: 2, arbitrary: fc.constantFrom(null, true, 0, -1, 2 ** 53, 1.5, '', [], {}) },
  { weight: 2, arbitrary: fc.integer() },
  { weight: 1, arbitrary: hugeString },
);

const mutation = fc.record({
  at: fc.nat(),
  op: fc.constantFrom('set', 'set', 'delete'),
  value: anyValue,
});

/** A real payload with a few fields set to other values (often other types) or removed. */
const mutatedExample = fc
  .record({ base: fc.constantFrom(...BASES), mutations: fc.array(mutation, { maxLength: 4 }) })
  .map(({ base, mutations }) => {
    const p = structuredClone(base.payload);
    for (const m of mutations) {
      const all = paths(p);
      if (!all.length) break;
      const path = all[m.at % all.length]!;
      let parent = p;
      for (const k of path.slice(0, -1)) parent = parent[k];
      if (m.op === 'delete') delete parent[path.at(-1)!];
      else parent[path.at(-1)!] = m.value;
    }
    return { event: base.event, body: JSON.stringify(p) };
  });

const eventName = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(...BASES.map((b) => b.event)) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      'issues',
      'watch',
      'check_run',
      'installation',
      'PULL_REQUEST',
      // names that exist on Object.prototype must not reach it (a handler lookup by key)
      'constructor',
      'toString',
      '__proto__',
      'hasOwnProperty',
    ),
  },
  { weight: 1, arbitrary: fc.string({ unit: 'grapheme-ascii', maxLength: 30 }) },
);

const body = fc.oneof(
  { weight: 30, arbitrary: mutatedExample },
  {
    weight: 10,
    arbitrary: fc
      .tuple(mutatedExample, fc.double({ min: 0, max: 1, noNaN: true }))
      .map(([m, f]) => ({ event: m.event, body: m.body.slice(0, Math.floor(m.body.length * f)) })),
  },
  {
    weight: 10,
    arbitrary: fc.tuple(eventName, fc.json({ maxDepth: 3 })).map(([event, body]) => ({ event, body })),
  },
  {
    weight: 5,
    arbitrary: fc.tuple(eventName, fc.string({ maxLength: 200 })).map(([event, body]) => ({ event, body })),
  },
  { weight: 2, arbitrary: fc.constant({ event: 'pull_request', body: '' }) },
  // over the 2 MB limit: refused before parsing
  {
    weight: 1,
    arbitrary: fc
      .integer({ min: MAX - 64, max: MAX + 4096 })
      .map((n) => ({ event: 'pull_request', body: `{"action":"labeled","x":"${'y'.repeat(n)}"}` })),
  },
);

type SigMode =
  | 'valid'
  | 'missing'
  | 'wrong-secret'
  | 'other-body'
  | 'truncated'
  | 'too-long'
  | 'sha1'
  | 'uppercase'
  | 'garbage';
const sigMode = fc.oneof(
  { weight: 8, arbitrary: fc.constant<SigMode>('valid') },
  {
    weight: 6,
    arbitrary: fc.constantFrom<SigMode>(
      'missing',
      'wrong-secret',
      'other-body',
      'truncated',
      'too-long',
      'sha1',
      'uppercase',
      'garbage',
    ),
  },
);

const deliveryId = fc.oneof(
  { weight: 8, arbitrary: fc.uuid() },
  { weight: 1, arbitrary: fc.constantFrom('', 'x'.repeat(101), 'fuzz-seen-1', 'a b', '../../etc') },
  { weight: 1, arbitrary: fc.string({ unit: 'grapheme-ascii', maxLength: 120 }) },
);

const request = fc.record({
  body,
  sig: sigMode,
  garbage: fc.string({ unit: 'grapheme-ascii', maxLength: 80 }),
  id: fc.option(deliveryId, { freq: 10 }),
  event: fc.option(eventName, { freq: 10 }),
  // GitHub sends the App's deliveries as application/json (docs/github-app.md); anything else is
  // refused (415) before the body is read
  contentType: fc.oneof(
    { weight: 6, arbitrary: fc.constant('application/json') },
    { weight: 1, arbitrary: fc.constant('application/json; charset=utf-8') },
    { weight: 2, arbitrary: fc.constantFrom('application/x-www-form-urlencoded', 'text/plain', null) },
  ),
});

/** X-Hub-Signature-256 as GitHub computes it (also over an empty body, which sign() refuses). */
const sign = async (secret: string, body: string) =>
  `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;

async function signatureFor(mode: SigMode, body: string, garbage: string): Promise<string | null> {
  switch (mode) {
    case 'valid':
      return sign(SECRET, body);
    case 'missing':
      return null;
    case 'wrong-secret':
      return sign(`${SECRET}x`, body);
    case 'other-body':
      return sign(SECRET, `${body} `);
    case 'truncated':
      return (await sign(SECRET, body)).slice(0, -2);
    case 'too-long':
      return `${await sign(SECRET, body)}00`;
    case 'sha1':
      return `sha1=${'0'.repeat(40)}`;
    case 'uppercase':
      return `sha256=${(await sign(SECRET, body)).slice(7).toUpperCase()}`;
    case 'garbage':
      return garbage;
  }
}

// ------------------------------------------------------------------------------ property

/** Every persisted metric sample except the webhook deliveries counter, in a stable order. */
const otherCounters = () =>
  watch.all<{ name: string; series: string; value: number }>(
    "SELECT name, series, value FROM metric_counters WHERE name != 'spark_webhook_deliveries_total' ORDER BY name, series",
  );

/** Delivery ids the ledger holds, across seeds: the seeds share one controller and ledger. */
const seen = new Set<string>();

describe('webhook endpoint fuzzing', () => {
  it.each(SEEDS)(
    'seed %i: never answers 5xx and a rejected request writes nothing',
    {
      timeout: LONG ? 1_800_000 : 240_000,
    },
    async (SEED) => {
      const runs = runsFor(SEED);
      if (LONG) console.log(`webhook fuzz: exploring seed ${SEED} (replay: SPARK_FUZZ_SEED=${SEED})`);
      await quiesce(c, watch);
      let version = await watch.dataVersion();
      let counts = await watch.counts();
      const tally: Record<string, number> = {};
      // a redelivery of an id the ledger already holds must be a no-op
      const prop = fc.asyncProperty(request, async (r) => {
        const signature = await signatureFor(r.sig, r.body.body, r.garbage);
        const event = r.event ?? r.body.event;
        const headers: Record<string, string> =
          r.contentType === null ? {} : { 'content-type': r.contentType };
        if (signature !== null) headers['x-hub-signature-256'] = signature;
        if (r.id !== null) headers['x-github-delivery'] = r.id;
        if (event !== null) headers['x-github-event'] = event;
        const countersBefore = await otherCounters();
        const res = await c.app.request('/github/webhooks', { method: 'POST', headers, body: r.body.body });
        // what the server saw (the Headers API trims surrounding whitespace)
        const id = new Headers(headers).get('x-github-delivery');
        const text = await res.text();
        tally[res.status] = (tally[res.status] ?? 0) + 1;
        expect(res.status, text).toBeLessThan(500);
        if (res.status >= 400) {
          await expectRejectedWroteNothing(watch, res.status, text, { version, counts });
          return;
        }
        const json = JSON.parse(text) as { duplicate?: boolean; pong?: boolean; accepted?: boolean };
        // a ping and a known id are answered 200 and change nothing; a new delivery is 202
        expect(res.status).toBe(json.pong || json.duplicate ? 200 : 202);
        // accepted: let the inbox process it, and the admission pass it may have kicked finish,
        // before snapshotting
        await githubService(c.ctx).inbox.drain();
        await quiesce(c, watch);
        const after = await watch.counts();
        if (json.pong || json.duplicate) {
          expect(json.duplicate ? seen.has(id!) || id === 'fuzz-seen-1' : true).toBe(true);
          expect(after.webhook_deliveries).toBe(counts.webhook_deliveries);
        } else {
          expect(seen.has(id!), `delivery ${r.id} processed twice`).toBe(false);
          expect(after.webhook_deliveries).toBe(counts.webhook_deliveries! + 1);
          const row = await watch.all<{ state: string; result: string }>(
            'SELECT state, result FROM webhook_deliveries WHERE delivery_id = ?',
            [id!],
          );
          expect(row).toHaveLength(1);
          // processed to a recorded result: the fake GitHub never fails transiently, so nothing waits
          expect(row[0]!.state, row[0]!.result).toBe('done');
          expect(row[0]!.result).not.toBe('received');
          seen.add(id!);
          if (!['pull_request', 'issue_comment', 'push', 'workflow_job'].includes(event!)) {
            // an event the controller does not handle records its delivery and nothing else; the
            // only counter it may move is the deliveries counter (result "ignored"), whose sample
            // row is created by the first ignored delivery of a fresh ledger (seed 758852289)
            expect({
              ...after,
              webhook_deliveries: counts.webhook_deliveries,
              metric_counters: counts.metric_counters,
            }).toEqual(counts);
            expect(await otherCounters()).toEqual(countersBefore);
          }
        }
        version = await watch.dataVersion();
        counts = after;
      });
      try {
        await fc.assert(prop, { numRuns: runs, seed: SEED, endOnFailure: true });
      } catch (e) {
        const cause = (e as Error).cause;
        throw new Error(
          `webhook fuzzing failed (replay: SPARK_FUZZ_SEED=${SEED}): ${(e as Error).message}${cause ? `\nCause: ${(cause as Error).message ?? cause}` : ''}`,
        );
      }
      console.log(`webhook fuzz: ${runs} requests, statuses ${JSON.stringify(tally)}, seed ${SEED}`);
      // the run exercised both sides of the property
      expect(tally['401'] ?? 0).toBeGreaterThan(runs / 10);
      expect(tally['400'] ?? 0).toBeGreaterThan(runs / 20);
      expect(tally['202'] ?? 0).toBeGreaterThan(runs / 20);
      expect(tally['413'] ?? 0).toBeGreaterThan(0);
      expect(tally['415'] ?? 0).toBeGreaterThan(0);
    },
  );
});

// ------------------------------------------------------------------------------ body streams

/**
 * The same route through a real socket (`@hono/node-server`, as `npm start` serves it): bodies
 * that arrive chunked, without end, or not at all. The headers are judged before a byte of
 * the body is read, and the body is read as a bounded stream, so a 200 MiB chunked body costs
 * the controller at most a few MiB.
 */
describe('webhook bodies over a real socket', () => {
  let server: ServerType;
  let port = 0;
  beforeAll(async () => {
    ({ server, port } = await serveOnLoopback(c.app));
  });
  afterAll(async () => {
    await closeServer(server);
  });

  it('a 200 MiB chunked body is refused at 2 MiB; RSS stays within 64 MiB and nothing is written', async () => {
    await quiesce(c, watch);
    const version = await watch.dataVersion();
    const counts = await watch.counts();
    const before = process.memoryUsage.rss();
    const r = await stream(port, validHeaders('huge-chunked'), { total: 200 * 1024 * 1024 });
    expect(r.status, r.body).toBe(413);
    await expectRejectedWroteNothing(watch, r.status, r.body, { version, counts });
    const grewMiB = (r.peakRss - before) / 1024 / 1024;
    console.log(
      `200 MiB chunked webhook: 413 after ${Math.round(r.sent / 1024 / 1024)} MiB sent, RSS +${grewMiB.toFixed(1)} MiB`,
    );
    expect(grewMiB).toBeLessThan(64);
  });

  it('a missing or malformed signature is refused before the body is read', async () => {
    for (const sig of [null, 'sha256=abc', `sha1=${'0'.repeat(40)}`]) {
      const headers: Record<string, string> = { ...validHeaders(`no-sig-${sig}`) };
      if (sig === null) delete headers['x-hub-signature-256'];
      else headers['x-hub-signature-256'] = sig;
      // the body never ends: only an answer that did not wait for it can arrive
      const r = await stream(port, headers, { total: 1024 * 1024, stallAfter: 0 });
      expect(r.status, r.body).toBe(401);
    }
    const noEvent: Record<string, string> = { ...validHeaders('no-event') };
    delete noEvent['x-github-event'];
    expect((await stream(port, noEvent, { total: 1024 * 1024, stallAfter: 0 })).status).toBe(400);
  });

  it(`a body that stops arriving is refused after ${WEBHOOK_BODY_DEADLINE_MS / 1000} s and writes nothing`, {
    timeout: WEBHOOK_BODY_DEADLINE_MS + 30_000,
  }, async () => {
    // sent before the fuzzing to a controller of its own (see `stall`); answered by now
    const r = await stall!.answer;
    if (r instanceof Error) throw r;
    expect(r.status, r.body).toBe(408);
    await expectRejectedWroteNothing(stall!.watch, r.status, r.body, stall!.before);
  });
});
