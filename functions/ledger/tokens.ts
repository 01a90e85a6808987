import { and, eq, isNull } from 'drizzle-orm';
import { ApiError, notFound } from '../errors.ts';
import type { AgentTokenRow, ApiTokenRow } from './rows.ts';
import * as t from './schema.ts';
import type { LedgerStore } from './store.ts';

/**
 * Credential commands: API tokens (scopes develop / operate / emergency) and per-host agent
 * tokens. Only SHA-256 hashes are stored; generating and hashing is `functions/auth/tokens.ts`.
 */

export async function insertApiToken(
  s: LedgerStore,
  row: { id: string; name: string; scopes: string[]; tokenHash: string; expiresAt?: number | null },
  actor: string,
): Promise<void> {
  await s.write(async (tx, now) => {
    // names are unique among live tokens, so the audit actor `api:<name>`
    // names exactly one credential
    const taken = await tx
      .select({ id: t.apiTokens.id })
      .from(t.apiTokens)
      .where(and(eq(t.apiTokens.name, row.name), isNull(t.apiTokens.revokedAt)));
    if (taken.length)
      throw new ApiError(
        409,
        'token_name_taken',
        `a live API token is already named "${row.name}" (${taken[0]!.id}); choose another name or revoke that one first`,
      );
    await tx.insert(t.apiTokens).values({
      id: row.id,
      name: row.name,
      scopes: row.scopes.join(','),
      tokenHash: row.tokenHash,
      createdAt: now,
      expiresAt: row.expiresAt ?? null,
    });
    const until = row.expiresAt != null ? `, expiring ${new Date(row.expiresAt).toISOString()}` : '';
    await s.record(tx, now, {
      subjectType: 'token',
      subjectId: row.id,
      type: 'token.created',
      cause: `API token "${row.name}" created with scopes ${row.scopes.join(', ')}${until}`,
      actor,
      data: { scopes: row.scopes, expiresAt: row.expiresAt ?? null },
    });
  });
}

export async function revokeApiToken(
  s: LedgerStore,
  id: string,
  actor: string,
  opts: { mayRevokeEmergency?: boolean } = {},
): Promise<void> {
  await s.write(async (tx, now) => {
    const row = (await tx.select().from(t.apiTokens).where(eq(t.apiTokens.id, id)))[0];
    if (!row) throw notFound(`token ${id}`);
    if (row.revokedAt != null) return;
    // an operate-only token cannot take the emergency scope away
    if (opts.mayRevokeEmergency === false && row.scopes.split(',').includes('emergency'))
      throw new ApiError(
        403,
        'forbidden',
        `only a token holding "emergency" may revoke the emergency token ${id}`,
      );
    await tx.update(t.apiTokens).set({ revokedAt: now }).where(eq(t.apiTokens.id, id));
    await s.record(tx, now, {
      subjectType: 'token',
      subjectId: id,
      type: 'token.revoked',
      cause: `API token "${row.name}" revoked`,
      actor,
    });
  });
}

/** How often a token's `lastUsedAt` is written (maintained, but not per call). */
export const LAST_USED_WRITE_MS = 60_000;

/** Records that an API token was used, at most once per {@link LAST_USED_WRITE_MS}. */
export async function touchApiToken(s: LedgerStore, id: string, lastUsedAt: number | null): Promise<void> {
  const now = s.clock();
  if (lastUsedAt != null && now - lastUsedAt < LAST_USED_WRITE_MS) return;
  await s.write(async (tx) => {
    await tx.update(t.apiTokens).set({ lastUsedAt: now }).where(eq(t.apiTokens.id, id));
  });
}

export async function insertAgentToken(
  s: LedgerStore,
  row: { id: string; hostId: string; tokenHash: string },
  actor: string,
): Promise<void> {
  await s.write(async (tx, now) => {
    await tx.insert(t.agentTokens).values({ ...row, createdAt: now });
    await s.record(tx, now, {
      subjectType: 'token',
      subjectId: row.id,
      type: 'agent_token.created',
      cause: `agent token created for ${row.hostId}`,
      actor,
      data: { hostId: row.hostId },
    });
  });
}

export async function revokeAgentToken(s: LedgerStore, id: string, actor: string): Promise<void> {
  await s.write(async (tx, now) => {
    const row = (await tx.select().from(t.agentTokens).where(eq(t.agentTokens.id, id)))[0];
    if (!row) throw notFound(`agent token ${id}`);
    if (row.revokedAt != null) return;
    await tx.update(t.agentTokens).set({ revokedAt: now }).where(eq(t.agentTokens.id, id));
    await s.record(tx, now, {
      subjectType: 'token',
      subjectId: id,
      type: 'agent_token.revoked',
      cause: `agent token for ${row.hostId} revoked`,
      actor,
    });
  });
}

/** The live (not revoked) API token with this hash, or null. */
export async function apiTokenByHash(s: LedgerStore, hash: string): Promise<ApiTokenRow | null> {
  const rows = await s.db
    .select()
    .from(t.apiTokens)
    .where(and(eq(t.apiTokens.tokenHash, hash), isNull(t.apiTokens.revokedAt)));
  return rows[0] ?? null;
}

/** The live (not revoked) agent token with this hash, or null. */
export async function agentTokenByHash(s: LedgerStore, hash: string): Promise<AgentTokenRow | null> {
  const rows = await s.db
    .select()
    .from(t.agentTokens)
    .where(and(eq(t.agentTokens.tokenHash, hash), isNull(t.agentTokens.revokedAt)));
  return rows[0] ?? null;
}

/** Live agent tokens (for `npm run agent-token -- list`). */
export async function listAgentTokens(s: LedgerStore): Promise<AgentTokenRow[]> {
  return s.db.select().from(t.agentTokens).orderBy(t.agentTokens.createdAt);
}
