import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { ExecutorName } from '../../core/model.ts';
import { idleFacts, servingFacts, tempDir } from '../../scripts/sim/ledger.ts';
import {
  type ApiTarget,
  cleanupBundle,
  heartbeat,
  http,
  reservationOf,
  runSparkctl,
  sparkctlBundle,
  startApiController,
  until,
} from './cli-harness.ts';

/**
 * Development leases lead somewhere (ADR 0176): a development lease is used through the dstack dev
 * environment made for it, so a request no host can serve — the named host, or for any host its
 * pool, runs another executor (or never said) — is refused at once by the operator API, before
 * anything is queued, and sparkctl and the MCP `reserve` tool say so in the API's exact words. In a
 * mixed pool a request for any host goes to a host that runs dstack.
 */

const EXPLAIN = 'a development lease is used through the dstack dev environment made for it';
const NONE = `development needs the dstack executor: ${EXPLAIN}, and no host of pool spark runs dstack (spark-1 runs jit-runner, spark-2 runs jit-runner); see docs/executors.md`;
const NAMED = `development needs the dstack executor: ${EXPLAIN}, and spark-2 runs jit-runner (hosts of pool spark running dstack: spark-1); see docs/executors.md`;
const PAIR =
  'development needs the dstack executor: a pair needs 2 hosts of pool spark that run dstack, and 1 does (spark-1; spark-2 runs jit-runner); see docs/executors.md';

let bin = '';
let home: { dir: string; cleanup: () => void };
let ctl: Awaited<ReturnType<typeof startApiController>> | null = null;
let client: Client | null = null;

beforeAll(async () => {
  bin = await sparkctlBundle();
  home = tempDir('sparkctl-dev-dstack-home-');
});
afterAll(() => {
  cleanupBundle();
  home.cleanup();
});
afterEach(async () => {
  await client?.close();
  client = null;
  await ctl?.c.close();
  ctl = null;
});

/** A controller whose hosts' agents heartbeat with these executors (through the agent API). */
async function fleet(executors: Record<string, ExecutorName>) {
  ctl = await startApiController();
  const t: ApiTarget = ctl.target;
  for (const [id, executor] of Object.entries(executors)) {
    await http(t.url, t.ops, 'POST', `/api/v1/hosts/${id}/adopt`, {});
    await heartbeat(t, id, id === 'spark-1' ? servingFacts({ executor }) : idleFacts({ executor }));
  }
  return ctl;
}

async function written(c: NonNullable<typeof ctl>) {
  const q = async (sql: string) => Number((await c.c.ledger.store.client.execute(sql)).rows[0]![0]);
  return {
    reservations: await q('SELECT count(*) FROM reservations'),
    queued: await q("SELECT count(*) FROM events WHERE type LIKE 'reservation.%'"),
  };
}

const sparkctl = (token: string, args: string[]) =>
  runSparkctl(bin, args, { SPARK_URL: ctl!.c.url, SPARK_TOKEN: token }, home.dir);

async function mcpReserve(token: string, args: Record<string, unknown>) {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [bin, 'mcp'],
    env: {
      PATH: process.env.PATH ?? '',
      HOME: home.dir,
      SPARK_URL: ctl!.c.url,
      SPARK_TOKEN: token,
      SPARKCTL_POLL_MS: '100',
    },
    stderr: 'pipe',
  });
  client = new Client({ name: 'spark-test-agent', version: '1.0.0' });
  await client.connect(transport);
  const r = (await client.callTool({ name: 'reserve', arguments: args })) as {
    content: { text: string }[];
    isError?: boolean;
  };
  await client.close();
  client = null;
  return { isError: r.isError === true, text: r.content.map((x) => x.text).join('\n') };
}

