ALTER TABLE `webhook_deliveries` ADD `state` text DEFAULT 'done' NOT NULL;--> statement-breakpoint
ALTER TABLE `webhook_deliveries` ADD `order_key` text;--> statement-breakpoint
ALTER TABLE `webhook_deliveries` ADD `body` text;--> statement-breakpoint
ALTER TABLE `webhook_deliveries` ADD `attempts` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `webhook_deliveries` ADD `next_attempt_at` integer;--> statement-breakpoint
ALTER TABLE `webhook_deliveries` ADD `last_error` text;--> statement-breakpoint
ALTER TABLE `webhook_deliveries` ADD `processed_at` integer;--> statement-breakpoint
CREATE INDEX `webhook_deliveries_open` ON `webhook_deliveries` (`state`) WHERE state <> 'done';