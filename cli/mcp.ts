import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { z } from 'zod';
import {
  FleetResponse,
  HistoryResponse,
  QueueResponse,
  ReservationInfo,
  ReservationResponse,
} from '../core/protocol/api.ts';
import type { ApiClient } from './client.ts';
import { CliError, EXIT } from './errors.ts';
import { dateTime, humanDuration, parseDuration } from './format.ts';
import {
  attachText,
  createReservation,
  getReservation,
  listReservations,
  postAction,
  progressLine,
  releaseAndWait,
  renewReservation,
} from './ops.ts';

/**
 * What an agent should know before its first call (MCP `initialize` → `instructions`): how the
 * queue decides, what the lease and its fencing token mean, and how to leave the hosts.
 */
export const INSTRUCTIONS = `Spark hosts are a small shared fleet of NVIDIA DGX Spark GPU machines. People, CI and AI agents all get them through one queue; these tools are your way in. Never use a host you were not granted.

Queue: \`reserve\` queues a development request (priority 100). Order is priority, then first come first served, and it is non-preemptive: running work (CI, someone else's lease) always finishes first, so you may wait. The answer has your position and why you wait; \`queue\` shows everyone's. A pair reservation (pair=true) gets both hosts at once or neither. Reserving spark-1 stops its inference service (Deckard) for everyone while you hold it: ask for a specific host only when you need it. Poll \`status\` with the id every 10-30 s until ready=true; do not reserve again while a request is still queued.

Leases and fencing: a grant is a lease with an end time (leases[].expiresAt). Every grant carries a fencing token that the host agents check on every step; when the lease is released or expires, the token is stale and the host refuses or stops what it carries. Work only while \`status\` says ready=true and the lease has not expired; \`renew\` before the end if you still need the host (renewals are capped at the configured maximum from the grant; the answer says when it was capped).

Release etiquette: call \`release\` as soon as you are done; it waits until the host agent confirmed that your work stopped and the host is clean (if that takes longer than timeoutS the release is still recorded; check \`status\` later). \`cancel\` a request that is still queued and no longer needed; granted work is released, not cancelled. Never stop processes you did not start. \`fleet\` shows every host's state, \`history\` a reservation's audit trail. \`deckard_start\` (operator tokens only) asks for Deckard to be started again on its home host, queued like any other work.`;

/** A tool answer: a short summary for people and models, and the same facts as structured data. */
type ToolResult = {
  content: { type: 'text'; text: string }[];
  structuredContent?: Record<string, unknown>;
  isError?: boolean;
};

async function answer(
  fn: () => Promise<{ summary: string; data: Record<string, unknown> }>,
): Promise<ToolResult> {
  try {
    const { summary, data } = await fn();
    // the text carries the JSON too, for clients that read only text (MCP spec, tools: structured content)
    return {
      content: [{ type: 'text', text: `${summary}\n\n${JSON.stringify(data, null, 2)}` }],
      structuredContent: data,
    };
  } catch (e) {
    // an API refusal is an answer the agent should read, not a protocol failure
    if (e instanceof CliError)
      return { content: [{ type: 'text', text: `error: ${e.message}` }], isError: true };
    throw e;
  }
}

const reservationId = z.string().min(1).describe('Reservation id, e.g. "r-12".');
const duration = z.string().regex(/^(\d+|(\d+[dhms])+)$/, 'a duration such as 30m, 4h or 1h30m');

/** Output schemas: what `structuredContent` holds for each tool. */
const One = { reservation: ReservationInfo };
const StatusOut = {
  reservation: ReservationInfo.optional().describe('With id: that reservation.'),
  reservations: z.array(ReservationInfo).optional().describe('Without id: your open reservations.'),
};
const RenewOut = {
  reservation: ReservationInfo,
  until: z.string().nullable().describe('The new end of the lease (ISO 8601).'),
  capped: z.boolean().describe('True when the controller granted less than asked (the development maximum).'),
  note: z.string().nullable(),
};
const ReleaseOut = {
  reservation: ReservationInfo,
  confirmed: z
    .boolean()
    .describe(
      'True when the agent confirmed termination and cleanup within the wait; false: recorded, still releasing.',
    ),
};

