import { BINDING_LEASE_STATUSES, HOST_STATES, RESERVATION_KINDS } from '../../core/model.ts';
import { inboxStats } from '../ledger/inbox.ts';
import type { Ledger } from '../ledger/ledger.ts';
import { metricsReads } from '../ledger/queries.ts';
import { buildViews } from '../views.ts';
import type { LiveHistogram, MetricFamily } from './prom-text.ts';

export const WAIT_BUCKETS_S = [1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 21600] as const;
export const RUNNER_START_BUCKETS_S = [1, 2, 5, 10, 20, 30, 60, 120, 300, 600] as const;
export const ADMISSION_BUCKETS_S = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5] as const;

/**
 * Reads the ledger into metric families. Everything comes from sanitized views or aggregate
 * counts: host ids and reservation kinds are the only label values.
 */
export async function collectMetrics(
  ledger: Ledger,
  admission: LiveHistogram | null,
): Promise<MetricFamily[]> {
  const now = ledger.clock();
  const { fleet, queue } = await buildViews(ledger);

  const byKind = <T>(f: (k: (typeof RESERVATION_KINDS)[number]) => T) =>
    RESERVATION_KINDS.map((k) => [k, f(k)] as const);

  const [{ granted, started, outboxRows, leaseRows }, inbox] = await Promise.all([
    metricsReads(ledger),
    inboxStats(ledger),
  ]);

  const pendingOutbox = outboxRows.find((r) => r.status === 'pending');
  const families: MetricFamily[] = [
    {
      name: 'spark_queue_depth',
      help: 'Queued reservations by class (kind).',
      type: 'gauge',
      samples: byKind((k) => queue.queued.filter((q) => q.kind === k).length).map(([kind, value]) => ({
        labels: { kind },
        value,
      })),
    },
    {
      name: 'spark_queue_oldest_wait_seconds',
      help: 'How long the oldest queued reservation of each class has waited.',
      type: 'gauge',
      samples: byKind((k) => Math.max(0, ...queue.queued.filter((q) => q.kind === k).map((q) => q.ageS))).map(
        ([kind, value]) => ({ labels: { kind }, value }),
      ),
    },
    {
      name: 'spark_reservation_wait_seconds',
      help: 'Time from request to grant, by class.',
      type: 'histogram',
      buckets: WAIT_BUCKETS_S,
      series: byKind((k) =>
        granted.filter((g) => g.kind === k).map((g) => Math.max(0, (g.grantedAt! - g.createdAt) / 1000)),
      ).map(([kind, values]) => ({ labels: { kind }, values })),
    },
    {
      name: 'spark_admission_pass_seconds',
      help: 'Duration of admission passes run by this controller process.',
      type: 'histogram',
      buckets: ADMISSION_BUCKETS_S,
      series: admission ? [{ live: admission }] : [],
    },
    {
      name: 'spark_reservations_active',
      help: 'Reservations holding hosts (allocated, preparing, running, releasing), by class.',
      type: 'gauge',
      samples: byKind((k) => queue.active.filter((q) => q.kind === k).length).map(([kind, value]) => ({
        labels: { kind },
        value,
      })),
    },
    {
      name: 'spark_leases',
      help: 'Leases that bind a host, by lease status.',
      type: 'gauge',
      samples: BINDING_LEASE_STATUSES.map((status) => ({
        labels: { status },
        value: leaseRows.find((r) => r.status === status)?.n ?? 0,
      })),
    },
    {
      name: 'spark_host_state',
      help: 'Derived state of each host (1 for its current state).',
      type: 'gauge',
      samples: fleet.hosts.flatMap((h) =>
        HOST_STATES.map((state) => ({ labels: { host: h.id, state }, value: h.state === state ? 1 : 0 })),
      ),
    },
    {
      name: 'spark_host_heartbeat_age_seconds',
      help: 'Seconds since each host last heartbeated (absent when it never did).',
      type: 'gauge',
      samples: fleet.hosts
        .filter((h) => h.lastHeartbeatAgeS != null)
        .map((h) => ({ labels: { host: h.id }, value: h.lastHeartbeatAgeS! })),
    },
    {
      name: 'spark_fleet_managed',
      help: '1 when every host is adopted and heartbeating.',
      type: 'gauge',
      samples: [{ value: fleet.managed ? 1 : 0 }],
    },
    {
      name: 'spark_outbox_items',
      help: 'GitHub side effects in the outbox, by status.',
      type: 'gauge',
      samples: outboxRows.map((r) => ({ labels: { status: r.status }, value: r.n })),
    },
    {
      name: 'spark_outbox_backlog',
      help: 'Side effects still waiting to be sent.',
      type: 'gauge',
      samples: [{ value: pendingOutbox?.n ?? 0 }],
    },
    {
      name: 'spark_outbox_oldest_pending_seconds',
      help: 'Age of the oldest unsent side effect (0 when none).',
      type: 'gauge',
      samples: [
        { value: pendingOutbox?.oldest != null ? Math.max(0, (now - pendingOutbox.oldest) / 1000) : 0 },
      ],
    },
    {
      name: 'spark_webhook_inbox_depth',
      help: 'Webhook deliveries acknowledged and not processed yet (pending) or parked after repeated failures.',
      type: 'gauge',
      samples: [
        { labels: { state: 'pending' }, value: inbox.pending },
        { labels: { state: 'parked' }, value: inbox.parked },
      ],
    },
    {
      name: 'spark_webhook_inbox_oldest_pending_seconds',
      help: 'Age of the oldest webhook delivery waiting to be processed (0 when none).',
      type: 'gauge',
      samples: [{ value: inbox.oldestPendingAgeMs / 1000 }],
    },
    {
      name: 'spark_runner_startup_seconds',
      help: 'Time from a host reported prepared to its JIT runner started.',
      type: 'histogram',
      buckets: RUNNER_START_BUCKETS_S,
      series: [
        {
          values: started.map((s) => Math.max(0, (s.runnerStartedAt! - s.preparedAt!) / 1000)),
        },
      ],
    },
  ];
  return families;
}
