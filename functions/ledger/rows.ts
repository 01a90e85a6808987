import type {
  HostFacts,
  HostPhase,
  HostRecord,
  LeaseRecord,
  LeaseStatus,
  ReservationKind,
  ReservationRecord,
  ReservationStatus,
  Suite,
  Topology,
} from '../../core/model.ts';
import type * as t from './schema.ts';

/**
 * Row types of the ledger tables as the rest of the controller sees them. Code outside
 * `functions/ledger/` uses these names, never the schema (one writer).
 */

export type ReservationRow = typeof t.reservations.$inferSelect;
export type LeaseRow = typeof t.leases.$inferSelect;
export type HostRow = typeof t.hosts.$inferSelect;
export type EventRow = typeof t.events.$inferSelect;
export type OutboxRow = typeof t.outbox.$inferSelect;
export type HandoffRow = typeof t.jitHandoffs.$inferSelect;
export type RepositoryRow = typeof t.repositories.$inferSelect;
export type ApiTokenRow = typeof t.apiTokens.$inferSelect;
export type AgentTokenRow = typeof t.agentTokens.$inferSelect;
export type DeliveryRow = typeof t.webhookDeliveries.$inferSelect;

// Parsed facts by their JSON text: every admission pass and view reads every host, and a host's
// facts change only with a heartbeat that reports something new. Shared objects, so frozen.
const parsedFacts = new Map<string, HostFacts | null>();

function parseFacts(json: string | null): HostFacts | null {
  if (!json) return null;
  const hit = parsedFacts.get(json);
  if (hit !== undefined) return hit;
  let facts: HostFacts | null;
  try {
    facts = deepFreeze(JSON.parse(json) as HostFacts);
  } catch {
    facts = null;
  }
  if (parsedFacts.size >= 1024) parsedFacts.clear();
  parsedFacts.set(json, facts);
  return facts;
}

function deepFreeze<T>(v: T): T {
  if (typeof v === 'object' && v !== null && !Object.isFrozen(v)) {
    for (const x of Object.values(v)) deepFreeze(x);
    Object.freeze(v);
  }
  return v;
}

/** The admission engine's view of a host row. */
export function toHostRecord(h: HostRow): HostRecord {
  return {
    id: h.id,
    pool: h.pool,
    gpus: h.gpus,
    homeService: h.homeService,
    managed: h.managed,
    phase: h.phase as HostPhase,
    lastHeartbeatAt: h.lastHeartbeatAt,
    facts: parseFacts(h.factsJson),
  };
}

/** The admission engine's view of a reservation row. */
export function toReservationRecord(r: ReservationRow): ReservationRecord {
  return {
    id: r.id,
    seq: r.seq,
    kind: r.kind as ReservationKind,
    priority: r.priority,
    topology: r.topology as Topology,
    pool: r.pool,
    targetHost: r.targetHost,
    repo: r.repo,
    pr: r.pr,
    headSha: r.headSha,
    suite: r.suite as Suite | null,
    requester: r.requester,
    status: r.status as ReservationStatus,
    createdAt: r.createdAt,
    queueDeadline: r.queueDeadline,
    ttlS: r.ttlS,
    ...(r.kind === 'development' && isDrill(r.metaJson) ? { drill: true } : {}),
  };
}

/** Whether a development reservation's meta marks it a restore drill (`drill: true`). */
function isDrill(metaJson: string | null): boolean {
  if (!metaJson?.includes('"drill"')) return false;
  try {
    return (JSON.parse(metaJson) as { drill?: unknown }).drill === true;
  } catch {
    return false;
  }
}

/** The admission engine's view of a lease row. */
export function toLeaseRecord(l: LeaseRow): LeaseRecord {
  return {
    id: l.id,
    reservationId: l.reservationId,
    hostId: l.hostId,
    fencingToken: l.fencingToken,
    status: l.status as LeaseStatus,
    grantedAt: l.grantedAt,
    expiresAt: l.expiresAt,
  };
}
