CREATE TABLE `granted_builds` (
	`build` text PRIMARY KEY NOT NULL,
	`granted_at` integer NOT NULL
);
--> statement-breakpoint
DROP INDEX `reservations_build`;--> statement-breakpoint
-- backfill (hand-written, ADR 0101): every build that already had a lane granted, keyed as the grant writes it
INSERT OR IGNORE INTO `granted_builds` (`build`, `granted_at`)
SELECT CASE WHEN `pr` IS NOT NULL THEN 'pr ' || `repo` || '#' || `pr` || ' ' || `head_sha` ELSE 'repo ' || `repo` || ' ' || `head_sha` END, MIN(`granted_at`)
FROM `reservations`
WHERE `granted_at` IS NOT NULL AND `repo` IS NOT NULL AND `head_sha` IS NOT NULL AND (`pr` IS NOT NULL OR `kind` IN ('merge', 'benchmark', 'background'))
GROUP BY 1;
