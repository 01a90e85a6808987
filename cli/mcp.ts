import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { z } from 'zod';
import { QueueResponse } from '../core/protocol/api.ts';
import type { ApiClient } from './client.ts';
import { CliError, EXIT } from './errors.ts';
import { parseDuration } from './format.ts';
import {
  attachText,
  createReservation,
  getReservation,
  listReservations,
  postAction,
  progressLine,
  releaseAndWait,
} from './ops.ts';

type ToolResult = { content: { type: 'text'; text: string }[]; isError?: boolean };

async function answer(fn: () => Promise<{ summary: string; data: unknown }>): Promise<ToolResult> {
  try {
    const { summary, data } = await fn();
    return { content: [{ type: 'text', text: `${summary}\n\n${JSON.stringify(data, null, 2)}` }] };
  } catch (e) {
    // an API refusal is an answer the agent should read, not a protocol failure
    if (e instanceof CliError)
      return { content: [{ type: 'text', text: `error: ${e.message}` }], isError: true };
    throw e;
  }
}

/**
 * The MCP server behind `sparkctl mcp`: an AI coding agent asks for Spark hosts through the same
 * queue as CI and people, instead of reaching for the machines directly.
 */
export function createMcpServer(client: ApiClient, opts: { pollMs: number; version: string }): McpServer {
  const server = new McpServer({ name: 'sparkctl', version: opts.version });

  server.registerTool(
    'reserve',
    {
      title: 'Reserve Spark hosts',
      description:
        'Queue a development reservation (priority 100) for one Spark host, or two with pair=true. Returns at once with the queue position; poll `status` until ready=true, then use the host, and call `release` when done.',
      inputSchema: {
        pair: z.boolean().optional().describe('Reserve two hosts atomically (distributed work).'),
        host: z
          .string()
          .regex(/^[a-z0-9][a-z0-9-]{0,62}$/)
          .optional()
          .describe('Ask for one named host, e.g. "spark-2" (single topology only).'),
        ttl: z
          .string()
          .regex(/^(\d+|(\d+[dhms])+)$/, 'a duration such as 30m, 4h or 1h30m')
          .optional()
          .describe('Lease length, e.g. "2h" (default 4h, renewable).'),
      },
    },
    async ({ pair, host, ttl }) =>
      answer(async () => {
        const r = await createReservation(client, {
          pair,
          host,
          ttlS: ttl ? (parseDuration(ttl) ?? undefined) : undefined,
        });
        return { summary: r.ready ? attachText(r) : progressLine(r), data: r };
      }),
  );

  server.registerTool(
    'status',
    {
      title: 'Reservation status',
      description: 'Status of one reservation (with id) or of all your open reservations (without).',
      inputSchema: { id: z.string().min(1).optional().describe('Reservation id, e.g. "r-12".') },
      annotations: { readOnlyHint: true },
    },
    async ({ id }) =>
      answer(async () => {
        if (id) {
          const r = await getReservation(client, id);
          return { summary: r.ready && r.kind === 'development' ? attachText(r) : progressLine(r), data: r };
        }
        const list = await listReservations(client, { mine: true });
        return {
          summary: list.length ? list.map(progressLine).join('\n') : 'you have no open reservations',
          data: list,
        };
      }),
  );

  server.registerTool(
    'queue',
    {
      title: 'Spark queue',
      description: 'The shared queue: waiting requests with position and why each waits, and active work.',
      inputSchema: {},
      annotations: { readOnlyHint: true },
    },
    async () =>
      answer(async () => {
        const q = await client.call('GET', '/api/v1/queue', QueueResponse);
        const lines = q.queued.map(
          (x) => `#${x.position ?? '?'} ${x.id} ${x.kind} ${x.topology}: ${x.reason ?? ''}`,
        );
        return {
          summary: `${q.queued.length} waiting, ${q.active.length} active${lines.length ? `\n${lines.join('\n')}` : ''}`,
          data: q,
        };
      }),
  );

  server.registerTool(
    'release',
    {
      title: 'Release a reservation',
      description:
        'Release an active reservation. By default waits until the host agent confirms the work stopped and the host is clean.',
      inputSchema: {
        id: z.string().min(1).describe('Reservation id, e.g. "r-12".'),
        wait: z.boolean().optional().describe('Wait for the cleanup confirmation (default true).'),
        timeoutS: z
          .number()
          .int()
          .positive()
          .max(3600)
          .optional()
          .describe(
            'Stop waiting after this long and report the state so far (default 45, inside common client request timeouts).',
          ),
      },
      annotations: { destructiveHint: true },
    },
    async ({ id, wait, timeoutS }) =>
      answer(async () => {
        try {
          const r = await releaseAndWait(client, id, {
            wait: wait ?? true,
            pollMs: opts.pollMs,
            onProgress: () => {},
            timeoutMs: (timeoutS ?? 45) * 1000,
          });
          return { summary: progressLine(r), data: r };
        } catch (e) {
          // the release is recorded; only the wait ran out: say where it stands, not "failed"
          if (!(e instanceof CliError) || e.exitCode !== EXIT.timeout) throw e;
          const r = await getReservation(client, id);
          return {
            summary: `${progressLine(r)} (release recorded; call status later to see the cleanup confirmed)`,
            data: r,
          };
        }
      }),
  );

  server.registerTool(
    'cancel',
    {
      title: 'Cancel a queued reservation',
      description: 'Withdraw a reservation that is still queued. Granted work must be released instead.',
      inputSchema: { id: z.string().min(1).describe('Reservation id, e.g. "r-12".') },
      annotations: { destructiveHint: true },
    },
    async ({ id }) =>
      answer(async () => {
        const r = await postAction(client, id, 'cancel');
        return { summary: progressLine(r), data: r };
      }),
  );

  return server;
}

/** Serves MCP on stdin/stdout until the client disconnects. */
export async function serveMcp(client: ApiClient, opts: { pollMs: number; version: string }): Promise<void> {
  const server = createMcpServer(client, opts);
  const transport = new StdioServerTransport();
  const closed = new Promise<void>((resolve) => {
    transport.onclose = () => resolve();
    process.stdin.once('end', () => resolve());
  });
  await server.connect(transport);
  await closed;
  await server.close();
}
