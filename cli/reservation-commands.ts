import type { ApiClient } from './client.ts';
import { type CommandContext, durationFlag, json, needArg } from './command-context.ts';
import { CliError, EXIT } from './errors.ts';
import { clock } from './format.ts';
import {
  attachLines,
  attachText,
  createReservation,
  getReservation,
  postAction,
  progressLine,
  releaseAndWait,
  renewReservation,
  waitUntilReady,
} from './ops.ts';
import { expiresIn } from './reservation-view.ts';

/**
 * A reservation's life from the CLI: reserve, attach, renew, release, cancel.
 */

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
