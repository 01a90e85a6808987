import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT, waitFor } from '../../scripts/sim/doubles/index.ts';

/**
 * `npm run demo` is a newcomer's first command: it must keep working. Runs it exactly
 * as documented, as a child process, and checks the story's summary and that it cleaned up.
 */

/**
 * `npm run demo` as documented; `direct` runs the same command line without npm (node with the
 * tsx loader, no tsx CLI wrapper relaying signals) so a Ctrl-C reaches the demo itself.
 */
function runDemo(opts: { direct?: boolean } = {}) {
  const [cmd, args] = opts.direct
    ? [process.execPath, ['--import', 'tsx', 'scripts/demo.ts']]
    : ['npm', ['run', '--silent', 'demo']];
  const child = spawn(cmd, args, {
    cwd: REPO_ROOT,
    env: { ...process.env, NO_COLOR: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
    // its own process group, like a terminal's foreground job
    detached: opts.direct ?? false,
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
  return { child, output: () => out, exited };
}

/** Processes whose command line mentions `text` (the demo's agents and Deckard carry its dir). */
function processesMentioning(text: string): string[] {
  const found: string[] = [];
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
      if (cmd.includes(text)) found.push(`${pid}: ${cmd.slice(0, 200)}`);
    } catch {
      // exited meanwhile
    }
  }
  return found;
}

// concurrent: each demo has its own temp dir, ports and processes (the Ctrl-C one looks only at its own)
describe.concurrent('npm run demo', { timeout: 240_000 }, () => {
  it('plays the whole story, prints the summary and exits 0, leaving nothing behind', async () => {
    const demo = runDemo();
    const code = await demo.exited;
    const out = demo.output();
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
    expect(summary).toMatch(
      /sparkctl \(development\) +— +single +— +refused +development needs the dstack executor/,
    );
    expect(summary).toMatch(/PR #4 \(fork\) .* refused +Spark test refused — PR #4 comes from a fork/);
    expect(summary).toContain('hosts: spark-1 service, spark-2 idle');
    expect(summary).toMatch(/schema violations: 0/);
    // the timeline told the story: the pair held spark-1, Deckard went away and came back
    expect(out).toMatch(/spark-1 +service → held for r-2/);
    expect(out).toContain('Demo finished');
    // its temp dir (ledger, configs, host state) is gone
    const state = /state \(ledger, configs, logs\): (\S+)/.exec(out)?.[1];
    expect(state).toMatch(/spark-system-/);
    expect(existsSync(state!)).toBe(false);
  });

  it('Ctrl-C stops the controller, agents, Deckard and fake GitHub and removes its temp dir', async () => {
    // a terminal's Ctrl-C: SIGINT to the whole foreground process group
    const demo = runDemo({ direct: true });
    const state = await waitFor(
      'the demo to be up',
      () => /state \(ledger, configs, logs\): (\S+)/.exec(demo.output())?.[1],
      120_000,
      100,
    );
    const url = /dashboard: (http:\/\/127\.0\.0\.1:\d+)\//.exec(demo.output())![1]!;
    expect((await fetch(`${url}/healthz`)).ok).toBe(true);
    expect(processesMentioning(state).length).toBeGreaterThan(0);
    process.kill(-demo.child.pid!, 'SIGINT');
    const code = await demo.exited;
    expect(code, demo.output()).toBe(130);
    expect(demo.output()).toContain('interrupted: stopping the controller, agents and fake GitHub');
    await waitFor(
      'every demo process to be gone',
      () => processesMentioning(state).length === 0,
      20_000,
    ).catch((e) => {
      throw new Error(`${(e as Error).message}: ${processesMentioning(state).join('; ')}`);
    });
    expect(existsSync(state)).toBe(false);
    const after = await fetch(`${url}/healthz`).then(
      () => 'answering',
      () => 'gone',
    );
    expect(after).toBe('gone');
  });
});
