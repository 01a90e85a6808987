import type { MiddlewareHandler } from 'hono';
import { type ApiPrincipal, type AuthEnv, authenticateApiToken } from '../auth/tokens.ts';
import type { Ledger } from '../ledger/ledger.ts';

/** Audited paths are cut to this many characters. */
export const MAX_AUDITED_PATH = 120;
const boundedPath = (path: string) =>
  path.length > MAX_AUDITED_PATH ? `${path.slice(0, MAX_AUDITED_PATH - 1)}…` : path;

/** How often one token's reads of one route are written to the history (per process). */
export const READ_AUDIT_WINDOW_MS = 60_000;

/**
 * Audits API calls in the event history (every call audited). A change is audited by
 * its own events, which carry `api:<token name>` as actor, in the same transaction. This adds the
 * rest: reads (one `api.read` row per token and route per minute, with the number of calls, so a
 * `--wait` poll does not flood the ledger) and refusals for lack of scope (`api.denied`).
 * Unauthenticated calls cannot be attributed and invalid input writes nothing.
 */
export function createAuditor(ledger: Ledger, log: { warn(msg: string, f?: Record<string, unknown>): void }) {
  const reads = new Map<string, { since: number; count: number }>();
  const denials = new Map<string, { since: number; count: number }>();
  const firstInWindow = (seen: Map<string, { since: number; count: number }>, key: string): boolean => {
    const now = ledger.clock();
    const hit = seen.get(key);
    if (hit && now - hit.since < READ_AUDIT_WINDOW_MS) {
      hit.count += 1;
      return false;
    }
    seen.set(key, { since: now, count: 1 });
    if (seen.size > 10_000) {
      for (const [k, v] of seen) if (now - v.since >= READ_AUDIT_WINDOW_MS) seen.delete(k);
    }
    return true;
  };

  async function write(
    p: Pick<ApiPrincipal, 'tokenId' | 'name'>,
    type: 'api.read' | 'api.denied',
    cause: string,
    data: Record<string, unknown>,
  ) {
    try {
      await ledger.api.recordAudit({ tokenId: p.tokenId, type, cause, actor: `api:${p.name}`, data });
    } catch (e) {
      // an audit row must never turn a served read into an error
      log.warn('audit write failed', { type, error: String(e) });
    }
  }

  const middleware: MiddlewareHandler<AuthEnv> = async (c, next) => {
    await next();
    const status = c.res.status;
    const route = `${c.req.method} ${c.req.routePath}`;
    if (status === 403) {
      const header = /^Bearer\s+(\S+)\s*$/i.exec(c.req.header('authorization') ?? '');
      const p = c.get('principal') ?? (header ? await authenticateApiToken(ledger, header[1]!) : null);
      // one denial row per token and route per window (with the count), and
      // the path bounded, so a token hammering a forbidden route cannot grow the history
      if (p && firstInWindow(denials, `${p.tokenId} ${route}`))
        await write(p, 'api.denied', `refused ${c.req.method} ${boundedPath(c.req.path)} (HTTP 403)`, {
          route,
          status,
        });
      return;
    }
    const p = c.get('principal');
    if (!p || c.req.method !== 'GET' || status >= 400) return;
    const now = ledger.clock();
    const key = `${p.tokenId} ${route}`;
    const seen = reads.get(key);
    if (seen && now - seen.since < READ_AUDIT_WINDOW_MS) {
      seen.count += 1;
      return;
    }
    const previous = seen?.count ?? 0;
    reads.set(key, { since: now, count: 1 });
    if (reads.size > 10_000) {
      for (const [k, v] of reads) if (now - v.since >= READ_AUDIT_WINDOW_MS) reads.delete(k);
    }
    await write(
      p,
      'api.read',
      `read ${boundedPath(c.req.path)}${previous > 1 ? ` (${previous} calls to ${route} in the minute before)` : ''}`,
      { route, status },
    );
  };
  return middleware;
}
