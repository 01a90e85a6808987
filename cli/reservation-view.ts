import type { ReservationInfo } from '../core/protocol/api.ts';
import { dateTime, humanDuration, table } from './format.ts';
import { attachText, progressLine } from './ops.ts';

/**
 * How reservations print: the table of many, the detail of one, when their leases expire.
 */

export function expiresIn(r: ReservationInfo): string {
  const active = r.leases.filter((l) => l.status === 'active');
  if (!active.length) return '-';
  const at = Math.min(...active.map((l) => Date.parse(l.expiresAt)));
  return `${dateTime(at)} (in ${humanDuration((at - Date.now()) / 1000)})`;
}

export function reservationRows(list: ReservationInfo[]) {
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

export function reservationDetail(r: ReservationInfo): string {
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
