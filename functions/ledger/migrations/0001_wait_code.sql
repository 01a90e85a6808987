ALTER TABLE `reservations` ADD `wait_code` text;--> statement-breakpoint
-- queued rows kept their wait code in `outcome` before this column existed
UPDATE `reservations` SET `wait_code` = `outcome`, `outcome` = NULL WHERE `status` = 'queued';
