import * as z from 'zod';
import { RESERVATION_KINDS, RESERVATION_STATUSES, SUITES, TOPOLOGIES } from '../model.ts';

/** Scopes an operator/user API token can hold; `emergency` is never implied by another. */
export const SCOPES = ['develop', 'operate', 'emergency'] as const;
export type Scope = (typeof SCOPES)[number];

/**
 * Wire format of the operator/user API (`/api/v1/...`). The controller validates requests with
 * these schemas; sparkctl and the MCP server validate responses with them, so a drift between
 * the two sides is an error with a message instead of `undefined` in a table.
 */

const hostId = z
  .string()
  .regex(/^[a-z0-9][a-z0-9-]{0,62}$/, 'a host id is lower-case letters, digits and dashes, e.g. "spark-2"');

/** `POST /api/v1/reservations` */
export const CreateReservationBody = z
  .object({
    topology: z.enum(TOPOLOGIES).default('single'),
    host: hostId.optional().describe('Ask for one named host (single topology only).'),
    ttlS: z
      .number()
      .int()
      .min(60, 'ttl must be at least 60 seconds')
      .optional()
      .describe('Lease TTL in seconds; default timings.devLeaseDefaultTtlS.'),
    drill: z
      .boolean()
      .optional()
      .describe(
        "A restore drill (sparkctl deckard drill): the lease only lends the named host's home service and is released once prepared; nobody attaches to it, so any backend serves it.",
      ),
  })
  .strict();
export type CreateReservationBody = z.infer<typeof CreateReservationBody>;

/** `POST /api/v1/reservations/:id/renew` */
export const RenewBody = z
  .object({ ttlS: z.number().int().min(60, 'ttl must be at least 60 seconds').optional() })
  .strict();

/** `POST /api/v1/reservations/:id/terminate` (emergency scope) */
export const TerminateBody = z
  .object({
    reason: z
      .string()
      .trim()
      .min(3, 'say why (at least 3 characters): the reason is kept in the audit history')
      .max(500),
  })
  .strict();

/** `POST /api/v1/deckard/start` */
export const DeckardStartBody = z.object({ host: hostId.optional() }).strict();

/** `POST /api/v1/tokens` */
export const CreateTokenBody = z
  .object({
    name: z
      .string()
      .regex(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/, 'a token name is letters, digits, "_", "." or "-"'),
    scopes: z.array(z.enum(SCOPES)).min(1, 'a token needs at least one scope'),
    expiresInS: z
      .number()
      .int()
      .min(60, 'a token must live at least 60 seconds')
      .max(10 * 365 * 86400, 'a token may live at most 10 years; leave expiresInS out for no expiry')
      .optional()
      .describe('Seconds until the token stops working (401 "expired"); omitted = until revoked.'),
  })
  .strict();

export const LeaseInfo = z.object({
  hostId: z.string(),
  status: z.enum(['active', 'expired', 'releasing', 'released']),
  lend: z.boolean(),
  grantedAt: z.string(),
  expiresAt: z.string(),
  releasedAt: z.string().nullable(),
  prepared: z.boolean(),
  runnerStarted: z.boolean(),
  /** Development lease on a dstack host: the command that attaches to its dev environment. */
  attach: z.string().nullable().optional(),
});
export type LeaseInfo = z.infer<typeof LeaseInfo>;

/**
 * When a queued request should start (core/eta.ts): an ISO time range from the
 * ledger's history, the same range in words, or why nothing can start it.
 */
export const EtaInfo = z.object({
  startLo: z.string().nullable(),
  startHi: z.string().nullable(),
  text: z.string(),
  blocked: z.string().nullable(),
});
export type EtaInfo = z.infer<typeof EtaInfo>;

