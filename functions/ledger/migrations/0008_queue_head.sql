CREATE INDEX `reservations_queue` ON `reservations` ("priority" DESC,`seq`) WHERE status = 'queued';--> statement-breakpoint
CREATE INDEX `reservations_queue_deadline` ON `reservations` (`queue_deadline`) WHERE status = 'queued';--> statement-breakpoint
-- hand-written (drizzle-kit cannot render an expression index): queued rows by build key, exactly as
-- functions/ledger/schema.ts BUILD_KEY_SQL spells it, so the admission pass finds the builds waiting
-- in the queue with one index seek each (docs/adr/0187-scheduler-pass-measured-whole.md)
CREATE INDEX `reservations_queue_builds` ON `reservations` ((CASE WHEN pr IS NOT NULL THEN 'pr ' || repo || '#' || pr || ' ' || head_sha WHEN kind IN ('merge', 'benchmark', 'background') THEN 'repo ' || repo || ' ' || head_sha END)) WHERE status = 'queued';
