import type { Context } from 'hono';
import { streamSSE } from 'hono/streaming';
import type { AppContext, AppModule } from '../app.ts';
import { requirePublicRead } from '../auth/public-read.ts';
import { ApiError } from '../errors.ts';
import type { Ledger } from '../ledger/ledger.ts';
import { toEventView, type ViewsMemo } from '../views.ts';
import { CLIENT_JS, type DashboardData, DashboardPage, LivePanel } from './page.tsx';

/** Subjects shown in the public history (tokens, webhooks and outbox stay internal). */
const PUBLIC_SUBJECTS = ['reservation', 'lease', 'host'] as const;

export async function loadDashboardData(
  ledger: Ledger,
  views: ViewsMemo,
  historyLimit = 25,
): Promise<DashboardData> {
  const [{ fleet, queue }, rows, inbox] = await Promise.all([
    views.get(),
    ledger.reads.recentEventsOf(PUBLIC_SUBJECTS, historyLimit),
    ledger.inbox.stats(),
  ]);
  return {
    fleet,
    queue,
    events: rows.map((r) => toEventView(r, { publicView: true })),
    inbox: { pending: inbox.pending, parked: inbox.parked },
  };
}

/** The dashboard data from the public view cache. */
function cachedDashboard(ctx: AppContext): Promise<DashboardData> {
  return ctx.services.publicViews.get('dashboard', () => loadDashboardData(ctx.ledger, ctx.services.views));
}

async function sha256Base64(text: string): Promise<string> {
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(text));
  return btoa(String.fromCharCode(...new Uint8Array(digest)));
}

let csp: Promise<string> | null = null;
/**
 * the page runs only its own inline script (pinned by hash), talks only to this
 * origin, and may not be framed. Inline `style=` attributes need 'unsafe-inline' for styles only.
 */
function contentSecurityPolicy(): Promise<string> {
  csp ??= sha256Base64(CLIENT_JS).then((js) =>
    [
      "default-src 'none'",
      `script-src 'sha256-${js}'`,
      "style-src 'unsafe-inline'",
      "connect-src 'self'",
      "img-src 'self' data:",
      "base-uri 'none'",
      "form-action 'none'",
      "frame-ancestors 'none'",
    ].join('; '),
  );
  return csp;
}

function clientAddress(c: Context): string {
  const incoming = (c.env as { incoming?: { socket?: { remoteAddress?: string } } } | undefined)?.incoming;
  return incoming?.socket?.remoteAddress ?? c.req.header('cf-connecting-ip') ?? 'unknown';
}

/**
 * the control room (`GET /`), its live fragment and a change stream. On Node the stream
 * pushes a `changed` event whenever the ledger reports a change; on Workers (no shared process
 * state) it answers once and the browser reconnects after `retry`, which turns it into polling.
 * The page also polls every 5 s, so changes written by another process show up too.
 * views come from a short cache invalidated by change notices, streams are capped in
 * all and per address, every answer carries the security headers, and `publicViews: "token"`
 * puts all of it behind an API token.
 */
export const dashboardModule: AppModule = {
  name: 'dashboard',
  routes(app, ctx) {
    // the change streams this app has open, in all and per client address;
    // one app per controller, so two controllers in one process do not count each other's
    const streams = { total: 0, byAddress: new Map<string, number>() };
    const guard = requirePublicRead(ctx);
    const headers = async (c: Context, next: () => Promise<void>) => {
      await next();
      c.header('content-security-policy', await contentSecurityPolicy());
      c.header('x-content-type-options', 'nosniff');
      c.header('x-frame-options', 'DENY');
      c.header('referrer-policy', 'no-referrer');
    };
    for (const path of ['/', '/dashboard/*']) {
      app.use(path, headers);
      app.use(path, guard);
    }
    app.get('/', async (c) => c.html(DashboardPage({ data: await cachedDashboard(ctx) })));
    app.get('/dashboard/live', async (c) => {
      c.header('cache-control', 'no-store');
      return c.html(LivePanel({ data: await cachedDashboard(ctx) }));
    });
    app.get('/dashboard/events', (c) => {
      const { sseMaxClients, sseMaxPerAddress } = ctx.ledger.config.server;
      const address = clientAddress(c);
      const mine = streams.byAddress.get(address) ?? 0;
      if (ctx.runtime === 'node' && (streams.total >= sseMaxClients || mine >= sseMaxPerAddress)) {
        throw new ApiError(
          503,
          'too_many_streams',
          streams.total >= sseMaxClients
            ? `at most ${sseMaxClients} dashboard streams are open at once; the page polls instead`
            : `at most ${sseMaxPerAddress} dashboard streams per address; close other tabs`,
          { 'Retry-After': '30' },
        );
      }
      if (ctx.runtime === 'node') {
        streams.total += 1;
        streams.byAddress.set(address, mine + 1);
      }
      let counted = ctx.runtime === 'node';
      const release = () => {
        if (!counted) return;
        counted = false;
        streams.total -= 1;
        const n = (streams.byAddress.get(address) ?? 1) - 1;
        if (n > 0) streams.byAddress.set(address, n);
        else streams.byAddress.delete(address);
      };
      return streamSSE(c, async (stream) => {
        if (ctx.runtime !== 'node') {
          await stream.writeSSE({ event: 'changed', data: 'poll', retry: 5000 });
          return;
        }
        let pending: ReturnType<typeof setTimeout> | null = null;
        let closed = false;
        const unsubscribe = ctx.ledger.subscribe(() => {
          if (pending || closed) return;
          // coalesce bursts (one admission pass writes many rows) into one refresh
          pending = setTimeout(() => {
            pending = null;
            if (!closed) void stream.writeSSE({ event: 'changed', data: String(Date.now()) });
          }, 150);
        });
        stream.onAbort(() => {
          closed = true;
          release();
        });
        try {
          await stream.writeSSE({ event: 'hello', data: 'ok', retry: 3000 });
          while (!closed && !stream.aborted) {
            await stream.sleep(15000);
            if (!closed) await stream.write(': keep-alive\n\n');
          }
        } finally {
          closed = true;
          release();
          unsubscribe();
          if (pending) clearTimeout(pending);
        }
      });
    });
  },
};