/** A reservation as its requester and operators see it (never fencing or job tokens). */
export const ReservationInfo = z.object({
  id: z.string(),
  kind: z.enum(RESERVATION_KINDS),
  priority: z.number(),
  topology: z.enum(TOPOLOGIES),
  status: z.enum(RESERVATION_STATUSES),
  position: z.number().nullable(),
  reason: z.string().nullable(),
  outcome: z.string().nullable(),
  targetHost: z.string().nullable(),
  requester: z.string(),
  mine: z.boolean(),
  repo: z.string().nullable(),
  pr: z.number().nullable(),
  prUrl: z.string().nullable(),
  headSha: z.string().nullable(),
  suite: z.enum(SUITES).nullable(),
  ttlS: z.number().nullable(),
  createdAt: z.string(),
  grantedAt: z.string().nullable(),
  endedAt: z.string().nullable(),
  queueDeadline: z.string(),
  /** Hosts draining or held for this request while it waits. */
  waitingOn: z.array(z.object({ hostId: z.string(), state: z.string() })),
  leases: z.array(LeaseInfo),
  /** True when the hosts are prepared and the lease is usable (development: attach now). */
  ready: z.boolean(),
  /** Queued only: the start estimate (absent from controllers older than). */
  eta: EtaInfo.nullable().optional(),
});
export type ReservationInfo = z.infer<typeof ReservationInfo>;

export const ReservationResponse = z.object({ reservation: ReservationInfo });
export const ReservationListResponse = z.object({ reservations: z.array(ReservationInfo) });

export const EventInfo = z.object({
  id: z.number(),
  at: z.string(),
  subjectType: z.string(),
  subjectId: z.string(),
  type: z.string(),
  fromState: z.string().nullable(),
  toState: z.string().nullable(),
  cause: z.string(),
  actor: z.string(),
});
export const HistoryResponse = z.object({ reservationId: z.string(), events: z.array(EventInfo) });

export const RecoverResponse = z.object({
  reservation: ReservationInfo,
  action: z.enum(['cancelled', 'release-requested', 'awaiting-agent', 'already-ended']),
  /** Hosts whose agent has not yet confirmed termination. */
  awaitingHosts: z.array(z.string()),
  message: z.string(),
});

export const HostResponse = z.object({
  host: z.object({ id: z.string(), managed: z.boolean(), phase: z.string() }),
});

export const TokenCreated = z.object({
  id: z.string(),
  name: z.string(),
  scopes: z.array(z.enum(SCOPES)),
  /** Shown once; only its SHA-256 is stored. */
  token: z.string(),
  /** ISO time the token stops working; null = until revoked. */
  expiresAt: z.string().nullable().default(null),
});
export const TokenList = z.object({
  tokens: z.array(
    z.object({
      id: z.string(),
      name: z.string(),
      scopes: z.array(z.string()),
      createdAt: z.string(),
      revokedAt: z.string().nullable(),
      lastUsedAt: z.string().nullable(),
      expiresAt: z.string().nullable().default(null),
    }),
  ),
});
export const WhoAmI = z.object({ tokenId: z.string(), name: z.string(), scopes: z.array(z.enum(SCOPES)) });

export const ErrorBody = z.object({ error: z.object({ code: z.string(), message: z.string() }) });

/** Public sanitized views (`/api/v1/fleet`, `/api/v1/queue`), as sparkctl reads them. */
export const FleetResponse = z.object({
  generatedAt: z.string(),
  managed: z.boolean(),
  hosts: z.array(
    z.object({
      id: z.string(),
      pool: z.string(),
      gpus: z.number(),
      state: z.string(),
      managed: z.boolean(),
      homeService: z.string().nullable(),
      serviceHealth: z.string(),
      lastHeartbeatAgeS: z.number().nullable(),
      gpuProcessCount: z.number().nullable(),
      reservation: z
        .object({ id: z.string(), kind: z.string(), topology: z.string(), status: z.string() })
        .nullable(),
      keptFor: z.string().nullable(),
      note: z.string().nullable(),
    }),
  ),
});
const QueueItem = z.object({
  id: z.string(),
  position: z.number().nullable(),
  kind: z.string(),
  priority: z.number(),
  topology: z.string(),
  status: z.string(),
  suite: z.string().nullable(),
  repo: z.string().nullable(),
  pr: z.number().nullable(),
  prUrl: z.string().nullable(),
  headSha: z.string().nullable(),
  hosts: z.array(z.string()),
  reason: z.string().nullable(),
  ageS: z.number(),
  // (optional: absent from older controllers)
  targetHost: z.string().nullable().optional(),
  eta: EtaInfo.nullable().optional(),
  leaseExpiresAt: z.string().nullable().optional(),
  holderClass: z.string().optional(),
});
export const QueueResponse = z.object({
  generatedAt: z.string(),
  queued: z.array(QueueItem),
  active: z.array(QueueItem),
});
