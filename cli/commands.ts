import { z } from 'zod';
import {
  FleetResponse,
  HistoryResponse,
  HostResponse,
  QueueResponse,
  RecoverResponse,
  type ReservationInfo,
  ReservationResponse,
  TokenCreated,
  TokenList,
  WhoAmI,
} from '../core/protocol/api.ts';
import type { ApiClient } from './client.ts';
import { CliError, EXIT, usageError } from './errors.ts';
import { clock, dateTime, humanDuration, parseDuration, table } from './format.ts';
import {
  attachLines,
  attachText,
  createReservation,
  getReservation,
  listReservations,
  postAction,
  progressLine,
  releaseAndWait,
  renewReservation,
  waitUntilReady,
} from './ops.ts';
import type { CliSettings } from './settings.ts';

/** What a command may use: the API client, output streams and Ctrl-C. */
export interface CommandIo {
  out(text: string): void;
  err(text: string): void;
  /** Registers a Ctrl-C handler for the duration of a command; returns the unregister function. */
  onInterrupt(fn: () => void): () => void;
}

export interface Flags {
  json?: boolean | undefined;
  pair?: boolean | undefined;
  host?: string | undefined;
  ttl?: string | undefined;
  wait?: boolean | undefined;
  'no-wait'?: boolean | undefined;
  timeout?: string | undefined;
  all?: boolean | undefined;
  name?: string | undefined;
  scopes?: string | undefined;
  /** `token create --expires 30d`: the token stops working after this long. */
  expires?: string | undefined;
  reason?: string | undefined;
  ledger?: string | undefined;
  /** `repo enable --override hosts,deckard`: failing readiness checks to pass over (recorded). */
  override?: string | undefined;
}

export interface CommandContext {
  client: ApiClient;
  settings: CliSettings;
  io: CommandIo;
  flags: Flags;
  args: string[];
}

const json = (io: CommandIo, value: unknown) => io.out(JSON.stringify(value, null, 2));

function needArg(args: string[], i: number, what: string, usage: string): string {
  const v = args[i];
  if (!v) throw usageError(`missing ${what}: usage: sparkctl ${usage}`);
  return v;
}

function durationFlag(text: string | undefined, flag: string): number | undefined {
  if (text == null) return undefined;
  const s = parseDuration(text);
  if (s == null || s <= 0)
    throw usageError(`invalid ${flag} '${text}': use e.g. 90s, 30m, 4h, 1h30m or seconds`);
  return s;
}

function expiresIn(r: ReservationInfo): string {
  const active = r.leases.filter((l) => l.status === 'active');
  if (!active.length) return '-';
  const at = Math.min(...active.map((l) => Date.parse(l.expiresAt)));
  return `${dateTime(at)} (in ${humanDuration((at - Date.now()) / 1000)})`;
}

function reservationRows(list: ReservationInfo[]) {
  return table(
    ['ID', 'KIND', 'TOPOLOGY', 'STATUS', 'POS', 'HOSTS', 'EXPIRES', 'WHY / OUTCOME'],
    list.map((r) => [
      r.id,
      r.kind,
      r.topology,
      r.status,
      r.position,
      r.leases
        .filter((l) => l.status !== 'released')
        .map((l) => l.hostId)
        .join('+'),
      expiresIn(r),
      r.status === 'queued' ? r.reason : r.outcome,
    ]),
  );
}

function reservationDetail(r: ReservationInfo): string {
  const lines = [
    `${r.id}  ${r.kind} (priority ${r.priority}) · ${r.topology}${r.targetHost ? ` · wants ${r.targetHost}` : ''}`,
    `  status:    ${progressLine(r)}`,
    `  requester: ${r.requester}${r.mine ? ' (you)' : ''}`,
    `  created:   ${r.createdAt}${r.grantedAt ? ` · granted ${r.grantedAt}` : ''}${r.endedAt ? ` · ended ${r.endedAt}` : ''}`,
  ];
  if (r.prUrl) lines.push(`  PR:        ${r.prUrl}${r.headSha ? ` @ ${r.headSha.slice(0, 12)}` : ''}`);
  if (r.leases.length) {
    lines.push('  leases:');
    for (const l of r.leases) {
      const steps = [
        l.lend ? 'lends home service' : null,
        l.prepared ? 'prepared' : null,
        l.runnerStarted ? 'runner started' : null,
      ]
        .filter(Boolean)
        .join(', ');
      lines.push(`    ${l.hostId}: ${l.status}, expires ${l.expiresAt}${steps ? ` (${steps})` : ''}`);
    }
  }
  if (r.ready && r.kind === 'development') lines.push('', attachText(r));
  return lines.join('\n');
}

