import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { renderFigures, tableInsensitive, withFigures } from '../../scripts/readme-figures.ts';

/**
 * The README quotes only figures from the committed reference run (`bench/reference.json`), each
 * with its conditions: its performance table is the rendering of that file, and this fails when
 * either changed without the other (`npx tsx scripts/readme-figures.ts` rewrites the table).
 */
const root = join(import.meta.dirname, '..', '..');
const readme = readFileSync(join(root, 'README.md'), 'utf8');
const reference = JSON.parse(readFileSync(join(root, 'bench', 'reference.json'), 'utf8'));

describe('README performance figures', () => {
  it('are the rendering of bench/reference.json', () => {
    expect(tableInsensitive(withFigures(readme, reference))).toBe(tableInsensitive(readme));
  });

  it('change when a figure in the reference changes', () => {
    const changed = structuredClone(reference);
    changed.generated_at = '2000-01-01T00:00:00.000Z';
    expect(tableInsensitive(withFigures(readme, changed))).not.toBe(tableInsensitive(readme));
  });

  it('say when the reference run has no such figure, and claim nothing about it', () => {
    const text = renderFigures({ command: 'npm run bench -- worker-size', generated_at: 'x', machine: {} });
    const handover = text.split('\n').find((l) => l.startsWith('| handover'));
    expect(handover).toContain('not in this run');
    expect(handover).not.toContain('yes');
  });

  it('mark a missed goal', () => {
    const text = renderFigures({ ...reference, worker: { gzipBytes: 300_000 } });
    expect(text.split('\n').find((l) => l.startsWith('| Worker'))).toContain('**no**');
  });
});
