import { LEDGER_EVENTS } from '../../core/events.ts';
import { BINDING_LEASE_STATUSES, HOST_STATES, RESERVATION_KINDS } from '../../core/model.ts';
import { type Ledger, RUNNER_START_BUCKETS_S, WAIT_BUCKETS_S } from '../ledger/ledger.ts';
import { holderClassOf, type ViewsMemo } from '../views.ts';
import { counterFamily, histogramFamily, OUTBOX_STATUSES } from './counters.ts';
import type { MetricFamily } from './prom-text.ts';

export { RUNNER_START_BUCKETS_S, WAIT_BUCKETS_S };
export const ADMISSION_BUCKETS_S = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5] as const;

/**
 * Reads the ledger into metric families: ledger-wide series, the same from every controller
 * process on one ledger (docs/metrics.md). Everything comes from sanitized views or aggregate
 * counts: host ids, classes, statuses and outcomes are the only label values. Counters and
 * histograms are read from the ledger's persistent aggregates, so they only grow.
 */
export async function collectLedgerMetrics(ledger: Ledger, views: ViewsMemo): Promise<MetricFamily[]> {
  const now = ledger.clock();
  const { fleet, queue } = await views.get();

  const byKind = <T>(f: (k: (typeof RESERVATION_KINDS)[number]) => T) =>
    RESERVATION_KINDS.map((k) => [k, f(k)] as const);

  const homed = fleet.hosts.filter((h) => h.homeService);
  const [{ outboxRows, leaseRows }, counters, holders, inbox, homedRows] = await Promise.all([
    ledger.reads.metricsReads(),
    ledger.reads.metricCounterRows(),
    ledger.reads.bindingLeaseHolders(),
    ledger.inbox.stats(),
    Promise.all(homed.map((h) => ledger.getHost(undefined, h.id))),
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
    histogramFamily(counters, {
      name: 'spark_reservation_wait_seconds',
      help: 'Time from request to grant, by class (every grant for the life of the ledger).',
      buckets: WAIT_BUCKETS_S,
      ensure: RESERVATION_KINDS.map((kind) => ({ kind })),
    }),
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
      samples: [...new Set([...OUTBOX_STATUSES, ...outboxRows.map((r) => r.status)])].map((status) => ({
        labels: { status },
        value: outboxRows.find((r) => r.status === status)?.n ?? 0,
      })),
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
    histogramFamily(counters, {
      name: 'spark_runner_startup_seconds',
      help: 'Time from a host reported prepared to its JIT runner started, by host (observed when the lease is released).',
      buckets: RUNNER_START_BUCKETS_S,
      ensure: fleet.hosts.map((h) => ({ host: h.id })),
    }),
    counterFamily(counters, {
      name: 'spark_reservations_ended_total',
      help: 'Reservations that ended, by class, final status and outcome.',
    }),
    counterFamily(counters, {
      name: 'spark_webhook_deliveries_total',
      help: 'GitHub webhook deliveries claimed, by result (processed, ignored, duplicate).',
      ensure: ['processed', 'ignored', 'duplicate'].map((result) => ({ result })),
    }),
    counterFamily(counters, {
      name: 'spark_webhook_redeliveries_total',
      help: 'Redeliveries of failed GitHub webhook deliveries the controller asked GitHub for, by result (requested, failed).',
      ensure: ['requested', 'failed'].map((result) => ({ result })),
    }),
    counterFamily(counters, {
      name: 'spark_ledger_events_total',
      help: 'Events appended to the ledger history, by type.',
      // the events raised for operators exist from the start: Prometheus' increase() cannot see
      // the first event of a series that appears with it (functions/metrics/alert-rules.yml)
      ensure: LEDGER_EVENTS.filter((type) => type.startsWith('alert.')).map((type) => ({ type })),
    }),
    {
      name: 'spark_lease_expiry_timestamp_seconds',
      help: 'When the lease binding each host runs out unless renewed (Unix time), by host and class.',
      type: 'gauge',
      samples: holders.map((l) => ({
        labels: { host: l.hostId, kind: l.kind, holder_class: holderClassOf(l.requester) },
        value: Math.floor(l.expiresAt / 1000),
      })),
    },
    {
      name: 'spark_home_service_up',
      help: 'Deckard (a host home service) serving and healthy: 1, else 0.',
      type: 'gauge',
      samples: fleet.hosts
        .filter((h) => h.homeService)
        .map((h) => ({
          labels: { host: h.id, service: h.homeService! },
          value: h.serviceHealth === 'serving' ? 1 : 0,
        })),
    },
    {
      name: 'spark_home_service_restore_failures',
      help: 'Failed restores of each home service since its last good one (reset when a restore passes or an operator clears the quarantine).',
      type: 'gauge',
      samples: homed.map((h, i) => ({
        labels: { host: h.id, service: h.homeService! },
        value: homedRows[i]?.restoreAttempts ?? 0,
      })),
    },
    {
      name: 'spark_home_service_health',
      help: 'Health of each home service (1 for its current health: serving, stopped, starting, draining, failed, unknown).',
      type: 'gauge',
      samples: fleet.hosts
        .filter((h) => h.homeService)
        .flatMap((h) =>
          (['serving', 'stopped', 'starting', 'draining', 'failed', 'unknown'] as const).map((health) => ({
            labels: { host: h.id, service: h.homeService!, health },
            value: h.serviceHealth === health ? 1 : 0,
          })),
        ),
    },
  ];
  return families;
}
