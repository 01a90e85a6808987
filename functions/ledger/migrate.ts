import { sql } from 'drizzle-orm';
import type { LedgerDb } from './db.ts';

/** One generated migration (drizzle-kit output): its tag and SQL split on statement breakpoints. */
export interface Migration {
  tag: string;
  statements: string[];
}

export function splitMigration(tag: string, text: string): Migration {
  return {
    tag,
    statements: text
      .split('--> statement-breakpoint')
      .map((s) => s.trim())
      .filter(Boolean),
  };
}

/**
 * Applies the migrations not yet recorded, in one write transaction, so several controller
 * processes starting at once on one ledger apply each migration exactly once.
 * Returns the tags applied now.
 */
export async function applyMigrations(ledger: LedgerDb, migrations: readonly Migration[]): Promise<string[]> {
  await ledger.client.execute(
    'CREATE TABLE IF NOT EXISTS spark_migrations (tag TEXT PRIMARY KEY NOT NULL, applied_at INTEGER NOT NULL)',
  );
  return ledger.write(async (tx) => {
    const rows = await tx.all<{ tag: string }>(sql`SELECT tag FROM spark_migrations`);
    const done = new Set(rows.map((r) => r.tag));
    const applied: string[] = [];
    for (const m of migrations) {
      if (done.has(m.tag)) continue;
      for (const stmt of m.statements) await tx.run(sql.raw(stmt));
      await tx.run(sql`INSERT INTO spark_migrations (tag, applied_at) VALUES (${m.tag}, ${Date.now()})`);
      applied.push(m.tag);
    }
    return applied;
  });
}