// ---------------------------------------------------------------- reservations

export async function cmdReserve({ client, settings, io, flags }: CommandContext): Promise<number> {
  const ttlS = durationFlag(flags.ttl, '--ttl');
  const timeoutMs = (durationFlag(flags.timeout, '--timeout') ?? 0) * 1000 || undefined;
  let r = await createReservation(client, { pair: flags.pair, host: flags.host, ttlS });
  if (!flags.wait) {
    if (flags.json) json(io, { reservation: r });
    else {
      io.out(progressLine(r));
      io.out(
        r.ready ? attachText(r) : `follow it with: sparkctl status ${r.id}  (or reserve --wait next time)`,
      );
    }
    return EXIT.ok;
  }
  const progress = (line: string) => (flags.json ? io.err : io.out)(`[${clock(new Date())}] ${line}`);
  const ctrl = new AbortController();
  const off = io.onInterrupt(() => ctrl.abort());
  try {
    r = await waitUntilReady(client, r.id, {
      pollMs: settings.pollMs,
      onProgress: progress,
      signal: ctrl.signal,
      timeoutMs,
    });
  } catch (e) {
    if (e instanceof CliError && e.exitCode === EXIT.timeout) throw await stillThere(client, r.id, e);
    throw e;
  } finally {
    off();
  }
  if (ctrl.signal.aborted && !r.ready) {
    // Ctrl-C: a queued request is withdrawn; granted work is never dropped silently
    if (r.status === 'queued') {
      try {
        const c = await postAction(client, r.id, 'cancel');
        io.err(`interrupted: cancelled ${c.id} (it was still queued)`);
      } catch (e) {
        if (!(e instanceof CliError) || e.exitCode !== EXIT.conflict) throw e;
        io.err(
          `interrupted: ${r.id} was granted meanwhile and is kept; free it with: sparkctl release ${r.id}`,
        );
      }
    } else {
      io.err(
        `interrupted: ${r.id} is ${r.status} and keeps its hosts; free it with: sparkctl release ${r.id}`,
      );
    }
    return EXIT.interrupted;
  }
  if (flags.json) json(io, { reservation: r });
  else io.out(attachText(r));
  return EXIT.ok;
}

/**
 * `--timeout` ran out: giving up waiting changes nothing in the queue, so say where the request
 * stands and how to withdraw or free it.
 */
async function stillThere(client: ApiClient, id: string, timedOut: CliError): Promise<CliError> {
  const r = await getReservation(client, id).catch(() => null);
  const next =
    r == null
      ? `check it with: sparkctl status ${id}`
      : r.status === 'queued'
        ? `${id} is still queued${r.position != null ? ` (position ${r.position})` : ''} and stays in the queue: follow it with \`sparkctl status ${id}\`, withdraw it with \`sparkctl cancel ${id}\``
        : `${id} is ${r.status} and keeps its hosts: follow it with \`sparkctl status ${id}\`, free them with \`sparkctl release ${id}\``;
  return new CliError(EXIT.timeout, `${timedOut.message}; ${next}`, timedOut.code);
}

/**
 * `sparkctl attach r-N`: the command(s) that attach to a ready development reservation's dstack
 * environment, one line per host (so `$(sparkctl attach r-12)` runs it).
 */
export async function cmdAttach({ client, io, flags, args }: CommandContext): Promise<number> {
  const id = args[0]!;
  const r = await getReservation(client, id);
  if (r.kind !== 'development') {
    throw new CliError(
      EXIT.conflict,
      `${id} is a ${r.kind} reservation; only development leases are attached to`,
    );
  }
  if (!r.ready) {
    throw new CliError(
      EXIT.conflict,
      `${id} is not usable yet: ${progressLine(r)}; wait for it with: sparkctl status ${id}`,
    );
  }
  const lines = attachLines(r);
  if (flags.json) {
    json(io, { reservation: r.id, attach: lines.map(({ hostId, attach }) => ({ hostId, attach })) });
    return EXIT.ok;
  }
  const missing = lines.filter((a) => !a.attach);
  for (const a of lines) if (a.attach) io.out(a.attach);
  for (const a of missing) io.err(a.line);
  return missing.length ? EXIT.failed : EXIT.ok;
}

