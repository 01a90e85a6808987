import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { join } from 'node:path';
import { eq } from 'drizzle-orm';
import type { SparkConfigInput } from '../../core/config.ts';
import { createApiToken } from '../../functions/auth/tokens.ts';
import type { Ledger } from '../../functions/ledger/ledger.ts';
import * as t from '../../functions/ledger/schema.ts';
import { buildTarget, targets } from '../../scripts/build.ts';
import { startTestController } from '../helpers/controller.ts';
import { idleFacts, servingFacts, tempDir } from '../helpers/ledger.ts';

/**
 * Shared harness of the issue-6 tests: a real controller on loopback with API tokens, an agent
 * stand-in that moves leases through the ledger like the agent API does, and the sparkctl bundle
 * run as real child processes.
 */

export const FAST_TIMINGS = { heartbeatIntervalS: 1, offlineAfterS: 30 } as const;

export async function startApiController(opts: { config?: SparkConfigInput; clock?: () => number } = {}) {
  const c = await startTestController({
    config: { timings: { ...FAST_TIMINGS }, ...(opts.config ?? {}) },
    ...(opts.clock ? { clock: opts.clock } : {}),
  });
  const ops = await createApiToken(c.ledger, { name: 'ops', scopes: ['operate'] }, 'test');
  const dev = await createApiToken(c.ledger, { name: 'dev', scopes: ['develop'] }, 'test');
  const dev2 = await createApiToken(c.ledger, { name: 'dev2', scopes: ['develop'] }, 'test');
  const em = await createApiToken(c.ledger, { name: 'oncall', scopes: ['operate', 'emergency'] }, 'test');
  const call = async (token: string | null, method: string, path: string, body?: unknown) => {
    const res = await fetch(`${c.url}${path}`, {
      method,
      headers: {
        ...(token ? { authorization: `Bearer ${token}` } : {}),
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      },
      ...(body !== undefined ? { body: typeof body === 'string' ? body : JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : null, text };
  };
  return { c, tokens: { ops: ops.token, dev: dev.token, dev2: dev2.token, em: em.token }, call };
}

/** Adopts hosts and heartbeats them like live agents (spark-1 style hosts serve their service). */
export async function bringOnline(ledger: Ledger, hostIds?: string[]): Promise<void> {
  for (const h of ledger.config.hosts) {
    if (hostIds && !hostIds.includes(h.id)) continue;
    await ledger.setManaged(h.id, true, 'operator:test');
    await ledger.recordHeartbeat(h.id, h.homeService ? servingFacts() : idleFacts());
  }
}

/** What the agent API does when every lease reported `prepared`. */
export async function agentPrepared(ledger: Ledger, reservationId: string): Promise<void> {
  await ledger.write(async (tx, now, changed) => {
    for (const l of await ledger.leasesOf(tx, reservationId)) {
      await tx.update(t.leases).set({ preparedAt: now }).where(eq(t.leases.id, l.id));
      // a lent home service is stopped and the GPU verified free before `prepared`
      if (l.lend) await ledger.recordHeartbeat(l.hostId, idleFacts({ serviceState: 'stopped' }));
      changed.add(`host:${l.hostId}`);
    }
    await ledger.advanceReservation(reservationId, 'preparing', 'every lease prepared', 'agent:test', tx);
    changed.add('reservation');
  });
}

/** What the agent API does when the agent reports `cleaned` for every releasing lease. */
export async function agentCleaned(ledger: Ledger, reservationId: string): Promise<void> {
  for (const l of await ledger.leasesOf(undefined, reservationId)) {
    if (l.status === 'releasing') await ledger.confirmReleased(l.hostId, l.fencingToken, `agent:${l.hostId}`);
  }
}

/** Polls `check` until it returns a value (not undefined/false) or the deadline passes. */
export async function until<T>(
  what: string,
  check: () => Promise<T | undefined | false> | T | undefined | false,
  ms = 15_000,
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

export async function reservationRow(ledger: Ledger, id: string) {
  return ledger.getReservation(undefined, id);
}

let bundle: { path: string; cleanup: () => void } | null = null;

/** Builds the sparkctl single-file bundle once per test file (the artefact users run). */
export async function sparkctlBundle(): Promise<string> {
  if (bundle) return bundle.path;
  const { dir, cleanup } = tempDir('sparkctl-bundle-');
  const target = targets.find((x) => x.name === 'sparkctl');
  if (!target) throw new Error('scripts/build.ts has no sparkctl target');
  const path = join(dir, 'sparkctl.mjs');
  await buildTarget(target, path);
  bundle = { path, cleanup };
  return path;
}

export function cleanupBundle(): void {
  bundle?.cleanup();
  bundle = null;
}

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** A sparkctl process with its output so far; `waitFor` polls its stdout/stderr. */
export interface SparkctlProcess {
  child: ChildProcessWithoutNullStreams;
  out(): string;
  err(): string;
  waitFor(re: RegExp, ms?: number): Promise<string>;
  done: Promise<RunResult>;
}

export function spawnSparkctl(
  bin: string,
  args: string[],
  env: Record<string, string>,
  home: string,
  cwd?: string,
): SparkctlProcess {
  const child = spawn(process.execPath, [bin, ...args], {
    ...(cwd ? { cwd } : {}),
    env: {
      PATH: process.env.PATH ?? '',
      HOME: home,
      XDG_CONFIG_HOME: join(home, '.config'),
      SPARKCTL_POLL_MS: '100',
      ...env,
    },
    stdio: 'pipe',
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => {
    stdout += d;
  });
  child.stderr.on('data', (d) => {
    stderr += d;
  });
  const done = new Promise<RunResult>((resolve) => {
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
  return {
    child,
    out: () => stdout,
    err: () => stderr,
    waitFor: (re, ms = 15_000) =>
      until(
        `sparkctl output matching ${re}`,
        () => {
          const m = re.exec(stdout) ?? re.exec(stderr);
          return m ? m[0] : undefined;
        },
        ms,
      ).catch((e) => {
        throw new Error(`${(e as Error).message}\n--- stdout\n${stdout}\n--- stderr\n${stderr}`);
      }),
    done,
  };
}

export async function runSparkctl(
  bin: string,
  args: string[],
  env: Record<string, string>,
  home: string,
  cwd?: string,
): Promise<RunResult> {
  return spawnSparkctl(bin, args, env, home, cwd).done;
}
