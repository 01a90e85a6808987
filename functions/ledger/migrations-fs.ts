import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Migration, splitMigration } from './migrate.ts';

/** Node only: reads drizzle-kit's committed migrations (journal order) from disk. */
export function loadMigrations(
  dir = join(dirname(fileURLToPath(import.meta.url)), 'migrations'),
): Migration[] {
  const journal = JSON.parse(readFileSync(join(dir, 'meta', '_journal.json'), 'utf8')) as {
    entries: { idx: number; tag: string }[];
  };
  return journal.entries
    .sort((a, b) => a.idx - b.idx)
    .map((e) => splitMigration(e.tag, readFileSync(join(dir, `${e.tag}.sql`), 'utf8')));
}