export async function cmdStatus({ client, io, flags, args }: CommandContext): Promise<number> {
  const id = args[0];
  if (id) {
    const r = await getReservation(client, id);
    if (flags.json) json(io, { reservation: r });
    else io.out(reservationDetail(r));
    return EXIT.ok;
  }
  const list = await listReservations(client, { mine: !flags.all });
  if (flags.json) json(io, { reservations: list });
  else if (list.length === 0)
    io.out(flags.all ? 'no open reservations' : "you have no open reservations (--all shows everyone's)");
  else io.out(reservationRows(list));
  return EXIT.ok;
}

export async function cmdQueue({ client, io, flags }: CommandContext): Promise<number> {
  const q = await client.call('GET', '/api/v1/queue', QueueResponse);
  if (flags.json) {
    json(io, q);
    return EXIT.ok;
  }
  const pr = (x: (typeof q.queued)[number]) => (x.repo && x.pr != null ? `${x.repo}#${x.pr}` : x.repo);
  io.out(
    q.queued.length
      ? table(
          ['POS', 'ID', 'KIND', 'PRIO', 'TOPOLOGY', 'PR', 'WAITING', 'STARTS', 'WHY'],
          q.queued.map((x) => [
            x.position,
            x.id,
            x.kind,
            x.priority,
            x.topology,
            pr(x),
            humanDuration(x.ageS),
            x.eta?.text.replace(/^starts in /, 'in ') ?? '',
            x.reason,
          ]),
        )
      : 'queue empty',
  );
  if (q.active.length) {
    io.out('');
    io.out(
      table(
        ['ACTIVE', 'KIND', 'TOPOLOGY', 'STATUS', 'HOSTS', 'PR', 'AGE'],
        q.active.map((x) => [
          x.id,
          x.kind,
          x.topology,
          x.status,
          x.hosts.join('+'),
          pr(x),
          humanDuration(x.ageS),
        ]),
      ),
    );
  }
  return EXIT.ok;
}

export async function cmdFleet({ client, io, flags }: CommandContext): Promise<number> {
  const f = await client.call('GET', '/api/v1/fleet', FleetResponse);
  if (flags.json) {
    json(io, f);
    return EXIT.ok;
  }
  io.out(
    table(
      ['HOST', 'STATE', 'ADOPTED', 'SERVICE', 'WORK', 'HEARTBEAT', 'NOTE'],
      f.hosts.map((h) => [
        h.id,
        h.state,
        h.managed ? 'yes' : 'no',
        h.homeService ? `${h.homeService}: ${h.serviceHealth}` : null,
        h.reservation ? `${h.reservation.id} ${h.reservation.kind}/${h.reservation.topology}` : null,
        h.lastHeartbeatAgeS == null ? 'never' : `${humanDuration(h.lastHeartbeatAgeS)} ago`,
        h.keptFor ? `${h.state} for ${h.keptFor}` : h.note,
      ]),
    ),
  );
  io.out(f.managed ? '\nfleet managed: every host adopted and heartbeating' : '\nfleet not fully managed');
  return EXIT.ok;
}

export async function cmdHistory({ client, io, flags, args }: CommandContext): Promise<number> {
  const id = needArg(args, 0, 'reservation id', 'history ID');
  const h = await client.call(
    'GET',
    `/api/v1/reservations/${encodeURIComponent(id)}/history`,
    HistoryResponse,
  );
  if (flags.json) json(io, h);
  else
    io.out(
      table(
        ['TIME', 'SUBJECT', 'EVENT', 'CHANGE', 'CAUSE', 'ACTOR'],
        h.events.map((e) => [
          e.at.replace('T', ' ').slice(0, 19),
          e.subjectId,
          e.type,
          e.fromState || e.toState ? `${e.fromState ?? '∅'} → ${e.toState ?? '∅'}` : null,
          e.cause,
          e.actor,
        ]),
      ),
    );
  return EXIT.ok;
}

export async function cmdRenew({ client, io, flags, args }: CommandContext): Promise<number> {
  const id = needArg(args, 0, 'reservation id', 'renew ID [--ttl 4h]');
  const ttlS = durationFlag(flags.ttl, '--ttl');
  const { reservation: r, note } = await renewReservation(client, id, ttlS, flags.ttl);
  if (flags.json) {
    json(io, { reservation: r });
    if (note) io.err(`sparkctl: ${note}`);
  } else {
    io.out(
      `renewed ${r.id}: ${r.leases
        .filter((l) => l.status === 'active')
        .map((l) => l.hostId)
        .join(' + ')} until ${expiresIn(r)}`,
    );
    if (note) io.out(note);
  }
  return EXIT.ok;
}

