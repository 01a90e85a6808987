import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import { killGroup, killQuietly, processStartMs } from '../../scripts/sim/harness/processes.ts';

/**
 * The system harness kills runners by the pid they reported, at teardown, possibly minutes after
 * they exited. pid_max is 32,768 on this machine and parallel test suites wrap it within
 * minutes, so that number may belong to any other process by then — a controller of a load test
 * running beside it, say, which then answers ECONNREFUSED. These tests run real processes.
 */

const started: ChildProcess[] = [];
afterEach(() => {
  for (const p of started.splice(0))
    if (p.pid && p.exitCode === null && p.signalCode === null) killQuietly(p.pid);
});

/** A process that answers each line on stdin with "pong" (so a test can ask whether it still runs). */
function idle(detached: boolean): ChildProcess {
  const p = spawn(
    process.execPath,
    ['-e', 'process.stdin.on("data", () => process.stdout.write("pong\\n")); console.log("up")'],
    { detached, stdio: ['pipe', 'pipe', 'ignore'] },
  );
  started.push(p);
  return p;
}

async function up(p: ChildProcess): Promise<void> {
  await once(p.stdout!, 'data');
}

/**
 * Whether `p` still runs after whatever was done to it: a SIGKILL sent before the ping ends the
 * process before it can read it, so it answers only if it was left alone.
 */
async function answers(p: ChildProcess): Promise<boolean> {
  if (p.exitCode !== null || p.signalCode !== null) return false;
  const pong = once(p.stdout!, 'data').then(() => true);
  const exit = once(p, 'exit').then(() => false);
  p.stdin!.on('error', () => {}); // a write to a killed process fails with EPIPE
  p.stdin!.write('ping\n');
  return Promise.race([pong, exit]);
}

function alive(pid: number): boolean {
  return processStartMs(pid) !== null;
}

async function gone(pid: number): Promise<boolean> {
  // the orphan is not our child: poll /proc until it is gone (bounded; a timing is not asserted)
  const deadline = Date.now() + 10_000;
  while (alive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  return !alive(pid);
}

describe('killGroup (system harness teardown)', () => {
  it('leaves alone a process that got the pid after the runner was seen (pid reuse)', async () => {
    const seenAt = Date.now() - 60_000; // the runner registered a minute ago
    const other = idle(false); // started now: it only shares the number
    await up(other);
    killGroup(other.pid!, seenAt);
    expect(await answers(other), 'a process that started after the runner was seen was killed').toBe(true);
  });

  it('kills a runner that leads its group, with its group', async () => {
    const runner = idle(true);
    await up(runner);
    const exited = once(runner, 'exit');
    killGroup(runner.pid!, Date.now());
    const [, signal] = await exited;
    expect(signal).toBe('SIGKILL');
  });

  it('kills a runner that does not lead a group (only itself)', async () => {
    const runner = idle(false);
    await up(runner);
    const exited = once(runner, 'exit');
    killGroup(runner.pid!, Date.now());
    const [, signal] = await exited;
    expect(signal).toBe('SIGKILL');
  });

  it('reaches the members left in a group whose leader has exited, and nothing else', async () => {
    // the leader prints the pid of a member it leaves behind in its group, then exits
    const leader = spawn('/bin/sh', ['-c', 'sleep 60 & echo $!'], {
      detached: true,
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    started.push(leader);
    const [chunk] = (await once(leader.stdout!, 'data')) as [Buffer];
    const member = Number(String(chunk).trim());
    await once(leader, 'exit');
    expect(alive(member)).toBe(true);
    const bystander = idle(false);
    await up(bystander);
    killGroup(leader.pid!, Date.now());
    expect(await gone(member), 'the group member left running').toBe(true);
    expect(await answers(bystander)).toBe(true);
  });

  it('processStartMs: when a process started, never later than it did; null once it is gone', async () => {
    const before = Date.now();
    const p = idle(false);
    await up(p);
    const at = processStartMs(p.pid!)!;
    // btime is whole seconds, so the value may be up to 1 s early, never late
    expect(at).toBeGreaterThan(before - 1_500);
    expect(at).toBeLessThanOrEqual(Date.now());
    const exited = once(p, 'exit');
    killQuietly(p.pid!);
    await exited;
    expect(processStartMs(p.pid!)).toBeNull();
  });
});
