import { SCHEDULABLE } from '../queue-eta.ts';
import type { FleetView, QueueItemView } from '../views.ts';

/**
 * The queue and active-work panels of the control room: start estimates, the host a
 * targeted request asked for, lease ends with the holder's class, every time with its zone, and
 * an honest word when no host can start anything.
 */

export const KIND_LABEL: Record<string, string> = {
  development: 'development',
  deckard: 'Deckard start',
  manual: 'PR test',
  merge: 'merge CI',
  benchmark: 'benchmark',
  background: 'background CI',
};

/** `2026-11-30T14:02:11.000Z` → `14:02 UTC` (with the full instant on hover). */
export function Clock({ iso, seconds = false }: { iso: string; seconds?: boolean }) {
  return (
    <time datetime={iso} title={`${iso.slice(0, 19).replace('T', ' ')} UTC`}>
      {iso.slice(11, seconds ? 19 : 16)} UTC
    </time>
  );
}

/** A duration in the largest two units: `42m`, `1h 20m`, `3d`. */
export function age(s: number | null): string {
  if (s == null) return 'never';
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d`;
}

function PrLink({ q }: { q: QueueItemView }) {
  if (q.prUrl && q.repo && q.pr != null) {
    return (
      <a href={q.prUrl} rel="noreferrer">
        {q.repo}#{q.pr}
      </a>
    );
  }
  return <span class="why">{q.repo ?? '—'}</span>;
}

/** Why nothing can start, when no host is online and adopted (every estimate is then blocked). */
export function startBlocker(fleet: FleetView): string | null {
  if (fleet.hosts.some((h) => SCHEDULABLE.has(h.state))) return null;
  if (fleet.hosts.length === 0) return 'No host is configured, so nothing can start.';
  return 'No host can start work: every host is offline or not adopted.';
}

function Blocker({ text }: { text: string }) {
  return (
    <div class="blocker" id="start-blocker">
      <strong>{text}</strong> New work waits in the queue until a host is back. Install the relay agent on a
      Spark host (<span class="mono">npm run agent</span> with its host token, see docs/agent.md) and adopt it
      (<span class="mono">sparkctl host adopt spark-2</span>); a host starts work once it heartbeats.
    </div>
  );
}

function Eta({ q }: { q: QueueItemView }) {
  if (!q.eta) return <span class="why">—</span>;
  if (q.eta.blocked) return <span class="eta-blocked">{q.eta.text.replace(/^cannot start yet: /, '')}</span>;
  return (
    <>
      <span class="eta">{q.eta.text.replace(/^starts in /, 'in ')}</span>
      {q.eta.startLo && q.eta.startHi ? (
        <div class="why">
          <Clock iso={q.eta.startLo} />
          {q.eta.startHi.slice(11, 16) !== q.eta.startLo.slice(11, 16) ? (
            <> – {q.eta.startHi.slice(11, 16)}</>
          ) : null}
        </div>
      ) : null}
    </>
  );
}

/** Waiting work in admission order, with its start estimate. */
export function QueueTable({ items, fleet }: { items: QueueItemView[]; fleet: FleetView }) {
  const blocked = startBlocker(fleet);
  if (items.length === 0) {
    if (blocked) return <Blocker text={`Nothing is waiting. ${blocked}`} />;
    return <div class="empty">Nothing is waiting. New work starts as soon as it arrives.</div>;
  }
  return (
    <>
      {blocked ? <Blocker text={blocked} /> : null}
      <table id="queue">
        <thead>
          <tr>
            <th>#</th>
            <th>request</th>
            <th>what</th>
            <th>PR / commit</th>
            <th>starts</th>
            <th>why it waits</th>
            <th>waiting</th>
          </tr>
        </thead>
        <tbody>
          {items.map((q) => (
            <tr data-reservation={q.id}>
              <td class="pos">{q.position ?? '·'}</td>
              <td class="mono">{q.id}</td>
              <td>
                <span class="kind">{KIND_LABEL[q.kind] ?? q.kind}</span>
                <span class="prio">p{q.priority}</span>
                <div class="why">
                  {q.topology}
                  {q.suite ? ` · ${q.suite}` : ''}
                  {q.targetHost ? (
                    <>
                      {' · wants '}
                      <span class="target">{q.targetHost}</span>
                    </>
                  ) : null}
                </div>
              </td>
              <td>
                <PrLink q={q} />
                {q.headSha ? <div class="mono why">{q.headSha.slice(0, 7)}</div> : null}
              </td>
              <td class="starts">
                <Eta q={q} />
              </td>
              <td class="why">{q.reason ?? '—'}</td>
              <td>{age(q.ageS)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </>
  );
}

function LeaseEnd({ q, now }: { q: QueueItemView; now: number }) {
  if (!q.leaseExpiresAt) return <span class="why">—</span>;
  const inS = Math.round((Date.parse(q.leaseExpiresAt) - now) / 1000);
  return (
    <>
      <Clock iso={q.leaseExpiresAt} />
      <div class={inS < 600 ? 'eta-blocked' : 'why'}>{inS > 0 ? `in ${age(inS)}` : 'expired'}</div>
    </>
  );
}

/** Work holding hosts, with when each lease runs out and who holds it (by class). */
export function ActiveTable({ items, generatedAt }: { items: QueueItemView[]; generatedAt: string }) {
  if (items.length === 0) return <div class="empty">No work holds a host right now.</div>;
  const now = Date.parse(generatedAt);
  return (
    <table id="active">
      <thead>
        <tr>
          <th>request</th>
          <th>what</th>
          <th>state</th>
          <th>hosts</th>
          <th>lease ends</th>
          <th>PR / commit</th>
          <th>age</th>
        </tr>
      </thead>
      <tbody>
        {items.map((q) => (
          <tr data-reservation={q.id}>
            <td class="mono">{q.id}</td>
            <td>
              <span class="kind">{KIND_LABEL[q.kind] ?? q.kind}</span> <span class="why">· {q.topology}</span>
              <div class="why">held by {q.holderClass}</div>
            </td>
            <td>
              <span class={`pill s-${q.status === 'releasing' ? 'cleaning' : 'allocated'}`}>{q.status}</span>
              {q.reason ? <div class="why">{q.reason}</div> : null}
            </td>
            <td>
              {q.hosts.join(' + ') || '—'}
              {q.targetHost ? <div class="why">asked for {q.targetHost}</div> : null}
            </td>
            <td>
              <LeaseEnd q={q} now={now} />
            </td>
            <td>
              <PrLink q={q} />
              {q.headSha ? <div class="mono why">{q.headSha.slice(0, 7)}</div> : null}
            </td>
            <td>{age(q.ageS)}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
