import { z } from 'zod';
import { TokenCreated, TokenList, WhoAmI } from '../core/protocol/api.ts';
import { type CommandContext, type CommandIo, durationFlag, json, needArg } from './command-context.ts';
import { EXIT, usageError } from './errors.ts';
import { table } from './format.ts';

/**
 * API tokens: create, revoke, list; and whoami, the token in use.
 */

export async function cmdToken({ client, io, flags, args }: CommandContext): Promise<number> {
  const usage =
    'token create --name NAME --scopes develop[,operate,emergency] [--expires 30d] | token revoke ID | token list';
  const action = needArg(args, 0, 'action', usage);
  if (action === 'create') {
    if (!flags.name || !flags.scopes)
      throw usageError(`token create needs --name and --scopes: usage: sparkctl ${usage}`);
    const expiresInS = durationFlag(flags.expires, '--expires');
    const res = await client.call('POST', '/api/v1/tokens', TokenCreated, {
      name: flags.name,
      scopes: flags.scopes
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean),
      ...(expiresInS != null ? { expiresInS } : {}),
    });
    if (flags.json) json(io, res);
    else printNewToken(io, res);
    return EXIT.ok;
  }
  if (action === 'revoke') {
    const id = needArg(args, 1, 'token id', usage);
    const res = await client.call(
      'DELETE',
      `/api/v1/tokens/${encodeURIComponent(id)}`,
      z.object({ id: z.string(), revoked: z.boolean() }),
    );
    if (flags.json) json(io, res);
    else io.out(`revoked ${res.id}`);
    return EXIT.ok;
  }
  if (action === 'list') {
    const res = await client.call('GET', '/api/v1/tokens', TokenList);
    if (flags.json) json(io, res);
    else
      io.out(
        table(
          ['ID', 'NAME', 'SCOPES', 'CREATED', 'EXPIRES', 'REVOKED'],
          res.tokens.map((t) => [
            t.id,
            t.name,
            t.scopes.join(','),
            t.createdAt,
            t.expiresAt ?? 'never',
            t.revokedAt,
          ]),
        ),
      );
    return EXIT.ok;
  }
  throw usageError(`unknown token action '${action}': usage: sparkctl ${usage}`);
}

export function printNewToken(
  io: CommandIo,
  t: { id: string; name: string; scopes: string[]; token: string; expiresAt?: string | null },
) {
  io.out(
    `created token ${t.id} "${t.name}" with scopes ${t.scopes.join(', ')}${t.expiresAt ? `, expiring ${t.expiresAt}` : ''}`,
  );
  io.out(`token (shown once, store it now): ${t.token}`);
  io.out(`use it with: export SPARK_TOKEN=${t.token}`);
}

/** The GitHub part's answer to `POST /api/v1/repositories/:owner/:name/enable`. */
export async function cmdWhoami({ client, io, flags }: CommandContext): Promise<number> {
  const w = await client.call('GET', '/api/v1/whoami', WhoAmI);
  if (flags.json) json(io, w);
  else io.out(`${w.name} (${w.tokenId}) scopes: ${w.scopes.join(', ')} at ${client.url}`);
  return EXIT.ok;
}
