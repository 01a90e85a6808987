import { HostResponse, RecoverResponse, ReservationResponse } from '../core/protocol/api.ts';
import { type CommandContext, json, needArg } from './command-context.ts';
import { EXIT, usageError } from './errors.ts';
import { progressLine } from './ops.ts';

/**
 * Operator commands: host adopt/unadopt/clear-quarantine, Deckard start, recover, emergency
 * terminate.
 */

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
