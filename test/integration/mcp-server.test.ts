import { spawn } from 'node:child_process';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ReservationInfo } from '../../core/protocol/api.ts';
import { tempDir } from '../../scripts/sim/ledger.ts';
import {
  agentOnline,
  agentReportsCleaned,
  agentReportsPrepared,
  cleanupBundle,
  FAST_TIMINGS,
  hostOf,
  reservationOf,
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

type TextResult = {
  content: { type: string; text: string }[];
  structuredContent?: Record<string, unknown>;
  isError?: boolean;
};
const text = (r: unknown) => (r as TextResult).content.map((c) => c.text).join('\n');
/**
 * The tools answer `structuredContent` (checked by the SDK against the tool's output schema) and,
 * for clients that read only text, a summary line, a blank line and the same JSON.
 */
const data = (r: unknown) => {
  const res = r as TextResult;
  if (!res.structuredContent) throw new Error(`tool answered without structured content: ${text(r)}`);
  const t = text(r);
  expect(JSON.parse(t.slice(t.indexOf('\n\n') + 2))).toEqual(res.structuredContent);
  // biome-ignore lint/suspicious/noExplicitAny: the tests read tool JSON the output schema already checked
  return res.structuredContent as Record<string, any>;
};
const TOOLS = [
  'cancel',
  'deckard_start',
  'fleet',
  'history',
  'queue',
  'release',
  'renew',
  'reserve',
  'status',
];

describe('sparkctl mcp (stdio) with the SDK client', () => {
  it('lists the tools with their input and output schemas and explains the etiquette', async () => {
    ctl = await startApiController();
    client = await connect(ctl.tokens.dev);
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(TOOLS);
    for (const t of tools) {
      expect(t.outputSchema?.type, t.name).toBe('object');
      expect(Object.keys(t.outputSchema?.properties ?? {}).length, t.name).toBeGreaterThan(0);
    }
    const reserve = tools.find((t) => t.name === 'reserve')!;
    expect(Object.keys(reserve.inputSchema.properties ?? {}).sort()).toEqual(['host', 'pair', 'ttl']);
    expect(Object.keys(reserve.outputSchema?.properties ?? {})).toEqual(['reservation']);
    const release = tools.find((t) => t.name === 'release')!;
    expect(release.inputSchema.required).toEqual(['id']);
    expect(tools.find((t) => t.name === 'renew')!.inputSchema.required).toEqual(['id']);
    const instructions = client.getInstructions() ?? '';
    expect(instructions).toMatch(/non-preemptive/);
    expect(instructions).toMatch(/fencing token/);
    expect(instructions).toMatch(/call `release` as soon as you are done/);
  });

  it('reserves through the same queue, reports readiness, and releases after the agent confirms', async () => {
    ctl = await startApiController();
    await agentOnline(ctl.target);
    client = await connect(ctl.tokens.dev);

    const reserved = await client.callTool({ name: 'reserve', arguments: { host: 'spark-2', ttl: '1h' } });
    const r = ReservationInfo.parse(data(reserved).reservation);
    expect(r).toMatchObject({ kind: 'development', priority: 100, mine: true, ttlS: 3600 });
    await until('grant', async () => (await reservationOf(ctl!.target, r.id))?.status === 'allocated');

    const before = ReservationInfo.parse(
      data(await client.callTool({ name: 'status', arguments: { id: r.id } })).reservation,
    );
    expect(before.ready).toBe(false);
    await agentReportsPrepared(ctl.target, r.id);
    const ready = await client.callTool({ name: 'status', arguments: { id: r.id } });
    expect(text(ready)).toMatch(new RegExp(`^${r.id} is yours: spark-2`));
    expect(data(ready).reservation.ready).toBe(true);

    const queued = ReservationInfo.parse(
      data(await client.callTool({ name: 'reserve', arguments: { host: 'spark-2' } })).reservation,
    );
    const q = await client.callTool({ name: 'queue', arguments: {} });
    expect(data(q).queued.map((x: { id: string }) => x.id)).toEqual([queued.id]);
    const refused = await client.callTool({ name: 'cancel', arguments: { id: r.id } });
    expect((refused as TextResult).isError).toBe(true);
    expect(text(refused)).toMatch(/release it instead/);
    const cancelled = await client.callTool({ name: 'cancel', arguments: { id: queued.id } });
    expect(data(cancelled).reservation.status).toBe('cancelled');

    const releasing = client.callTool({ name: 'release', arguments: { id: r.id, timeoutS: 30 } });
    await until(
      'release requested',
      async () => (await reservationOf(ctl!.target, r.id))?.status === 'releasing',
    );
    await agentReportsCleaned(ctl.target, r.id);
    const released = await releasing;
    expect(data(released)).toMatchObject({
      reservation: { id: r.id, status: 'done', outcome: 'released' },
      confirmed: true,
    });
    expect((await hostOf(ctl.target, 'spark-2')).state).toBe('idle');

    // a second lease, released while its agent has not confirmed yet: the tool reports the
    // recorded release instead of failing when its wait runs out
    const next = ReservationInfo.parse(
      data(await client.callTool({ name: 'reserve', arguments: { host: 'spark-2' } })).reservation,
    );
    await until(
      'second grant',
      async () => (await reservationOf(ctl!.target, next.id))?.status === 'allocated',
    );
    const early = await client.callTool({ name: 'release', arguments: { id: next.id, timeoutS: 1 } });
    expect((early as TextResult).isError).toBeFalsy();
    expect(text(early)).toMatch(
      /releasing · waiting for the agent to confirm cleanup on spark-2 \(release recorded/,
    );
    expect(data(early)).toMatchObject({ reservation: { status: 'releasing' }, confirmed: false });
  });

  it('fleet, renew and history answer with structured content; an unknown host names the valid ones', async () => {
    ctl = await startApiController({ config: { timings: { ...FAST_TIMINGS, devLeaseMaxTtlS: 2 * 3600 } } });
    await agentOnline(ctl.target);
    client = await connect(ctl.tokens.dev);

    const fleet = await client.callTool({ name: 'fleet', arguments: {} });
    expect(data(fleet).hosts.map((h: { id: string }) => h.id)).toEqual(['spark-1', 'spark-2']);
    expect(text(fleet)).toMatch(
      /^2 hosts\nspark-1 service · deckard: serving · heartbeat \d+s ago\nspark-2 idle/,
    );

    const unknown = await client.callTool({ name: 'reserve', arguments: { host: 'spark-9' } });
    expect((unknown as TextResult).isError).toBe(true);
    expect(text(unknown)).toBe('error: unknown host "spark-9": this fleet has spark-1, spark-2');
    expect(await reservationOf(ctl.target, 'r-1')).toBeNull();

    const r = ReservationInfo.parse(
      data(await client.callTool({ name: 'reserve', arguments: { host: 'spark-2', ttl: '1h' } })).reservation,
    );
    await until('grant', async () => (await reservationOf(ctl!.target, r.id))?.status === 'allocated');
    await agentReportsPrepared(ctl.target, r.id);
    const renewed = await client.callTool({ name: 'renew', arguments: { id: r.id, ttl: '99h' } });
    const out = data(renewed);
    expect(out).toMatchObject({ capped: true, reservation: { id: r.id } });
    expect(Date.parse(out.until) - Date.parse(out.reservation.leases[0].grantedAt)).toBe(2 * 3600_000);
    expect(text(renewed)).toMatch(
      new RegExp(
        `^renewed ${r.id}: spark-2 until \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d UTC\\ncapped: you asked for 99h, but a development lease holds at most 2h`,
      ),
    );
    const again = await client.callTool({ name: 'renew', arguments: { id: r.id } });
    expect((again as TextResult).isError).toBe(true);
    expect(text(again)).toMatch(/the most a development lease may hold/);

    const mine = await client.callTool({ name: 'status', arguments: {} });
    expect(data(mine).reservations.map((x: { id: string }) => x.id)).toEqual([r.id]);
    expect(text(mine)).toMatch(new RegExp(`^${r.id} preparing on spark-2\\n`));

    const history = data(await client.callTool({ name: 'history', arguments: { id: r.id } }));
    expect(history.reservationId).toBe(r.id);
    expect(history.events.map((e: { type: string }) => e.type)).toEqual(
      expect.arrayContaining(['reservation.queued', 'reservation.allocated', 'lease.renewed']),
    );
    // one history row per grant (ADR 0100), naming the host it granted
    expect(history.events.find((e: { type: string }) => e.type === 'reservation.allocated')?.cause).toMatch(
      /^granted spark-2 \(/,
    );
    const missing = await client.callTool({ name: 'history', arguments: { id: 'r-404' } });
    expect((missing as TextResult).isError).toBe(true);
    expect(text(missing)).toBe('error: reservation r-404 not found');
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

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/**
 * The official MCP Inspector CLI (`@modelcontextprotocol/inspector-cli`, `--cli` mode) talking to
 * `node <bundle> mcp` over stdio. It is started from `cli/` because inspector-cli 1.0.3 checks for
 * its own package.json relative to the working directory (modelcontextprotocol/inspector#1334):
 * any directory whose parent holds a package.json works.
 */
function inspector(args: string[], env: Record<string, string>) {
  const envArgs = Object.entries(env).flatMap(([k, v]) => ['-e', `${k}=${v}`]);
  const child = spawn(
    join(REPO, 'node_modules', '.bin', 'mcp-inspector-cli'),
    ['--cli', ...envArgs, process.execPath, bin, 'mcp', ...args],
    { cwd: join(REPO, 'cli'), env: { PATH: process.env.PATH ?? '', HOME: home.dir }, stdio: 'pipe' },
  );
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (b: Buffer) => {
    stdout += b.toString();
  });
  child.stderr.on('data', (b: Buffer) => {
    stderr += b.toString();
  });
  return new Promise<{ code: number | null; json: Record<string, unknown>; stderr: string }>((done, fail) => {
    child.once('error', fail);
    child.once('close', (code) => {
      try {
        done({ code, json: JSON.parse(stdout), stderr });
      } catch {
        fail(new Error(`inspector exited ${code} without JSON:\n${stdout}\n${stderr}`));
      }
    });
  });
}

describe('sparkctl mcp with the official MCP Inspector CLI', () => {
  it('lists reserve, status, queue, release, cancel, fleet, renew, history and deckard_start, each with an output schema', async () => {
    ctl = await startApiController();
    const { code, json } = await inspector(['--method', 'tools/list'], {
      SPARK_URL: ctl.c.url,
      SPARK_TOKEN: ctl.tokens.dev,
    });
    expect(code).toBe(0);
    const tools = json.tools as { name: string; outputSchema?: { type: string; properties: object } }[];
    expect(tools.map((t) => t.name).sort()).toEqual(TOOLS);
    for (const t of tools) {
      expect(t.outputSchema?.type, t.name).toBe('object');
      expect(Object.keys(t.outputSchema?.properties ?? {}).length, t.name).toBeGreaterThan(0);
    }
  });

  it('calls a tool and gets structured content beside the text', async () => {
    ctl = await startApiController();
    await agentOnline(ctl.target);
    const env = { SPARK_URL: ctl.c.url, SPARK_TOKEN: ctl.tokens.dev };
    const reserved = await inspector(
      ['--method', 'tools/call', '--tool-name', 'reserve', '--tool-arg', 'host=spark-2', 'ttl=1h'],
      env,
    );
    expect(reserved.code).toBe(0);
    const r = ReservationInfo.parse(
      (reserved.json.structuredContent as { reservation: unknown }).reservation,
    );
    expect(r).toMatchObject({ kind: 'development', targetHost: 'spark-2', ttlS: 3600, mine: true });
    expect((await reservationOf(ctl.target, r.id))?.kind).toBe('development');
    const text = (reserved.json.content as { text: string }[])[0]!.text;
    expect(JSON.parse(text.slice(text.indexOf('\n\n') + 2))).toEqual(reserved.json.structuredContent);

    const fleet = await inspector(['--method', 'tools/call', '--tool-name', 'fleet'], env);
    expect(fleet.code).toBe(0);
    const hosts = (fleet.json.structuredContent as { hosts: { id: string; state: string }[] }).hosts;
    expect(hosts.map((h) => h.id)).toEqual(['spark-1', 'spark-2']);
  });

  it('starts Deckard with an operator token, and refuses a token without the operate scope as the CLI does', async () => {
    ctl = await startApiController();
    const call = (token: string) =>
      inspector(['--method', 'tools/call', '--tool-name', 'deckard_start'], {
        SPARK_URL: ctl!.c.url,
        SPARK_TOKEN: token,
      });

    // a develop token: the operator route refuses it (403), the tool says so and nothing is queued
    const refused = await call(ctl.tokens.dev);
    expect(refused.code).toBe(0);
    expect(refused.json.isError).toBe(true);
    expect((refused.json.content as { text: string }[])[0]!.text).toBe(
      'error: forbidden: this token lacks the "operate" scope (has: develop)',
    );
    expect(await reservationOf(ctl.target, 'r-1')).toBeNull();

    const started = await call(ctl.tokens.ops);
    expect(started.code).toBe(0);
    expect(started.json.isError).toBeFalsy();
    const r = ReservationInfo.parse((started.json.structuredContent as { reservation: unknown }).reservation);
    expect(r).toMatchObject({ id: 'r-1', kind: 'deckard', priority: 90, targetHost: 'spark-1' });
    expect((started.json.content as { text: string }[])[0]!.text).toMatch(
      /^Deckard start requested as r-1 \(priority 90\): /,
    );
    expect(await reservationOf(ctl.target, 'r-1')).toMatchObject({ kind: 'deckard', targetHost: 'spark-1' });

    // the same refusal through the CLI's own command, for the same token
    const cli = await new Promise<{ code: number | null; stderr: string }>((done, fail) => {
      const child = spawn(process.execPath, [bin, 'deckard', 'start'], {
        env: {
          PATH: process.env.PATH ?? '',
          HOME: home.dir,
          SPARK_URL: ctl!.c.url,
          SPARK_TOKEN: ctl!.tokens.dev,
        },
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      let stderr = '';
      child.stderr.on('data', (b: Buffer) => {
        stderr += b.toString();
      });
      child.once('error', fail);
      child.once('close', (code) => done({ code, stderr }));
    });
    expect(cli.code).toBe(5); // EXIT.forbidden
    expect(cli.stderr).toContain('forbidden: this token lacks the "operate" scope (has: develop)');
    expect(await reservationOf(ctl.target, 'r-2')).toBeNull();
  });
});
