import { DeliveryList, DeliveryResponse, type DeliveryView } from '../core/protocol/deliveries.ts';
import type { CommandContext } from './commands.ts';
import { EXIT, usageError } from './errors.ts';
import { dateTime, humanDuration, table } from './format.ts';

const ID = /^[0-9A-Za-z-]{1,100}$/;

/**
 * `sparkctl deliveries [--json]`: the webhook inbox (waiting and parked deliveries first, then
 * the latest processed ones); `sparkctl deliveries retry ID`: retry a parked delivery (needs an
 * operate token; audited as `webhook.retried`).
 */
export async function cmdDeliveries({ client, io, flags, args }: CommandContext): Promise<number> {
  if (args[0] === 'retry') {
    const id = args[1];
    if (!id || !ID.test(id))
      throw usageError('usage: sparkctl deliveries retry ID (the X-GitHub-Delivery id)');
    const res = await client.call(
      'POST',
      `/api/v1/deliveries/${encodeURIComponent(id)}/retry`,
      DeliveryResponse,
      {},
    );
    if (flags.json) io.out(JSON.stringify(res, null, 2));
    else io.out(`delivery ${res.delivery.id} (${res.delivery.event}) queued for processing again`);
    return EXIT.ok;
  }
  if (args.length)
    throw usageError(`unknown deliveries command '${args[0]}': usage: sparkctl deliveries [retry ID]`);
  const res = await client.call('GET', '/api/v1/deliveries', DeliveryList);
  if (flags.json) {
    io.out(JSON.stringify(res, null, 2));
    return EXIT.ok;
  }
  const { inbox } = res;
  io.out(
    `inbox: ${inbox.pending} waiting${inbox.pending ? ` (oldest ${humanDuration(Math.round(inbox.oldestPendingAgeMs / 1000))})` : ''}, ${inbox.parked} parked`,
  );
  if (res.deliveries.length) {
    io.out(
      table(
        ['ID', 'EVENT', 'STATE', 'RECEIVED', 'ATTEMPTS', 'RESULT'],
        res.deliveries.map((d) => [
          d.id,
          d.action ? `${d.event}.${d.action}` : d.event,
          d.state,
          dateTime(d.receivedAt),
          d.attempts,
          describe(d),
        ]),
      ),
    );
  }
  if (inbox.parked) io.out('retry a parked delivery with: sparkctl deliveries retry ID');
  return EXIT.ok;
}

function describe(d: DeliveryView): string {
  if (d.state === 'parked') return `parked: ${d.lastError ?? d.result}`;
  if (d.state === 'pending')
    return d.lastError ? `retry at ${dateTime(d.nextAttemptAt ?? d.receivedAt)}: ${d.lastError}` : 'waiting';
  return d.result;
}