/**
 * The MCP server behind `sparkctl mcp`: an AI coding agent asks for Spark hosts through the same
 * queue as CI and people, instead of reaching for the machines directly.
 */
export function createMcpServer(client: ApiClient, opts: { pollMs: number; version: string }): McpServer {
  const server = new McpServer({ name: 'sparkctl', version: opts.version }, { instructions: INSTRUCTIONS });

  server.registerTool(
    'reserve',
    {
      title: 'Reserve Spark hosts',
      description:
        'Queue a development reservation (priority 100) for one Spark host, or two with pair=true. Returns at once with the queue position; poll `status` until ready=true, then attach with the `dstack attach` command it names, and call `release` when done. Hosts that do not run the dstack executor give a development lease nothing to attach to: such a request is refused at once with the reason, and nothing is queued.',
      inputSchema: {
        pair: z.boolean().optional().describe('Reserve two hosts atomically (distributed work).'),
        host: z
          .string()
          .regex(/^[a-z0-9][a-z0-9-]{0,62}$/)
          .optional()
          .describe('Ask for one named host, e.g. "spark-2" (single topology only); `fleet` lists them.'),
        ttl: duration.optional().describe('Lease length, e.g. "2h" (default 4h, renewable).'),
      },
      outputSchema: One,
    },
    async ({ pair, host, ttl }) =>
      answer(async () => {
        const r = await createReservation(client, {
          pair,
          host,
          ttlS: ttl ? (parseDuration(ttl) ?? undefined) : undefined,
        });
        return { summary: r.ready ? attachText(r) : progressLine(r), data: { reservation: r } };
      }),
  );

  server.registerTool(
    'status',
    {
      title: 'Reservation status',
      description:
        "Status of one reservation (with id) or of all your open reservations (without); a ready development lease names each host's `dstack attach` command.",
      inputSchema: { id: reservationId.optional() },
      outputSchema: StatusOut,
      annotations: { readOnlyHint: true },
    },
    async ({ id }) =>
      answer(async () => {
        if (id) {
          const r = await getReservation(client, id);
          return {
            summary: r.ready && r.kind === 'development' ? attachText(r) : progressLine(r),
            data: { reservation: r },
          };
        }
        const list = await listReservations(client, { mine: true });
        return {
          summary: list.length ? list.map(progressLine).join('\n') : 'you have no open reservations',
          data: { reservations: list },
        };
      }),
  );

  server.registerTool(
    'queue',
    {
      title: 'Spark queue',
      description: 'The shared queue: waiting requests with position and why each waits, and active work.',
      inputSchema: {},
      outputSchema: QueueResponse.shape,
      annotations: { readOnlyHint: true },
    },
    async () =>
      answer(async () => {
        const q = await client.call('GET', '/api/v1/queue', QueueResponse);
        const lines = q.queued.map(
          (x) =>
            `#${x.position ?? '?'} ${x.id} ${x.kind} ${x.topology}${x.eta ? ` (${x.eta.text})` : ''}: ${x.reason ?? ''}`,
        );
        return {
          summary: `${q.queued.length} waiting, ${q.active.length} active${lines.length ? `\n${lines.join('\n')}` : ''}`,
          data: q,
        };
      }),
  );

  server.registerTool(
    'fleet',
    {
      title: 'Spark fleet',
      description:
        'Every host: its state (idle, service, allocated, draining, held, offline, quarantined, …), its home service health and the work it carries. The host ids are what `reserve` takes as host.',
      inputSchema: {},
      outputSchema: FleetResponse.shape,
      annotations: { readOnlyHint: true },
    },
    async () =>
      answer(async () => {
        const f = await client.call('GET', '/api/v1/fleet', FleetResponse);
        const lines = f.hosts.map((h) =>
          [
            `${h.id} ${h.state}${h.keptFor ? ` for ${h.keptFor}` : ''}`,
            h.homeService ? `${h.homeService}: ${h.serviceHealth}` : null,
            h.reservation ? `${h.reservation.id} ${h.reservation.kind}/${h.reservation.topology}` : null,
            h.lastHeartbeatAgeS == null
              ? 'never heartbeated'
              : `heartbeat ${humanDuration(h.lastHeartbeatAgeS)} ago`,
          ]
            .filter(Boolean)
            .join(' · '),
        );
        return {
          summary: `${f.hosts.length} hosts${f.managed ? '' : ' (fleet not fully managed)'}\n${lines.join('\n')}`,
          data: f,
        };
      }),
  );

  server.registerTool(
    'renew',
    {
      title: 'Renew a development lease',
      description:
        "Extend your active development lease before it ends (from now, by ttl or the reservation's own length). Capped at the configured maximum from the grant; the answer says when it was capped. An expired lease is never renewed.",
      inputSchema: {
        id: reservationId,
        ttl: duration.optional().describe('New lease length from now, e.g. "2h".'),
      },
      outputSchema: RenewOut,
    },
    async ({ id, ttl }) =>
      answer(async () => {
        const r = await renewReservation(
          client,
          id,
          ttl ? (parseDuration(ttl) ?? undefined) : undefined,
          ttl,
        );
        const hosts = r.reservation.leases.filter((l) => l.status === 'active').map((l) => l.hostId);
        return {
          summary: `renewed ${id}: ${hosts.join(' + ')} until ${r.until ? dateTime(r.until) : '-'}${r.note ? `\n${r.note}` : ''}`,
          data: { ...r },
        };
      }),
  );

  server.registerTool(
    'history',
    {
      title: 'Reservation history',
      description: "A reservation's audit trail: every transition with its time, cause and actor.",
      inputSchema: { id: reservationId },
      outputSchema: HistoryResponse.shape,
      annotations: { readOnlyHint: true },
    },
    async ({ id }) =>
      answer(async () => {
        const h = await client.call(
          'GET',
          `/api/v1/reservations/${encodeURIComponent(id)}/history`,
          HistoryResponse,
        );
        const lines = h.events
          .slice(-20)
          .map(
            (e) => `${e.at.replace('T', ' ').slice(0, 19)} ${e.subjectId} ${e.type}: ${e.cause} (${e.actor})`,
          );
        return {
          summary: `${h.events.length} events${h.events.length > 20 ? ' (last 20)' : ''}\n${lines.join('\n')}`,
          data: h,
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
        id: reservationId,
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
      outputSchema: ReleaseOut,
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
          return {
            summary: progressLine(r),
            data: {
              reservation: r,
              confirmed: ['done', 'failed', 'cancelled', 'superseded'].includes(r.status),
            },
          };
        } catch (e) {
          // the release is recorded; only the wait ran out: say where it stands, not "failed"
          if (!(e instanceof CliError) || e.exitCode !== EXIT.timeout) throw e;
          const r = await getReservation(client, id);
          return {
            summary: `${progressLine(r)} (release recorded; call status later to see the cleanup confirmed)`,
            data: { reservation: r, confirmed: false },
          };
        }
      }),
  );

  server.registerTool(
    'cancel',
    {
      title: 'Cancel a queued reservation',
      description: 'Withdraw a reservation that is still queued. Granted work must be released instead.',
      inputSchema: { id: reservationId },
      outputSchema: One,
      annotations: { destructiveHint: true },
    },
    async ({ id }) =>
      answer(async () => {
        const r = await postAction(client, id, 'cancel');
        return { summary: progressLine(r), data: { reservation: r } };
      }),
  );

  server.registerTool(
    'deckard_start',
    {
      title: 'Start Deckard',
      description:
        'Ask for the inference service (Deckard) to be started on its home host (spark-1 unless host names another host with a home service): queued at priority 90 like `sparkctl deckard start`, never preempting running work. Needs an operator token (scope operate); a develop token is refused.',
      inputSchema: {
        host: z
          .string()
          .regex(/^[a-z0-9][a-z0-9-]{0,62}$/)
          .optional()
          .describe('A host with a home service; default the one that serves Deckard.'),
      },
      outputSchema: One,
    },
    async ({ host }) =>
      answer(async () => {
        // the operator route itself checks the token's scope: the same authority as the CLI's
        // `deckard start` (docs/sparkctl.md), nothing decided here
        const res = await client.call(
          'POST',
          '/api/v1/deckard/start',
          ReservationResponse,
          host ? { host } : {},
        );
        const r = res.reservation;
        return {
          summary: `Deckard start requested as ${r.id} (priority ${r.priority}): ${progressLine(r)}`,
          data: { reservation: r },
        };
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