describe('development needs the dstack executor', () => {
  it('a restore drill is the exception: on JIT runners it is granted on its named host and lends the service; without --host it is refused', async () => {
    const c = await fleet({ 'spark-1': 'jit-runner', 'spark-2': 'jit-runner' });
    const before = await written(c);
    // a drill names the host whose service it lends: nothing is queued without one
    const unnamed = await c.call(c.tokens.dev, 'POST', '/api/v1/reservations', { drill: true, ttlS: 600 });
    expect(unnamed.status).toBe(400);
    expect(unnamed.body.error.message).toBe('a restore drill names the host whose service it lends (--host)');
    expect(await written(c)).toEqual(before);
    // the same request as plain development work is refused (nobody could attach to it) …
    const plain = await c.call(c.tokens.dev, 'POST', '/api/v1/reservations', { host: 'spark-1', ttlS: 600 });
    expect(plain.status).toBe(409);
    expect(plain.body.error.code).toBe('development_needs_dstack');
    // … as a drill it is accepted and the engine grants spark-1, lending its service
    const drill = await c.call(c.tokens.dev, 'POST', '/api/v1/reservations', {
      host: 'spark-1',
      ttlS: 600,
      drill: true,
    });
    expect(drill.status).toBe(201);
    const id = drill.body.reservation.id as string;
    const granted = await until('the drill granted', async () => {
      const r = await reservationOf(c.target, id);
      return r?.status === 'allocated' ? r : null;
    });
    expect(granted!.leases.map((l) => l.hostId)).toEqual(['spark-1']);
    const lease = await c.c.ledger.store.client.execute({
      sql: 'SELECT lend FROM leases WHERE reservation_id = ?',
      args: [id],
    });
    expect(Number(lease.rows[0]![0])).toBe(1);
  });

  it('a fleet of JIT runners refuses every development request at once: API, sparkctl and MCP, nothing queued', async () => {
    const c = await fleet({ 'spark-1': 'jit-runner', 'spark-2': 'jit-runner' });
    const before = await written(c);

    const api = await c.call(c.tokens.dev, 'POST', '/api/v1/reservations', { ttlS: 3600 });
    expect(api.status).toBe(409);
    expect(api.body.error).toEqual({ code: 'development_needs_dstack', message: NONE });

    const cli = await sparkctl(c.tokens.dev, ['reserve', '--wait']);
    expect(cli.code).toBe(7);
    expect(cli.stderr.trim()).toBe(`sparkctl: ${NONE}`);
    expect(cli.stdout).toBe('');

    const mcp = await mcpReserve(c.tokens.dev, {});
    expect(mcp).toEqual({ isError: true, text: `error: ${NONE}` });

    // a pair, and a named host, the same
    const pair = await sparkctl(c.tokens.dev, ['reserve', '--pair']);
    expect(pair.code).toBe(7);
    expect(pair.stderr.trim()).toBe(`sparkctl: ${NONE}`);
    expect(await written(c)).toEqual(before);
  });

  it('hosts never heard from cannot be shown to serve development: refused, naming them', async () => {
    ctl = await startApiController();
    const r = await ctl.call(ctl.tokens.dev, 'POST', '/api/v1/reservations', { host: 'spark-2' });
    expect(r.status).toBe(409);
    expect(r.body.error.message).toBe(
      `development needs the dstack executor: ${EXPLAIN}, and spark-2 has not heartbeated yet (hosts of pool spark running dstack: none); see docs/executors.md`,
    );
  });

  it('in a mixed pool: any host goes to the dstack host (not the preferred JIT-runner one); a named JIT-runner host and a pair are refused', async () => {
    const c = await fleet({ 'spark-1': 'dstack', 'spark-2': 'jit-runner' });

    const named = await sparkctl(c.tokens.dev, ['reserve', '--host', 'spark-2']);
    expect(named.code).toBe(7);
    expect(named.stderr.trim()).toBe(`sparkctl: ${NAMED}`);
    const mcpNamed = await mcpReserve(c.tokens.dev, { host: 'spark-2' });
    expect(mcpNamed).toEqual({ isError: true, text: `error: ${NAMED}` });
    const pair = await mcpReserve(c.tokens.dev, { pair: true });
    expect(pair).toEqual({ isError: true, text: `error: ${PAIR}` });
    expect((await written(c)).reservations).toBe(0);

    // preferHosts says spark-2, but only spark-1 can give the lease its dev environment
    const any = await sparkctl(c.tokens.dev, ['reserve', '--json']);
    expect(any.code, any.stderr).toBe(0);
    const id = JSON.parse(any.stdout).reservation.id as string;
    const granted = await until('granted', async () => {
      const r = await reservationOf(c.target, id);
      return r?.leases.length ? r : undefined;
    });
    expect(granted.leases.map((l) => l.hostId)).toEqual(['spark-1']);
  });
});
