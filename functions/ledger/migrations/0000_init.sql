CREATE TABLE `agent_tokens` (
	`id` text PRIMARY KEY NOT NULL,
	`host_id` text NOT NULL,
	`token_hash` text NOT NULL,
	`created_at` integer NOT NULL,
	`revoked_at` integer,
	`last_used_at` integer,
	FOREIGN KEY (`host_id`) REFERENCES `hosts`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE UNIQUE INDEX `agent_tokens_token_hash_unique` ON `agent_tokens` (`token_hash`);--> statement-breakpoint
CREATE TABLE `api_tokens` (
	`id` text PRIMARY KEY NOT NULL,
	`name` text NOT NULL,
	`scopes` text NOT NULL,
	`token_hash` text NOT NULL,
	`created_at` integer NOT NULL,
	`revoked_at` integer,
	`last_used_at` integer
);
--> statement-breakpoint
CREATE UNIQUE INDEX `api_tokens_token_hash_unique` ON `api_tokens` (`token_hash`);--> statement-breakpoint
CREATE TABLE `events` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`at` integer NOT NULL,
	`subject_type` text NOT NULL,
	`subject_id` text NOT NULL,
	`type` text NOT NULL,
	`from_state` text,
	`to_state` text,
	`cause` text NOT NULL,
	`actor` text NOT NULL,
	`data_json` text
);
--> statement-breakpoint
CREATE INDEX `events_subject` ON `events` (`subject_type`,`subject_id`,`id`);--> statement-breakpoint
CREATE TABLE `hosts` (
	`id` text PRIMARY KEY NOT NULL,
	`pool` text NOT NULL,
	`gpus` integer DEFAULT 1 NOT NULL,
	`home_service` text,
	`managed` integer DEFAULT false NOT NULL,
	`phase` text DEFAULT 'idle' NOT NULL,
	`last_heartbeat_at` integer,
	`facts_json` text,
	`fencing_token` integer DEFAULT 0 NOT NULL,
	`restore_attempts` integer DEFAULT 0 NOT NULL,
	`restore_not_before` integer,
	`note` text,
	`updated_at` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `jit_handoffs` (
	`runner_name` text PRIMARY KEY NOT NULL,
	`lease_id` text NOT NULL,
	`reservation_id` text NOT NULL,
	`host_id` text NOT NULL,
	`attempt` integer DEFAULT 0 NOT NULL,
	`runner_id` integer,
	`jit_config` text,
	`created_at` integer NOT NULL,
	`consumed_at` integer,
	`deleted_at` integer,
	FOREIGN KEY (`lease_id`) REFERENCES `leases`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE INDEX `jit_handoffs_lease` ON `jit_handoffs` (`lease_id`,`attempt`);--> statement-breakpoint
CREATE TABLE `leases` (
	`id` text PRIMARY KEY NOT NULL,
	`reservation_id` text NOT NULL,
	`host_id` text NOT NULL,
	`fencing_token` integer NOT NULL,
	`status` text NOT NULL,
	`lend` integer DEFAULT false NOT NULL,
	`granted_at` integer NOT NULL,
	`expires_at` integer NOT NULL,
	`released_at` integer,
	`job_token_hash` text,
	`prepared_at` integer,
	`runner_started_at` integer,
	`runner_exited_at` integer,
	`exit_code` integer,
	`evidence_json` text,
	FOREIGN KEY (`reservation_id`) REFERENCES `reservations`(`id`) ON UPDATE no action ON DELETE no action,
	FOREIGN KEY (`host_id`) REFERENCES `hosts`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE UNIQUE INDEX `leases_host_token` ON `leases` (`host_id`,`fencing_token`);--> statement-breakpoint
CREATE UNIQUE INDEX `leases_one_binding_per_host` ON `leases` (`host_id`) WHERE status in ('active', 'expired', 'releasing');--> statement-breakpoint
CREATE INDEX `leases_reservation` ON `leases` (`reservation_id`);--> statement-breakpoint
CREATE TABLE `meta` (
	`key` text PRIMARY KEY NOT NULL,
	`value` text NOT NULL
);
--> statement-breakpoint
CREATE TABLE `outbox` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`kind` text NOT NULL,
	`idempotency_key` text NOT NULL,
	`reservation_id` text,
	`payload_json` text NOT NULL,
	`status` text DEFAULT 'pending' NOT NULL,
	`attempts` integer DEFAULT 0 NOT NULL,
	`next_attempt_at` integer NOT NULL,
	`claimed_by` text,
	`claimed_until` integer,
	`last_error` text,
	`result_json` text,
	`created_at` integer NOT NULL,
	`sent_at` integer
);
--> statement-breakpoint
CREATE UNIQUE INDEX `outbox_key` ON `outbox` (`idempotency_key`);--> statement-breakpoint
CREATE INDEX `outbox_due` ON `outbox` (`status`,`next_attempt_at`);--> statement-breakpoint
CREATE TABLE `repositories` (
	`full_name` text PRIMARY KEY NOT NULL,
	`installation_id` integer,
	`default_branch` text DEFAULT 'main' NOT NULL,
	`pair_enabled` integer DEFAULT false NOT NULL,
	`workflow` text,
	`enabled_at` integer NOT NULL,
	`disabled_at` integer
);
--> statement-breakpoint
CREATE TABLE `reservations` (
	`id` text PRIMARY KEY NOT NULL,
	`seq` integer NOT NULL,
	`kind` text NOT NULL,
	`priority` integer NOT NULL,
	`topology` text NOT NULL,
	`pool` text NOT NULL,
	`target_host` text,
	`repo` text,
	`pr` integer,
	`head_sha` text,
	`suite` text,
	`requester` text NOT NULL,
	`status` text NOT NULL,
	`reason` text,
	`position` integer,
	`outcome` text,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL,
	`queue_deadline` integer NOT NULL,
	`granted_at` integer,
	`ended_at` integer,
	`ttl_s` integer,
	`attempt` integer DEFAULT 0 NOT NULL,
	`retry_not_before` integer,
	`check_run_id` integer,
	`receipt_json` text,
	`meta_json` text
);
--> statement-breakpoint
CREATE UNIQUE INDEX `reservations_seq` ON `reservations` (`seq`);--> statement-breakpoint
CREATE INDEX `reservations_status` ON `reservations` (`status`,`priority`,`seq`);--> statement-breakpoint
CREATE INDEX `reservations_pr` ON `reservations` (`repo`,`pr`);--> statement-breakpoint
CREATE TABLE `webhook_deliveries` (
	`delivery_id` text PRIMARY KEY NOT NULL,
	`event` text NOT NULL,
	`action` text,
	`received_at` integer NOT NULL,
	`result` text NOT NULL
);