export async function cmdRelease({ client, settings, io, flags, args }: CommandContext): Promise<number> {
  const id = needArg(args, 0, 'reservation id', 'release ID [--no-wait] [--timeout 10m]');
  const timeoutMs = (durationFlag(flags.timeout, '--timeout') ?? 0) * 1000 || undefined;
  const progress = (line: string) => (flags.json ? io.err : io.out)(`[${clock(new Date())}] ${line}`);
  const r = await releaseAndWait(client, id, {
    wait: !flags['no-wait'],
    pollMs: settings.pollMs,
    onProgress: progress,
    timeoutMs,
  });
  if (flags.json) json(io, { reservation: r });
  else if (flags['no-wait']) io.out(`${progressLine(r)}\nthe host is freed when its agent confirms cleanup`);
  else
    io.out(
      `${r.id} ${r.status}: termination and cleanup confirmed on ${r.leases.map((l) => l.hostId).join(', ')}`,
    );
  return r.status === 'failed' ? EXIT.failed : EXIT.ok;
}

export async function cmdCancel({ client, io, flags, args }: CommandContext): Promise<number> {
  const id = needArg(args, 0, 'reservation id', 'cancel ID');
  const r = await postAction(client, id, 'cancel');
  if (flags.json) json(io, { reservation: r });
  else io.out(`cancelled ${r.id}`);
  return EXIT.ok;
}

// ---------------------------------------------------------------- operator

export async function cmdHost({ client, io, flags, args }: CommandContext): Promise<number> {
  const usage = 'host adopt|unadopt|clear-quarantine HOST';
  const action = needArg(args, 0, 'action', usage);
  const host = needArg(args, 1, 'host id', usage);
  if (!['adopt', 'unadopt', 'clear-quarantine'].includes(action))
    throw usageError(`unknown host action '${action}': usage: sparkctl ${usage}`);
  const res = await client.call(
    'POST',
    `/api/v1/hosts/${encodeURIComponent(host)}/${action}`,
    HostResponse,
    {},
  );
  if (flags.json) json(io, res);
  else
    io.out(
      action === 'clear-quarantine'
        ? `${res.host.id} quarantine cleared; now ${res.host.phase}`
        : `${res.host.id} ${res.host.managed ? 'adopted: schedulable once it heartbeats' : 'unadopted: no new work is admitted to it'}`,
    );
  return EXIT.ok;
}

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

export async function cmdDeckard({ client, io, flags, args }: CommandContext): Promise<number> {
  if (args[0] !== 'start') throw usageError('usage: sparkctl deckard start [--host spark-1]');
  const res = await client.call(
    'POST',
    '/api/v1/deckard/start',
    ReservationResponse,
    flags.host ? { host: flags.host } : {},
  );
  if (flags.json) json(io, res);
  else
    io.out(
      `Deckard start requested as ${res.reservation.id} (priority ${res.reservation.priority}): ${progressLine(res.reservation)}`,
    );
  return EXIT.ok;
}

export async function cmdRecover({ client, io, flags, args }: CommandContext): Promise<number> {
  const id = needArg(args, 0, 'reservation id', 'recover ID');
  const res = await client.call(
    'POST',
    `/api/v1/reservations/${encodeURIComponent(id)}/recover`,
    RecoverResponse,
    {},
  );
  if (flags.json) json(io, res);
  else io.out(`${res.action}: ${res.message}`);
  return EXIT.ok;
}

export async function cmdEmergency({ client, io, flags, args }: CommandContext): Promise<number> {
  const usage = 'emergency terminate ID --reason "why"';
  if (args[0] !== 'terminate') throw usageError(`usage: sparkctl ${usage}`);
  const id = needArg(args, 1, 'reservation id', usage);
  if (!flags.reason) throw usageError(`emergency terminate needs --reason: usage: sparkctl ${usage}`);
  const res = await client.call(
    'POST',
    `/api/v1/reservations/${encodeURIComponent(id)}/terminate`,
    ReservationResponse,
    {
      reason: flags.reason,
    },
  );
  if (flags.json) json(io, res);
  else io.out(`emergency terminate recorded: ${progressLine(res.reservation)}`);
  return EXIT.ok;
}

/** The GitHub part's answer to `POST /api/v1/repositories/:owner/:name/enable`. */
export async function cmdWhoami({ client, io, flags }: CommandContext): Promise<number> {
  const w = await client.call('GET', '/api/v1/whoami', WhoAmI);
  if (flags.json) json(io, w);
  else io.out(`${w.name} (${w.tokenId}) scopes: ${w.scopes.join(', ')} at ${client.url}`);
  return EXIT.ok;
}
