CREATE TABLE `host_evidence` (
	`lease_id` text PRIMARY KEY NOT NULL,
	`reservation_id` text NOT NULL,
	`host_id` text NOT NULL,
	`fencing_token` integer NOT NULL,
	`evidence_json` text NOT NULL,
	`recorded_at` integer NOT NULL,
	FOREIGN KEY (`lease_id`) REFERENCES `leases`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE INDEX `host_evidence_reservation` ON `host_evidence` (`reservation_id`);