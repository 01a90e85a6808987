import { streamSSE } from 'hono/streaming';
import type { AppModule } from '../app.ts';
import { inboxStats } from '../ledger/inbox.ts';
import type { Ledger } from '../ledger/ledger.ts';
import { recentEventsOf } from '../ledger/queries.ts';
import { buildViews, toEventView } from '../views.ts';
import { type DashboardData, DashboardPage, LivePanel } from './page.tsx';

/** Subjects shown in the public history (tokens, webhooks and outbox stay internal). */
const PUBLIC_SUBJECTS = ['reservation', 'lease', 'host'] as const;

export async function loadDashboardData(ledger: Ledger, historyLimit = 25): Promise<DashboardData> {
  const [{ fleet, queue }, rows, inbox] = await Promise.all([
    buildViews(ledger),
    recentEventsOf(ledger, PUBLIC_SUBJECTS, historyLimit),
    inboxStats(ledger),
  ]);
  return {
    fleet,
    queue,
    events: rows.map((r) => toEventView(r, { publicView: true })),
    inbox: { pending: inbox.pending, parked: inbox.parked },
  };
}

/**
 * Issue 6: the control room (`GET /`), its live fragment and a change stream. On Node the stream
 * pushes a `changed` event whenever the ledger reports a change; on Workers (no shared process
 * state) it answers once and the browser reconnects after `retry`, which turns it into polling.
 * The page also polls every 5 s, so changes written by another process show up too.
 */
export const dashboardModule: AppModule = {
  name: 'dashboard',
  routes(app, ctx) {
    app.get('/', async (c) => c.html(DashboardPage({ data: await loadDashboardData(ctx.ledger) })));
    app.get('/dashboard/live', async (c) => {
      c.header('cache-control', 'no-store');
      return c.html(LivePanel({ data: await loadDashboardData(ctx.ledger) }));
    });
    app.get('/dashboard/events', (c) =>
      streamSSE(c, async (stream) => {
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
        });
        await stream.writeSSE({ event: 'hello', data: 'ok', retry: 3000 });
        try {
          while (!closed && !stream.aborted) {
            await stream.sleep(15000);
            if (!closed) await stream.write(': keep-alive\n\n');
          }
        } finally {
          closed = true;
          unsubscribe();
          if (pending) clearTimeout(pending);
        }
      }),
    );
  },
};
