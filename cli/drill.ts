import { FleetResponse, type ReservationInfo } from '../core/protocol/api.ts';
import type { ApiClient } from './client.ts';
import type { CommandContext } from './commands.ts';
import { CliError, EXIT, usageError } from './errors.ts';
import { clock, parseDuration } from './format.ts';
import { createReservation, follow, postAction, progressLine } from './ops.ts';

/**
 * `sparkctl deckard drill [--host spark-1]`: a restore drill through the normal path (the rollout
 * readiness check "deckard" wants one, docs/adr/0165-enable-is-a-gate.md). It asks for a short
 * development lease on the home-service host, so the agent drains the service, stops it and
 * verifies through the GPU that it is gone (docs/architecture.md rule 5); once the host is prepared it
 * releases the lease, and follows the host until the agent recreated the service and its
 * model-ready check passed (the host serves again) or the restore failed (quarantined). The
 * ledger keeps the lend and the restore, which is what `doctor github` checks.
 */

/** The drill's lease: long enough for a slow drain, short enough that a forgotten one ends soon. */
const DRILL_TTL_S = 900;
const ENDED = ['done', 'failed', 'cancelled', 'superseded'];

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}

async function hostOf(client: ApiClient, id: string) {
  const f = await client.call('GET', '/api/v1/fleet', FleetResponse);
  const h = f.hosts.find((x) => x.id === id);
  if (!h) throw new CliError(EXIT.notFound, `no host ${id} (hosts: ${f.hosts.map((x) => x.id).join(', ')})`);
  return h;
}

export async function cmdDeckardDrill({ client, settings, io, flags }: CommandContext): Promise<number> {
  const timeoutS = flags.timeout != null ? parseDuration(flags.timeout) : 30 * 60;
  if (timeoutS == null || timeoutS <= 0)
    throw usageError(`invalid --timeout '${flags.timeout}': use e.g. 30m, 1h or seconds`);
  const deadline = Date.now() + timeoutS * 1000;
  const fleet = await client.call('GET', '/api/v1/fleet', FleetResponse);
  const homes = fleet.hosts.filter((h) => h.homeService);
  let hostId = flags.host;
  if (!hostId) {
    if (homes.length !== 1)
      throw usageError(
        homes.length
          ? `several hosts serve a home service (${homes.map((h) => h.id).join(', ')}): name one with --host`
          : 'no host serves a home service: there is nothing to drill',
      );
    hostId = homes[0]!.id;
  }
  const host = await hostOf(client, hostId);
  if (!host.homeService)
    throw usageError(
      `${hostId} serves no home service: there is nothing to drill (hosts that do: ${homes.map((h) => h.id).join(', ') || 'none'})`,
    );
  const svc = host.homeService;
  if (host.state !== 'service')
    throw new CliError(
      EXIT.conflict,
      `${hostId} is ${host.state}, not serving ${svc}: a drill lends a serving ${svc}; ${host.state === 'quarantined' ? `check it and clear it first (sparkctl host clear-quarantine ${hostId})` : `start it first (sparkctl deckard start --host ${hostId})`} and drill once it serves`,
    );

  const log = (line: string) => (flags.json ? io.err : io.out)(`[${clock(new Date())}] ${line}`);
  const ctrl = new AbortController();
  const off = io.onInterrupt(() => ctrl.abort());
  let r: ReservationInfo = await createReservation(client, { host: hostId, ttlS: DRILL_TTL_S, drill: true });
  log(`drill ${r.id}: lending ${svc} on ${hostId} through a development lease`);
  const remaining = () => Math.max(1, deadline - Date.now());
  const opts = {
    pollMs: settings.pollMs,
    signal: ctrl.signal,
    onProgress: (l: string) => log(`${r.id} ${l}`),
  };
  try {
    r = await follow(
      client,
      r.id,
      (x) =>
        ENDED.includes(x.status) ||
        x.status === 'releasing' ||
        (x.leases.length > 0 && x.leases.every((l) => l.prepared)),
      { ...opts, timeoutMs: remaining() },
    );
    if (ctrl.signal.aborted) return await interrupted(client, io, r);
    if (!r.leases.length || !r.leases.every((l) => l.prepared))
      throw new CliError(EXIT.failed, `drill ${r.id} ended before ${hostId} was lent: ${progressLine(r)}`);
    const lent = r.leases.every((l) => l.lend);
    log(
      lent
        ? `${hostId} lent: ${svc} drained, stopped, GPU verified free; releasing`
        : `${hostId} was granted without lending ${svc} (it was not serving then); releasing`,
    );
    await postAction(client, r.id, 'release');
    r = await follow(client, r.id, (x) => ENDED.includes(x.status), { ...opts, timeoutMs: remaining() });
    if (ctrl.signal.aborted) return await interrupted(client, io, r);
    if (!lent)
      throw new CliError(
        EXIT.failed,
        `drill ${r.id} did not lend ${svc}: nothing was restored; run it again once ${hostId} serves`,
      );
    log(`${r.id} released; ${hostId} restoring ${svc}: waiting for its model-ready check`);
    let last = '';
    for (;;) {
      const h = await hostOf(client, hostId);
      if (h.state !== last) {
        if (last) log(`${hostId} ${h.state}${h.note ? ` (${h.note})` : ''}`);
        last = h.state;
      }
      if (h.state === 'service') break;
      if (h.state === 'quarantined')
        throw new CliError(
          EXIT.failed,
          `restore of ${svc} on ${hostId} failed after drill ${r.id}${h.note ? `: ${h.note}` : ''}; check ${svc}, then sparkctl host clear-quarantine ${hostId} and drill again`,
        );
      if (Date.now() > deadline)
        throw new CliError(
          EXIT.timeout,
          `gave up waiting for ${svc} on ${hostId} after ${timeoutS}s: the host is ${h.state}; follow it with sparkctl fleet`,
        );
      await sleep(settings.pollMs, ctrl.signal);
      if (ctrl.signal.aborted) {
        io.err(`interrupted: ${hostId} keeps restoring ${svc}; follow it with sparkctl fleet`);
        return EXIT.interrupted;
      }
    }
  } finally {
    off();
  }
  if (flags.json)
    io.out(JSON.stringify({ host: hostId, service: svc, reservation: r.id, restored: true }, null, 2));
  else
    io.out(
      `restore verified on ${hostId}: ${svc} lent to ${r.id}, released and restored; its model-ready check passed (sparkctl doctor github shows it)`,
    );
  return EXIT.ok;
}

/** Ctrl-C: a queued drill is withdrawn, a granted one released (it is the drill's own lease). */
async function interrupted(client: ApiClient, io: CommandContext['io'], r: ReservationInfo): Promise<number> {
  if (r.status === 'queued') {
    await postAction(client, r.id, 'cancel').catch(() => undefined);
    io.err(`interrupted: drill ${r.id} cancelled (it was still queued)`);
  } else if (!ENDED.includes(r.status) && r.status !== 'releasing') {
    await postAction(client, r.id, 'release').catch(() => undefined);
    io.err(`interrupted: drill ${r.id} released; ${r.leases[0]?.hostId ?? 'the host'} restores its service`);
  } else io.err(`interrupted: drill ${r.id} is ${r.status}`);
  return EXIT.interrupted;
}
