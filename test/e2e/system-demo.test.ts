import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../doubles/index.ts';

/**
 * `npm run demo` is a newcomer's first command (issue 7): it must keep working. Runs it exactly
 * as documented, as a child process, and checks the story's summary and that it cleaned up.
 */

const systemDirs = () => new Set(readdirSync(tmpdir()).filter((d) => d.startsWith('spark-system-')));

describe('npm run demo', { timeout: 240_000 }, () => {
  it('plays the whole story, prints the summary and exits 0, leaving nothing behind', async () => {
    const before = systemDirs();
    const child = spawn('npm', ['run', '--silent', 'demo'], {
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
    const code = await new Promise<number | null>((r) => child.once('exit', r));
    expect(code, out).toBe(0);

    expect(out).toMatch(/dashboard: http:\/\/127\.0\.0\.1:\d+\//);
    const summary = out.slice(out.indexOf('Summary'));
    const row = (id: string) => summary.split('\n').find((l) => l.trimStart().startsWith(`${id} `)) ?? '';
    expect(row('r-1')).toMatch(
      /PR #1 +1a1a1a1 +single +spark-2 +done \(passed\) +Spark test passed — evidence receipt recorded/,
    );
    expect(row('r-2')).toMatch(
      /PR #2 +2b2b2b2 +pair +spark-1\+spark-2 +done \(passed\) +Spark test passed — evidence receipt recorded/,
    );
    expect(row('r-3')).toMatch(
      /PR #3 +3c3c3c3 +single +— +superseded +Spark test superseded — 3c3c3c3 is no longer the PR head/,
    );
    expect(row('r-4')).toMatch(/PR #3 +3d3d3d3 +single +spark-2 +done \(passed\) +Spark test passed/);
    expect(row('r-5')).toMatch(/sparkctl \(development\) +— +single +spark-1 +done \(released\)/);
    expect(summary).toMatch(/PR #4 \(fork\) .* refused +Spark test refused — PR #4 comes from a fork/);
    expect(summary).toContain('hosts: spark-1 service, spark-2 idle');
    expect(summary).toMatch(/schema violations: 0/);
    // the timeline told the story: the pair held spark-1, Deckard went away and came back
    expect(out).toMatch(/spark-1 +service → held for r-2/);
    expect(out).toContain('Demo finished');
    // its temp dir (ledger, configs, host state) is gone
    const left = [...systemDirs()].filter((d) => !before.has(d));
    expect(left).toEqual([]);
  });
});
