import {
  isReleasableStatus,
  isTerminalStatus,
  type ReservationKind,
  type ReservationStatus,
  type Suite,
  type Topology,
} from '../../core/model.ts';
import { ATTACH_COMMAND_PATTERN } from '../../core/protocol/agent.ts';
import type { ReservationInfo } from '../../core/protocol/api.ts';
import { isoTime } from '../../core/time.ts';
import type { ApiPrincipal } from '../auth/tokens.ts';
import type { LeaseRow, Ledger, ReservationRow } from '../ledger/ledger.ts';
import { githubWebBase, type QueueView, redactText, type ViewsMemo } from '../views.ts';

/** The dev environment's attach command an agent reported (`lease_active.attach`), or null. */
function attachOf(evidenceJson: string | null): string | null {
  if (!evidenceJson) return null;
  try {
    const a = (JSON.parse(evidenceJson) as { develop?: { attach?: unknown } }).develop?.attach;
    return typeof a === 'string' && ATTACH_COMMAND_PATTERN.test(a) ? a : null;
  } catch {
    return null;
  }
}

/** The API token that created a reservation (sparkctl / MCP), from its meta. */
export function ownerTokenOf(r: ReservationRow): string | null {
  if (!r.metaJson) return null;
  try {
    const meta = JSON.parse(r.metaJson) as { tokenId?: unknown };
    return typeof meta.tokenId === 'string' ? meta.tokenId : null;
  } catch {
    return null;
  }
}

/** `develop` tokens act on their own reservations; `operate` on any. */
export function mayAct(p: ApiPrincipal, r: ReservationRow): boolean {
  return p.scopes.includes('operate') || ownerTokenOf(r) === p.tokenId;
}

/** Live wait details (position, reason, draining/held hosts) computed like the dashboard does. */
export interface LiveQueue {
  queue: QueueView;
  keptFor: Map<string, { hostId: string; state: string }[]>;
  /** Wait reasons as operators read them (the public queue names an aliased repository by its alias only). */
  reasons: ReadonlyMap<string, string | null>;
}

export async function loadLiveQueue(views: ViewsMemo): Promise<LiveQueue> {
  const { fleet, queue, operatorReasons } = await views.get();
  const keptFor = new Map<string, { hostId: string; state: string }[]>();
  for (const h of fleet.hosts) {
    if (!h.keptFor) continue;
    keptFor.set(h.keptFor, [...(keptFor.get(h.keptFor) ?? []), { hostId: h.id, state: h.state }]);
  }
  return { queue, keptFor, reasons: operatorReasons };
}

/** Renders one reservation for its requester/operators: leases without fencing tokens. */
export function describeReservation(
  ledger: Ledger,
  r: ReservationRow,
  leases: LeaseRow[],
  principal: ApiPrincipal,
  live: LiveQueue | null,
): ReservationInfo {
  const queued = live?.queue.queued.find((q) => q.id === r.id);
  const web = githubWebBase(ledger.config.github.apiUrl);
  const repoOk = r.repo != null && /^[A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+$/.test(r.repo);
  const status = r.status as ReservationStatus;
  const binding = leases.filter((l) => l.status !== 'released');
  const ready =
    isReleasableStatus(status) &&
    binding.length > 0 &&
    binding.every((l) => l.status === 'active') &&
    (status !== 'allocated' || binding.every((l) => l.preparedAt != null));
  return {
    id: r.id,
    kind: r.kind as ReservationKind,
    priority: r.priority,
    topology: r.topology as Topology,
    status,
    position: status === 'queued' ? (queued?.position ?? r.position ?? null) : null,
    reason:
      status === 'queued'
        ? (live?.reasons.get(r.id) ?? (redactText(r.reason) || null))
        : redactText(r.reason) || null,
    // how the work ended (or is ending); the queue's wait code is a separate column, never this
    outcome: status === 'releasing' || isTerminalStatus(status) ? r.outcome : null,
    targetHost: r.targetHost,
    requester: redactText(r.requester, 80),
    mine: ownerTokenOf(r) === principal.tokenId,
    repo: repoOk ? r.repo : null,
    pr: r.pr,
    prUrl: repoOk && r.pr != null ? `${web}/${r.repo}/pull/${r.pr}` : null,
    headSha: r.headSha && /^[0-9a-f]{7,64}$/i.test(r.headSha) ? r.headSha : null,
    suite: r.suite as Suite | null,
    ttlS: r.ttlS,
    createdAt: isoTime(r.createdAt),
    grantedAt: isoTime(r.grantedAt),
    endedAt: isoTime(r.endedAt),
    queueDeadline: isoTime(r.queueDeadline),
    waitingOn: status === 'queued' ? (live?.keptFor.get(r.id) ?? []) : [],
    leases: leases.map((l) => ({
      hostId: l.hostId,
      status: l.status as ReservationInfo['leases'][number]['status'],
      lend: l.lend,
      grantedAt: isoTime(l.grantedAt),
      expiresAt: isoTime(l.expiresAt),
      releasedAt: isoTime(l.releasedAt),
      prepared: l.preparedAt != null,
      runnerStarted: l.runnerStartedAt != null,
      attach: attachOf(l.evidenceJson),
    })),
    ready,
    eta: status === 'queued' ? (queued?.eta ?? null) : null,
  };
}

/** Loads reservations with their leases (one query each). */
export function loadReservations(
  ledger: Ledger,
  filter: { ids?: string[]; statuses?: readonly ReservationStatus[]; limit?: number },
): Promise<{ row: ReservationRow; leases: LeaseRow[] }[]> {
  return ledger.api.loadReservations(filter);
}

export async function loadOne(ledger: Ledger, id: string) {
  const row = await ledger.getReservation(undefined, id);
  if (!row) return null;
  const leases = await ledger.leasesOf(undefined, id);
  return { row, leases };
}
