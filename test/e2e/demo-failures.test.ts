import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../../scripts/sim/doubles/index.ts';

/**
 * `npm run demo -- --story failures` as documented, as a child process: it
 * plays every failure and cancellation behaviour of the seed against the simulated fleet and
 * prints `behaviour | the seed says | observed | match`, exiting 0 only when every row matches.
 */

function runDemo(args: string[]) {
  const child = spawn('npm', ['run', '--silent', 'demo', '--', ...args], {
    cwd: REPO_ROOT,
    env: { ...process.env, NO_COLOR: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (b: Buffer) => {
    out += b.toString();
  });
  child.stderr.on('data', (b: Buffer) => {
    out += b.toString();
  });
  const exited = new Promise<number | null>((r) =>
    child.once('close', (code, signal) => r(code ?? (signal ? 128 : null))),
  );
  return { output: () => out, exited };
}

const BEHAVIOURS = [
  'controller unavailable',
  'heartbeat stale',
  'lease expiry with processes present',
  'pair node lost',
  'Deckard restore failing',
  'label removed while queued',
  'PR closed while queued',
  'label removed while active',
  'PR closed while active',
  'new SHA while queued',
  'new SHA while active',
];

// concurrent: the refusal is a second demo process that exits at once; it need not wait for the story
describe.concurrent('npm run demo -- --story failures', { timeout: 420_000 }, () => {
  it('plays every failure and cancellation behaviour, prints the table and exits 0 when all match', async () => {
    const demo = runDemo(['--story', 'failures']);
    const code = await demo.exited;
    const out = demo.output();
    expect(code, out).toBe(0);

    const table = out.slice(
      out.indexOf('Failure and cancellation behaviour: the seed vs the running system'),
    );
    const lines = table.split('\n');
    expect(lines[1]).toMatch(/^ {2}behaviour +the seed says +observed +match$/);
    // one row per behaviour, in the seed's order; its first line ends with the match column
    const rows = BEHAVIOURS.map((b) => lines.findIndex((l) => l.startsWith(`  ${b}  `)));
    expect(rows.every((i) => i > 0)).toBe(true);
    expect([...rows].sort((x, y) => x - y)).toEqual(rows);
    for (const [k, i] of rows.entries()) expect(lines[i]!.trimEnd(), BEHAVIOURS[k]).toMatch(/ yes$/);
    expect(table).toContain('11/11 behaviours match the seed');
    expect(table).toContain('schema violations: 0');

    // the observed column carries what the system showed, not the expectation's words
    const rowText = (b: string) => {
      const i = rows[BEHAVIOURS.indexOf(b)]!;
      const next = rows.find((j) => j > i) ?? lines.findIndex((l, j) => j > i && l.trim() === '');
      return lines
        .slice(i, next)
        .map((l) => l.slice(2 + 35 + 2 + 48 + 2, 2 + 35 + 2 + 48 + 2 + 72).trim())
        .join(' ');
    };
    expect(rowText('pair node lost')).toMatch(
      /pair_node_lost.*check "Spark 1 lost contact during a pair run — pair failed as a unit" \(failure\)/,
    );
    expect(rowText('label removed while queued')).toMatch(
      /cancelled; check "Spark test cancelled — never started"/,
    );
    expect(rowText('new SHA while queued')).toMatch(
      /superseded; check "Spark test superseded — e1e1e1e is no/,
    );
    expect(rowText('Deckard restore failing')).toMatch(/spark-1 quarantined .* after 2 Deckard starts/);
    expect(rowText('heartbeat stale')).toMatch(/^spark-2 offline/);
    expect(rowText('lease expiry with processes present')).toMatch(/^spark-2 release-required/);
    expect(rowText('controller unavailable')).toMatch(/controller unreachable; starting nothing new/);

    expect(out).toContain('Demo finished in');
    const state = /state \(ledger, configs, logs\): (\S+)/.exec(out)?.[1];
    expect(state).toMatch(/spark-system-/);
    expect(existsSync(state!)).toBe(false);
  });

  it('refuses an unknown story with the usage', async () => {
    const demo = runDemo(['--story', 'nope']);
    expect(await demo.exited).toBe(2);
    expect(demo.output()).toContain(
      'demo: unknown story "nope"; stories: default, failures. usage: npm run demo [-- --keep] [-- --story failures]',
    );
  });
});
