import type { Context } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import type { z } from 'zod';
import {
  AGENT_API_PREFIX,
  AGENT_MAX_BODY_BYTES,
  HeartbeatRequestSchema,
  PollRequestSchema,
  ReportSchema,
} from '../../core/protocol/agent.ts';
import type { AppModule } from '../app.ts';
import {
  type AgentAuthEnv,
  type AgentPrincipal,
  createAgentToken,
  requireAgent,
  requireScope,
  revokeAgentToken,
} from '../auth/tokens.ts';
import { ApiError, badRequest } from '../errors.ts';
import { applyReport } from '../ledger/agent-reports.ts';
import { handlePoll } from './poll.ts';
import { RateLimiter } from './rate-limit.ts';

/**
 * The agent API (issue 4, DESIGN.md "Relay agent protocol"): agents poll `/agent/v1/poll` for
 * their host's desired state (long-poll on Node), send heartbeats and step reports. Every request
 * carries a per-host agent token; the host is the token's, never one named in the body. Plus the
 * operator routes that create and revoke agent tokens.
 */

async function readJson<S extends z.ZodType>(c: Context, schema: S): Promise<z.output<S>> {
  let raw: unknown;
  try {
    const text = await c.req.text();
    raw = text.trim() === '' ? {} : JSON.parse(text);
  } catch {
    throw badRequest('request body is not valid JSON', 'invalid_json');
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    throw badRequest(
      `invalid body: ${parsed.error.issues
        .map((i) => `${i.path.length ? i.path.join('.') : '(root)'}: ${i.message}`)
        .join('; ')}`,
    );
  }
  return parsed.data;
}

/** The agent principal `requireAgent()` set; these routes are only mounted behind it. */
function principalOf(c: Context): AgentPrincipal {
  return (c as unknown as Context<AgentAuthEnv>).get('agent');
}

export const agentApiModule: AppModule = {
  name: 'agent-api',
  routes(app, ctx) {
    const limiter = new RateLimiter(ctx.settings.agentRateLimitPerMin);
    const agent = app.basePath(AGENT_API_PREFIX);
    agent.use(
      '*',
      bodyLimit({
        maxSize: AGENT_MAX_BODY_BYTES,
        onError: () => {
          throw new ApiError(
            413,
            'payload_too_large',
            `agent request bodies are limited to ${AGENT_MAX_BODY_BYTES} bytes; send fewer log lines`,
          );
        },
      }),
    );
    agent.use('*', requireAgent());
    agent.use('*', async (c, next) => {
      const { tokenId, hostId } = principalOf(c);
      const wait = limiter.take(tokenId);
      if (wait > 0) {
        throw new ApiError(
          429,
          'rate_limited',
          `too many requests from the agent of ${hostId}; retry after ${wait} s`,
          { 'Retry-After': String(wait) },
        );
      }
      if (!ctx.ledger.config.hosts.some((h) => h.id === hostId)) {
        throw new ApiError(403, 'unknown_host', `host ${hostId} is no longer in the configuration`);
      }
      await next();
    });

    const hostOf = (c: Context) => principalOf(c).hostId;

    agent.post('/poll', async (c) => {
      const req = await readJson(c, PollRequestSchema);
      return c.json(await handlePoll(ctx, hostOf(c), req, c.req.raw.signal));
    });

    agent.post('/heartbeat', async (c) => {
      const { facts } = await readJson(c, HeartbeatRequestSchema);
      await ctx.ledger.recordHeartbeat(hostOf(c), {
        ...facts,
        gpuError: facts.gpuError ?? null,
      });
      return c.json({ ok: true, heartbeatIntervalS: ctx.ledger.config.timings.heartbeatIntervalS });
    });

    agent.post('/report', async (c) => {
      const report = await readJson(c, ReportSchema);
      const hostId = hostOf(c);
      const result = await applyReport(ctx.ledger, hostId, report);
      ctx.log.info('agent report', { hostId, type: report.type, result });
      return c.json({ ok: true as const, result });
    });

    app.post('/api/v1/hosts/:id/agent-tokens', requireScope('operate'), async (c) => {
      const created = await createAgentToken(ctx.ledger, c.req.param('id'), `api:${c.get('principal').name}`);
      // the plaintext is shown here once; only its SHA-256 is stored
      return c.json(created, 201);
    });

    app.delete('/api/v1/agent-tokens/:id', requireScope('operate'), async (c) => {
      await revokeAgentToken(ctx.ledger, c.req.param('id'), `api:${c.get('principal').name}`);
      return c.json({ ok: true, id: c.req.param('id'), revoked: true });
    });
  },
};
