import { readFileSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';

/**
 * Writes `test/setup/durations.json` (what `SlowFirstSequencer` (slow-first-sequencer.ts) orders by on a machine without
 * vitest's results cache, e.g. a fresh CI checkout) from a vitest JSON report:
 *
 *   npx vitest run --reporter=json --outputFile.json=/tmp/vitest.json
 *   npx tsx test/setup/record-durations.ts /tmp/vitest.json
 *
 * Only files of at least {@link MIN_S} seconds are kept: their order decides the tail of a run; the
 * rest are quick whatever their order.
 */
const MIN_S = 0.5;

interface Report {
  testResults: { name: string; startTime: number; endTime: number }[];
}

const [reportPath] = process.argv.slice(2);
if (!reportPath) {
  console.error('usage: npx tsx test/setup/record-durations.ts <vitest JSON report>');
  process.exit(2);
}
const root = join(import.meta.dirname, '..', '..');
const report = JSON.parse(readFileSync(reportPath, 'utf8')) as Report;
const durations = Object.fromEntries(
  report.testResults
    .map((r) => [relative(root, r.name), Math.round((r.endTime - r.startTime) / 100) / 10] as const)
    .filter(([, s]) => s >= MIN_S)
    .sort((a, b) => b[1] - a[1]),
);
writeFileSync(join(import.meta.dirname, 'durations.json'), `${JSON.stringify(durations, null, 2)}\n`);
console.log(`test/setup/durations.json: ${Object.keys(durations).length} files of ${MIN_S} s or more`);
