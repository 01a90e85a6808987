import { raw } from 'hono/html';
import type { EventView, FleetView, HostView, QueueItemView, QueueView } from '../views.ts';
import { ActiveTable, age, Clock, KIND_LABEL, QueueTable } from './queue-panel.tsx';
import { DASHBOARD_CSS } from './style.ts';

/** Everything the control room renders: sanitized views only (functions/views.ts). */
export interface DashboardData {
  fleet: FleetView;
  queue: QueueView;
  events: EventView[];
  /** Webhook inbox counts: deliveries waiting and parked (counts only). */
  inbox: { pending: number; parked: number };
}

function HostCard({ h, work, now }: { h: HostView; work: QueueItemView | undefined; now: number }) {
  const kept =
    h.keptFor && (h.state === 'held' || h.state === 'draining')
      ? `${h.state === 'held' ? 'held for' : 'draining for'} ${h.keptFor}`
      : null;
  return (
    <article class={`host b-${h.state}`} data-host={h.id} data-state={h.state}>
      <h3>
        {h.id} <span class={`pill s-${h.state}`}>{h.state}</span>
      </h3>
      <div class="meta">
        pool {h.pool} · {h.gpus} GPU{h.gpus === 1 ? '' : 's'} · {h.managed ? 'adopted' : 'not adopted'}
      </div>
      <dl>
        {h.homeService ? (
          <>
            <dt>{h.homeService}</dt>
            <dd class={`h-${h.serviceHealth}`}>{h.serviceHealth}</dd>
          </>
        ) : null}
        <dt>work</dt>
        <dd>
          {h.reservation ? (
            <>
              <span class="kind">{KIND_LABEL[h.reservation.kind] ?? h.reservation.kind}</span> ·{' '}
              {h.reservation.topology} · <span class="mono">{h.reservation.id}</span> ({h.reservation.status})
            </>
          ) : (
            <span class="why">none</span>
          )}
        </dd>
        {work?.leaseExpiresAt ? (
          <>
            <dt>lease</dt>
            <dd class="lease">
              until <Clock iso={work.leaseExpiresAt} /> ·{' '}
              {Date.parse(work.leaseExpiresAt) > now
                ? `in ${age(Math.round((Date.parse(work.leaseExpiresAt) - now) / 1000))}`
                : 'expired'}
              <div class="why">held by {work.holderClass}</div>
            </dd>
          </>
        ) : null}
        <dt>heartbeat</dt>
        <dd>{h.lastHeartbeatAgeS == null ? 'never' : `${age(h.lastHeartbeatAgeS)} ago`}</dd>
        <dt>GPU procs</dt>
        <dd>{h.gpuProcessCount == null ? 'unknown' : h.gpuProcessCount}</dd>
      </dl>
      {kept ? <div class="note">{kept}</div> : null}
      {h.note ? <div class="note">{h.note}</div> : null}
    </article>
  );
}

function History({ events }: { events: EventView[] }) {
  if (events.length === 0) return <div class="empty">No history yet.</div>;
  return (
    <table class="ev" id="history">
      <tbody>
        {events.map((e) => (
          <tr>
            <td class="t">
              <Clock iso={e.at} seconds />
            </td>
            <td class="mono">{e.subjectId}</td>
            <td>
              {e.type}
              {e.toState ? (
                <span class="arrow">
                  {' '}
                  {e.fromState && e.fromState !== e.toState ? `${e.fromState} → ` : '→ '}
                  {e.toState}
                </span>
              ) : null}
            </td>
            <td class="why">{e.cause}</td>
            <td class="why">{e.actor}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** The part of the page that refreshes live. */
export function LivePanel({ data }: { data: DashboardData }) {
  const { fleet, queue, events } = data;
  return (
    <div id="live" data-generated={fleet.generatedAt}>
      <h2>
        Hosts <span class="count">{fleet.hosts.length}</span>
      </h2>
      <section class="hosts">
        {fleet.hosts.map((h) => (
          <HostCard
            h={h}
            work={h.reservation ? queue.active.find((q) => q.id === h.reservation!.id) : undefined}
            now={Date.parse(fleet.generatedAt)}
          />
        ))}
      </section>
      <h2>
        Queue <span class="count">{queue.queued.length}</span>
      </h2>
      <QueueTable items={queue.queued} fleet={fleet} />
      <h2>
        Active work <span class="count">{queue.active.length}</span>
      </h2>
      <ActiveTable items={queue.active} generatedAt={fleet.generatedAt} />
      <h2>Recent history</h2>
      <History events={events} />
      <footer>
        Updated {fleet.generatedAt.slice(0, 19).replace('T', ' ')} UTC · fleet{' '}
        {fleet.managed ? 'managed: every host adopted and heartbeating' : 'not fully managed'} ·{' '}
        <span class="inbox" data-pending={String(data.inbox.pending)} data-parked={String(data.inbox.parked)}>
          webhooks: {data.inbox.pending} waiting, {data.inbox.parked} parked
          {data.inbox.parked ? ' (sparkctl deliveries)' : ''}
        </span>
      </footer>
    </div>
  );
}

export const CLIENT_JS = `
(() => {
  const badge = document.getElementById('live-badge');
  const label = badge.querySelector('.label');
  let busy = false, again = false;
  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      const r = await fetch('/dashboard/live', { cache: 'no-store' });
      if (r.ok) {
        const html = await r.text();
        const cur = document.getElementById('live');
        const tpl = document.createElement('template');
        tpl.innerHTML = html.trim();
        if (tpl.content.firstElementChild) cur.replaceWith(tpl.content.firstElementChild);
      }
    } catch (e) {}
    busy = false;
    if (again) { again = false; refresh(); }
  }
  function mode(m) { badge.className = 'badge live-' + m; label.textContent = m === 'on' ? 'live' : m === 'poll' ? 'polling' : 'offline'; }
  setInterval(refresh, 5000);
  if ('EventSource' in window) {
    const es = new EventSource('/dashboard/events');
    es.addEventListener('open', () => mode('on'));
    es.addEventListener('changed', refresh);
    es.addEventListener('error', () => mode('poll'));
  } else mode('poll');
})();
`;

/** The whole control-room page. */
export function DashboardPage({ data }: { data: DashboardData }) {
  return (
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <title>Spark control room</title>
        <style>{raw(DASHBOARD_CSS)}</style>
      </head>
      <body>
        <header>
          <h1>
            Spark control room <span>· GPU fleet admission</span>
          </h1>
          <div class="spacer" />
          <span class="badge" id="fleet-badge">
            <span
              class="dot"
              style={data.fleet.managed ? 'background:var(--green)' : 'background:var(--amber)'}
            />
            {data.fleet.managed ? 'fleet managed' : 'fleet not fully managed'}
          </span>
          <span class="badge live-poll" id="live-badge">
            <span class="dot" />
            <span class="label">connecting</span>
          </span>
        </header>
        <main>
          <LivePanel data={data} />
        </main>
        <script>{raw(CLIENT_JS)}</script>
      </body>
    </html>
  );
}
