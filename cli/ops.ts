import {
  FleetResponse,
  type ReservationInfo,
  ReservationListResponse,
  ReservationResponse,
} from '../core/protocol/api.ts';
import type { ApiClient } from './client.ts';
import { CliError, EXIT } from './errors.ts';
import { dateTime, humanDuration } from './format.ts';

/**
 * Reservation workflows shared by the sparkctl commands and the MCP tools: request, follow until
 * usable, release and follow until the agent confirmed cleanup.
 */

export interface ReserveOptions {
  pair?: boolean | undefined;
  host?: string | undefined;
  ttlS?: number | undefined;
  /** A restore drill: lends the host's service only; no dev environment (ADR 0176). */
  drill?: boolean | undefined;
}

export async function createReservation(client: ApiClient, o: ReserveOptions): Promise<ReservationInfo> {
  const body = {
    topology: o.pair ? 'pair' : 'single',
    ...(o.host ? { host: o.host } : {}),
    ...(o.ttlS != null ? { ttlS: o.ttlS } : {}),
    ...(o.drill ? { drill: true } : {}),
  };
  try {
    return (await client.call('POST', '/api/v1/reservations', ReservationResponse, body)).reservation;
  } catch (e) {
    // the controller refuses a host it does not know; say which ones it does know
    if (!(e instanceof CliError) || !o.host || !/unknown host/.test(e.message)) throw e;
    const hosts = await client
      .call('GET', '/api/v1/fleet', FleetResponse)
      .then((f) => f.hosts.map((h) => h.id))
      .catch(() => null);
    if (!hosts?.length) throw e;
    throw new CliError(e.exitCode, `${e.message}: this fleet has ${hosts.join(', ')}`, e.code);
  }
}

/** A renewal and whether the controller capped it at the development maximum. */
export interface Renewal {
  reservation: ReservationInfo;
  /** The earliest new end of the active leases (ISO), null if none is active. */
  until: string | null;
  capped: boolean;
  /** Why it ends earlier than asked, in words (null when not capped). */
  note: string | null;
}

/**
 * Renews a development lease. The controller caps a renewal at its development maximum counted
 * from the grant without failing; this compares the end it granted with the end asked for and
 * says so (`asked` is how the caller wrote the length, e.g. "99h").
 */
export async function renewReservation(
  client: ApiClient,
  id: string,
  ttlS: number | undefined,
  asked?: string,
): Promise<Renewal> {
  const askedAt = Date.now();
  const r = await postAction(client, id, 'renew', ttlS != null ? { ttlS } : {});
  const active = r.leases.filter((l) => l.status === 'active');
  if (!active.length) return { reservation: r, until: null, capped: false, note: null };
  const first = active.reduce((a, b) => (Date.parse(b.expiresAt) < Date.parse(a.expiresAt) ? b : a));
  const wantedS = ttlS ?? r.ttlS;
  // a few seconds of slack for the round trip and clock skew
  const capped = wantedS != null && Date.parse(first.expiresAt) < askedAt + wantedS * 1000 - 5_000;
  const maxS = (Date.parse(first.expiresAt) - Date.parse(first.grantedAt)) / 1000;
  return {
    reservation: r,
    until: first.expiresAt,
    capped,
    note: capped
      ? `capped: you asked for ${asked ?? humanDuration(wantedS!)}, but a development lease holds at most ${humanDuration(maxS)} from its grant (${dateTime(first.grantedAt)}); release and reserve again for more`
      : null,
  };
}

export async function getReservation(client: ApiClient, id: string): Promise<ReservationInfo> {
  return (await client.call('GET', `/api/v1/reservations/${encodeURIComponent(id)}`, ReservationResponse))
    .reservation;
}

export async function listReservations(
  client: ApiClient,
  opts: { mine: boolean; status?: string },
): Promise<ReservationInfo[]> {
  const q = new URLSearchParams({ status: opts.status ?? 'open', ...(opts.mine ? { mine: '1' } : {}) });
  return (await client.call('GET', `/api/v1/reservations?${q}`, ReservationListResponse)).reservations;
}

export async function postAction(
  client: ApiClient,
  id: string,
  action: 'release' | 'cancel' | 'renew',
  body?: unknown,
): Promise<ReservationInfo> {
  return (
    await client.call(
      'POST',
      `/api/v1/reservations/${encodeURIComponent(id)}/${action}`,
      ReservationResponse,
      body ?? {},
    )
  ).reservation;
}

const ENDED = ['done', 'cancelled', 'superseded', 'failed'];

