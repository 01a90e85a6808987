import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ReservationInfo } from '../../core/protocol/api.ts';
import { tempDir } from '../helpers/ledger.ts';
import {
  agentCleaned,
  agentPrepared,
  bringOnline,
  cleanupBundle,
  sparkctlBundle,
  startApiController,
  until,
} from './cli-harness.ts';

let bin = '';
let home: { dir: string; cleanup: () => void };
let ctl: Awaited<ReturnType<typeof startApiController>> | null = null;
let client: Client | null = null;

beforeAll(async () => {
  bin = await sparkctlBundle();
  home = tempDir('sparkctl-mcp-home-');
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

async function connect(token: string): Promise<Client> {
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
  const c = new Client({ name: 'spark-test-agent', version: '1.0.0' });
  await c.connect(transport);
  return c;
}

type TextResult = { content: { type: string; text: string }[]; isError?: boolean };
const text = (r: unknown) => (r as TextResult).content.map((c) => c.text).join('\n');
/** The tools answer a summary line, a blank line, then the JSON data. */
const data = (r: unknown) => {
  const t = text(r);
  if (!t.includes('\n\n')) throw new Error(`tool answered without data: ${t}`);
  return JSON.parse(t.slice(t.indexOf('\n\n') + 2));
};

describe('sparkctl mcp (stdio) with the SDK client', () => {
  it('lists the tools with their input schemas', async () => {
    ctl = await startApiController();
    client = await connect(ctl.tokens.dev);
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(['cancel', 'queue', 'release', 'reserve', 'status']);
    const reserve = tools.find((t) => t.name === 'reserve')!;
    expect(Object.keys(reserve.inputSchema.properties ?? {}).sort()).toEqual(['host', 'pair', 'ttl']);
    const release = tools.find((t) => t.name === 'release')!;
    expect(release.inputSchema.required).toEqual(['id']);
  });

  it('reserves through the same queue, reports readiness, and releases after the agent confirms', async () => {
    ctl = await startApiController();
    const { c } = ctl;
    await bringOnline(c.ledger);
    client = await connect(ctl.tokens.dev);

    const reserved = await client.callTool({ name: 'reserve', arguments: { host: 'spark-2', ttl: '1h' } });
    const r = ReservationInfo.parse(data(reserved));
    expect(r).toMatchObject({ kind: 'development', priority: 100, mine: true, ttlS: 3600 });
    await until(
      'grant',
      async () => (await c.ledger.getReservation(undefined, r.id))?.status === 'allocated',
    );

    const before = ReservationInfo.parse(
      data(await client.callTool({ name: 'status', arguments: { id: r.id } })),
    );
    expect(before.ready).toBe(false);
    await agentPrepared(c.ledger, r.id);
    const ready = await client.callTool({ name: 'status', arguments: { id: r.id } });
    expect(text(ready)).toMatch(new RegExp(`^${r.id} is yours: spark-2`));
    expect(data(ready).ready).toBe(true);

    const queued = ReservationInfo.parse(
      data(await client.callTool({ name: 'reserve', arguments: { host: 'spark-2' } })),
    );
    const q = await client.callTool({ name: 'queue', arguments: {} });
    expect(data(q).queued.map((x: { id: string }) => x.id)).toEqual([queued.id]);
    const refused = await client.callTool({ name: 'cancel', arguments: { id: r.id } });
    expect((refused as TextResult).isError).toBe(true);
    expect(text(refused)).toMatch(/release it instead/);
    const cancelled = await client.callTool({ name: 'cancel', arguments: { id: queued.id } });
    expect(data(cancelled).status).toBe('cancelled');

    const releasing = client.callTool({ name: 'release', arguments: { id: r.id, timeoutS: 30 } });
    await until(
      'release requested',
      async () => (await c.ledger.getReservation(undefined, r.id))?.status === 'releasing',
    );
    await agentCleaned(c.ledger, r.id);
    const released = await releasing;
    expect(data(released)).toMatchObject({ id: r.id, status: 'done', outcome: 'released' });
    expect((await c.ledger.getHost(undefined, 'spark-2'))?.phase).toBe('idle');

    // a second lease, released while its agent has not confirmed yet: the tool reports the
    // recorded release instead of failing when its wait runs out
    const next = ReservationInfo.parse(
      data(await client.callTool({ name: 'reserve', arguments: { host: 'spark-2' } })),
    );
    await until(
      'second grant',
      async () => (await c.ledger.getReservation(undefined, next.id))?.status === 'allocated',
    );
    const early = await client.callTool({ name: 'release', arguments: { id: next.id, timeoutS: 1 } });
    expect((early as TextResult).isError).toBeFalsy();
    expect(text(early)).toMatch(
      /releasing · waiting for the agent to confirm cleanup on spark-2 \(release recorded/,
    );
  });

  it('rejects invalid tool input by schema and reports API refusals as tool errors', async () => {
    ctl = await startApiController();
    client = await connect('spk_api_not_a_token');
    const bad = await client.callTool({ name: 'reserve', arguments: { ttl: 'forever' } });
    expect((bad as TextResult).isError).toBe(true);
    expect(text(bad)).toMatch(/ttl/);
    const unauth = await client.callTool({ name: 'status', arguments: {} });
    expect((unauth as TextResult).isError).toBe(true);
    expect(text(unauth)).toMatch(/unauthorized: unknown or revoked API token/);
  });
});
