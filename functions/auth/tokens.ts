import type { MiddlewareHandler } from 'hono';
import type { AppEnv } from '../app-context.ts';
import { ApiError, notFound, unauthorized } from '../errors.ts';
import type { Ledger } from '../ledger/ledger.ts';
import { sha256Hex } from './sha256.ts';

export { sha256Hex } from './sha256.ts';

/**
 * Bearer tokens: API tokens (scopes develop / operate / emergency) and per-host agent tokens.
 * A token is shown once at creation; the ledger keeps only its SHA-256.
 */

import { SCOPES, type Scope } from '../../core/protocol/api.ts';

export { SCOPES, type Scope };

export interface ApiPrincipal {
  kind: 'api';
  tokenId: string;
  name: string;
  scopes: Scope[];
}
export interface AgentPrincipal {
  kind: 'agent';
  tokenId: string;
  hostId: string;
}

/** 32 random bytes, base64url, with a readable prefix (`spk_api_…`, `spk_agent_…`). */
export function generateToken(prefix: string): string {
  const bytes = crypto.getRandomValues(new Uint8Array(32));
  const b64 = btoa(String.fromCharCode(...bytes))
    .replace(/\+/g, '-')
    .replace(/\//g, '_')
    .replace(/=+$/, '');
  return `${prefix}_${b64}`;
}

function shortId(prefix: string): string {
  const bytes = crypto.getRandomValues(new Uint8Array(6));
  return `${prefix}-${[...bytes].map((b) => b.toString(16).padStart(2, '0')).join('')}`;
}

/** Creates an API token; the plaintext is returned once and never stored. */
export async function createApiToken(
  ledger: Ledger,
  input: { name: string; scopes: Scope[]; expiresInS?: number | undefined },
  actor: string,
): Promise<{ id: string; token: string; name: string; scopes: Scope[]; expiresAt: string | null }> {
  if (input.scopes.length === 0)
    throw new ApiError(400, 'invalid_request', 'a token needs at least one scope');
  const bad = input.scopes.filter((s) => !SCOPES.includes(s));
  if (bad.length)
    throw new ApiError(
      400,
      'invalid_request',
      `unknown scope(s) ${bad.join(', ')}; expected ${SCOPES.join(', ')}`,
    );
  const token = generateToken('spk_api');
  const id = shortId('tok');
  if (input.expiresInS != null && !(Number.isInteger(input.expiresInS) && input.expiresInS >= 60))
    throw new ApiError(
      400,
      'invalid_request',
      `expiry ${input.expiresInS}s is too short or not whole seconds; a token must live at least 60 seconds`,
    );
  const tokenHash = await sha256Hex(token);
  const expiresAt = input.expiresInS != null ? ledger.clock() + input.expiresInS * 1000 : null;
  await ledger.tokens.insertApiToken(
    { id, name: input.name, scopes: input.scopes, tokenHash, expiresAt },
    actor,
  );
  return {
    id,
    token,
    name: input.name,
    scopes: input.scopes,
    expiresAt: expiresAt == null ? null : new Date(expiresAt).toISOString(),
  };
}

/** Revokes an API token (idempotent); 404 when it never existed. */
export function revokeApiToken(
  ledger: Ledger,
  id: string,
  actor: string,
  opts: { mayRevokeEmergency?: boolean } = {},
): Promise<void> {
  return ledger.tokens.revokeApiToken(id, actor, opts);
}

/** Creates a per-host agent token bound to one host. */
export async function createAgentToken(
  ledger: Ledger,
  hostId: string,
  actor: string,
): Promise<{ id: string; token: string; hostId: string }> {
  if (!ledger.config.hosts.some((h) => h.id === hostId)) throw notFound(`host ${hostId}`);
  const token = generateToken('spk_agent');
  const id = shortId('agt');
  const tokenHash = await sha256Hex(token);
  await ledger.tokens.insertAgentToken({ id, hostId, tokenHash }, actor);
  return { id, token, hostId };
}

/** Revokes an agent token (idempotent); 404 when it never existed. */
export function revokeAgentToken(ledger: Ledger, id: string, actor: string): Promise<void> {
  return ledger.tokens.revokeAgentToken(id, actor);
}

function bearer(header: string | undefined): string | null {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
  return m ? m[1]! : null;
}

/**
 * Resolves an API bearer token: the principal, `{ expiredAt }` when it is past its expiry
 *, or null when unknown or revoked.
 */
export async function resolveApiToken(
  ledger: Ledger,
  token: string,
): Promise<ApiPrincipal | { expiredAt: number } | null> {
  const hash = await sha256Hex(token);
  const row = await ledger.tokens.apiTokenByHash(hash);
  if (!row) return null;
  if (row.expiresAt != null && row.expiresAt <= ledger.clock()) return { expiredAt: row.expiresAt };
  // best effort: a failed bookkeeping write never refuses a valid token
  await ledger.tokens.touchApiToken(row.id, row.lastUsedAt ?? null).catch(() => undefined);
  return { kind: 'api', tokenId: row.id, name: row.name, scopes: row.scopes.split(',') as Scope[] };
}

/** Resolves an API bearer token, or null when unknown, revoked or expired. */
export async function authenticateApiToken(ledger: Ledger, token: string): Promise<ApiPrincipal | null> {
  const p = await resolveApiToken(ledger, token);
  return p && 'kind' in p ? p : null;
}

/** Resolves an agent bearer token, or null when unknown or revoked. */
export async function authenticateAgentToken(ledger: Ledger, token: string): Promise<AgentPrincipal | null> {
  const hash = await sha256Hex(token);
  const row = await ledger.tokens.agentTokenByHash(hash);
  if (!row) return null;
  return { kind: 'agent', tokenId: row.id, hostId: row.hostId };
}

export type AuthEnv = AppEnv & { Variables: AppEnv['Variables'] & { principal: ApiPrincipal } };
export type AgentAuthEnv = AppEnv & { Variables: AppEnv['Variables'] & { agent: AgentPrincipal } };

/**
 * Requires an API token holding `scope`. `emergency` is never implied by `operate`; `operate`
 * implies `develop`.
 */
export function requireScope(scope: Scope): MiddlewareHandler<AuthEnv> {
  return async (c, next) => {
    const token = bearer(c.req.header('authorization'));
    if (!token) throw unauthorized('missing bearer token (Authorization: Bearer spk_api_…)', 'spark');
    const p = await resolveApiToken(c.get('ctx').ledger, token);
    if (!p) throw unauthorized('unknown or revoked API token', 'spark');
    if (!('kind' in p))
      throw unauthorized(
        `this API token expired at ${new Date(p.expiredAt).toISOString()}; ask an operator for a new one`,
        'spark',
      );
    const ok = p.scopes.includes(scope) || (scope === 'develop' && p.scopes.includes('operate'));
    if (!ok)
      throw new ApiError(
        403,
        'forbidden',
        `this token lacks the "${scope}" scope (has: ${p.scopes.join(', ')})`,
      );
    c.set('principal', p);
    await next();
  };
}

/** Requires a per-host agent token; the host it is bound to is in `c.get('agent')`. */
export function requireAgent(): MiddlewareHandler<AgentAuthEnv> {
  return async (c, next) => {
    const token = bearer(c.req.header('authorization'));
    if (!token) throw unauthorized('missing agent bearer token', 'spark');
    const p = await authenticateAgentToken(c.get('ctx').ledger, token);
    if (!p) throw unauthorized('unknown or revoked agent token', 'spark');
    c.set('agent', p);
    await next();
  };
}
