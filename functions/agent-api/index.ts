import type { Context } from 'hono';
import {
  AGENT_API_PREFIX,
  AGENT_MAX_BODY_BYTES,
  HeartbeatRequestSchema,
  PollRequestSchema,
  ReportSchema,
} from '../../core/protocol/agent.ts';
import { limitBody, parseBody } from '../api/body.ts';
import type { AppModule } from '../app.ts';
import {
  type AgentAuthEnv,
  type AgentPrincipal,
  createAgentToken,
  requireAgent,
  revokeAgentToken,
} from '../auth/tokens.ts';
import { ApiError } from '../errors.ts';
import { handlePoll } from './poll.ts';
import { RateLimiter } from './rate-limit.ts';

/**
 * The agent API (docs/architecture.md "Relay agent protocol"): agents poll `/agent/v1/poll` for
 * their host's desired state (long-poll on Node), send heartbeats and step reports. Every request
 * carries a per-host agent token; the host is the token's, never one named in the body. Plus the
 * operator routes that create and revoke agent tokens.
 */

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
      limitBody(
        AGENT_MAX_BODY_BYTES,
        () =>
          new ApiError(
            413,
            'payload_too_large',
            `agent request bodies are limited to ${AGENT_MAX_BODY_BYTES} bytes; send fewer log lines`,
          ),
      ),
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
      const req = await parseBody(c, PollRequestSchema);
      return c.json(await handlePoll(ctx, hostOf(c), req, c.req.raw.signal));
    });

    agent.post('/heartbeat', async (c) => {
      const { facts } = await parseBody(c, HeartbeatRequestSchema);
      await ctx.ledger.recordHeartbeat(hostOf(c), {
        ...facts,
        gpuError: facts.gpuError ?? null,
      });
      return c.json({ ok: true, heartbeatIntervalS: ctx.ledger.config.timings.heartbeatIntervalS });
    });

    agent.post('/report', async (c) => {
      const report = await parseBody(c, ReportSchema);
      const hostId = hostOf(c);
      const result = await ctx.ledger.agents.applyReport(hostId, report);
      ctx.log.info('agent report', { hostId, type: report.type, result });
      return c.json({ ok: true as const, result });
    });
  },
  operatorRoutes(api, ctx) {
    api.post('/hosts/:id/agent-tokens', 'operate', async (c) => {
      const created = await createAgentToken(ctx.ledger, c.req.param('id'), `api:${c.get('principal').name}`);
      // the plaintext is shown here once; only its SHA-256 is stored
      return c.json(created, 201);
    });

    api.delete('/agent-tokens/:id', 'operate', async (c) => {
      await revokeAgentToken(ctx.ledger, c.req.param('id'), `api:${c.get('principal').name}`);
      return c.json({ ok: true, id: c.req.param('id'), revoked: true });
    });
  },
};
