CREATE TABLE `metric_counters` (
	`name` text NOT NULL,
	`series` text NOT NULL,
	`value` real DEFAULT 0 NOT NULL,
	PRIMARY KEY(`name`, `series`)
);
--> statement-breakpoint
-- Backfill from the history so far: afterwards the ledger commands bump these rows in
-- the same transaction as each event (functions/ledger/counters.ts). Bucket bounds must match
-- WAIT_BUCKETS_S and RUNNER_START_BUCKETS_S there.
WITH b(le) AS (VALUES (1), (5), (15), (30), (60), (120), (300), (600), (1800), (3600), (7200), (14400), (21600))
INSERT INTO `metric_counters` (`name`, `series`, `value`)
SELECT 'spark_reservation_wait_seconds_bucket', 'kind="' || r.kind || '",le="' || b.le || '"',
  sum(max(0, r.granted_at - r.created_at) <= b.le * 1000)
FROM `reservations` r CROSS JOIN b WHERE r.granted_at IS NOT NULL GROUP BY r.kind, b.le;
--> statement-breakpoint
INSERT INTO `metric_counters` (`name`, `series`, `value`)
SELECT 'spark_reservation_wait_seconds_bucket', 'kind="' || kind || '",le="+Inf"', count(*)
FROM `reservations` WHERE granted_at IS NOT NULL GROUP BY kind
UNION ALL
SELECT 'spark_reservation_wait_seconds_count', 'kind="' || kind || '"', count(*)
FROM `reservations` WHERE granted_at IS NOT NULL GROUP BY kind
UNION ALL
SELECT 'spark_reservation_wait_seconds_sum', 'kind="' || kind || '"', sum(max(0, granted_at - created_at)) / 1000.0
FROM `reservations` WHERE granted_at IS NOT NULL GROUP BY kind;
--> statement-breakpoint
WITH b(le) AS (VALUES (1), (2), (5), (10), (20), (30), (60), (120), (300), (600))
INSERT INTO `metric_counters` (`name`, `series`, `value`)
SELECT 'spark_runner_startup_seconds_bucket', 'host="' || l.host_id || '",le="' || b.le || '"',
  sum(max(0, l.runner_started_at - l.prepared_at) <= b.le * 1000)
FROM `leases` l CROSS JOIN b
WHERE l.status = 'released' AND l.prepared_at IS NOT NULL AND l.runner_started_at IS NOT NULL
GROUP BY l.host_id, b.le;
--> statement-breakpoint
INSERT INTO `metric_counters` (`name`, `series`, `value`)
SELECT 'spark_runner_startup_seconds_bucket', 'host="' || host_id || '",le="+Inf"', count(*)
FROM `leases` WHERE status = 'released' AND prepared_at IS NOT NULL AND runner_started_at IS NOT NULL GROUP BY host_id
UNION ALL
SELECT 'spark_runner_startup_seconds_count', 'host="' || host_id || '"', count(*)
FROM `leases` WHERE status = 'released' AND prepared_at IS NOT NULL AND runner_started_at IS NOT NULL GROUP BY host_id
UNION ALL
SELECT 'spark_runner_startup_seconds_sum', 'host="' || host_id || '"', sum(max(0, runner_started_at - prepared_at)) / 1000.0
FROM `leases` WHERE status = 'released' AND prepared_at IS NOT NULL AND runner_started_at IS NOT NULL GROUP BY host_id;
--> statement-breakpoint
INSERT INTO `metric_counters` (`name`, `series`, `value`)
SELECT 'spark_reservations_ended_total', 'kind="' || kind || '",status="' || status || '",outcome="' || coalesce(outcome, status) || '"', count(*)
FROM `reservations` WHERE status IN ('done', 'cancelled', 'superseded', 'failed') GROUP BY kind, status, coalesce(outcome, status);
--> statement-breakpoint
INSERT INTO `metric_counters` (`name`, `series`, `value`)
SELECT 'spark_ledger_events_total', 'type="' || type || '"', count(*) FROM `events` GROUP BY type;