/** One line saying where a reservation stands, in words. */
export function progressLine(r: ReservationInfo): string {
  const hosts = r.leases.filter((l) => l.status !== 'released').map((l) => l.hostId);
  switch (r.status) {
    case 'queued': {
      const reason = r.reason?.replaceAll(`for ${r.id}`, 'for you') ?? null;
      // the estimate in words, e.g. "starts in ~12–20 min"
      const parts = [
        `${r.id} queued`,
        r.position != null ? `position ${r.position}` : null,
        r.eta?.text ?? null,
        reason,
      ];
      // hosts kept for this request, unless the admission reason already names them
      for (const w of r.waitingOn) {
        if (!reason?.includes(`${w.hostId} ${w.state}`)) parts.push(`${w.hostId} ${w.state} for you`);
      }
      return parts.filter(Boolean).join(' · ');
    }
    case 'allocated': {
      const lend = r.leases.filter((l) => l.lend && !l.prepared).map((l) => l.hostId);
      const waiting = r.leases.filter((l) => !l.prepared).map((l) => l.hostId);
      return `${r.id} allocated ${hosts.join(' + ')} · preparing ${waiting.join(' + ') || 'hosts'}${
        lend.length ? ` (lending the home service on ${lend.join(', ')}: drain, stop, verify GPU free)` : ''
      }`;
    }
    case 'preparing':
    case 'running':
      return `${r.id} ${r.status} on ${hosts.join(' + ')}`;
    case 'releasing': {
      const pending = r.leases.filter((l) => l.status !== 'released').map((l) => l.hostId);
      const done = r.leases.filter((l) => l.status === 'released').map((l) => l.hostId);
      return `${r.id} releasing · waiting for the agent to confirm cleanup on ${pending.join(', ') || '—'}${
        done.length ? ` · ${done.join(', ')} cleaned` : ''
      }`;
    }
    default: {
      // `cancelled (cancelled)` says nothing twice: the outcome is shown only where it adds to the status
      const outcome = r.outcome && r.outcome !== r.status ? ` (${r.outcome})` : '';
      return `${r.id} ${r.status}${outcome}${r.reason ? ` · ${r.reason}` : ''}`;
    }
  }
}

export interface FollowOptions {
  pollMs: number;
  onProgress(line: string, r: ReservationInfo): void;
  /** Aborting stops following (the caller decides what Ctrl-C means). */
  signal?: AbortSignal | undefined;
  timeoutMs?: number | undefined;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

/** Polls a reservation until `until(r)` holds; reports each change of its progress line. */
export async function follow(
  client: ApiClient,
  id: string,
  until: (r: ReservationInfo) => boolean,
  o: FollowOptions,
): Promise<ReservationInfo> {
  const deadline = o.timeoutMs ? Date.now() + o.timeoutMs : Number.POSITIVE_INFINITY;
  let last = '';
  for (;;) {
    const r = await getReservation(client, id);
    const line = progressLine(r);
    if (line !== last) {
      o.onProgress(line, r);
      last = line;
    }
    if (until(r) || o.signal?.aborted) return r;
    if (Date.now() > deadline) {
      throw new CliError(
        EXIT.timeout,
        `gave up waiting for ${id} after ${Math.round(o.timeoutMs! / 1000)}s: ${line}`,
      );
    }
    await sleep(o.pollMs, o.signal);
    if (o.signal?.aborted) return getReservation(client, id);
  }
}

/** Follows a new reservation until its hosts are usable; an ended reservation is an error. */
export async function waitUntilReady(
  client: ApiClient,
  id: string,
  o: FollowOptions,
): Promise<ReservationInfo> {
  const r = await follow(
    client,
    id,
    (x) => x.ready || ENDED.includes(x.status) || x.status === 'releasing',
    o,
  );
  if (!r.ready && !o.signal?.aborted) {
    throw new CliError(EXIT.failed, `${id} ended before it became usable: ${progressLine(r)}`);
  }
  return r;
}

/** Releases and follows until every host's agent confirmed termination and cleanup. */
export async function releaseAndWait(
  client: ApiClient,
  id: string,
  o: FollowOptions & { wait: boolean },
): Promise<ReservationInfo> {
  const r = await postAction(client, id, 'release');
  if (!o.wait) return r;
  return follow(client, id, (x) => ENDED.includes(x.status), o);
}

/**
 * How to reach each host of a ready development reservation: the dstack attach command
 * its agent reported, or — on a host whose executor runs no dev environment (`jit-runner`, `slurm`)
 * — that there is none to attach to: sparkctl never hands out SSH (agents must not automate it).
 */
export function attachLines(r: ReservationInfo): { hostId: string; attach: string | null; line: string }[] {
  const active = r.leases.filter((l) => l.status === 'active');
  // a pair's hosts report their environments one by one: one with an attach command means the
  // other's is still starting (the controller does not know each host's executor)
  const dstack = active.some((l) => l.attach);
  return active.map((l) => ({
    hostId: l.hostId,
    attach: l.attach ?? null,
    line: l.attach
      ? l.attach
      : dstack
        ? `the dev environment on ${l.hostId} is still starting: run \`sparkctl attach ${r.id}\` again shortly`
        : `no dev environment on ${l.hostId} (its executor runs none): the lease holds the host for you; log in with your own account, sparkctl does not hand out SSH`,
  }));
}

/** How to use a ready development reservation. */
export function attachText(r: ReservationInfo): string {
  const hosts = r.leases.filter((l) => l.status === 'active').map((l) => l.hostId);
  const until = r.leases.length ? dateTime(r.leases.map((l) => l.expiresAt).sort()[0]!) : '-';
  const lines = attachLines(r);
  return [
    `${r.id} is yours: ${hosts.join(' + ')} (${r.topology}), lease until ${until}.`,
    ...lines.map((a) => `  attach:   ${a.line}${lines.length > 1 ? `   (${a.hostId})` : ''}`),
    `  renew:    sparkctl renew ${r.id}`,
    `  release:  sparkctl release ${r.id}   (frees the host once the agent confirms cleanup)`,
  ].join('\n');
}
