import { FleetResponse, HistoryResponse, QueueResponse } from '../core/protocol/api.ts';
import { type CommandContext, json, needArg } from './command-context.ts';
import { EXIT } from './errors.ts';
import { humanDuration, table } from './format.ts';
import { getReservation, listReservations } from './ops.ts';
import { reservationDetail, reservationRows } from './reservation-view.ts';

/**
 * The read-only commands: status, queue, fleet, history.
 */

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
