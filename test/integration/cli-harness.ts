import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { join } from 'node:path';
import { eq } from 'drizzle-orm';
import type { SparkConfigInput } from '../../core/config.ts';
import type { HostFacts } from '../../core/model.ts';
import { type DesiredState, PollResponseSchema, type Report } from '../../core/protocol/agent.ts';
import { FleetResponse, type ReservationInfo, ReservationResponse } from '../../core/protocol/api.ts';
import { createApiToken } from '../../functions/auth/tokens.ts';
import type { Ledger } from '../../functions/ledger/ledger.ts';
import * as schema from '../../functions/ledger/schema.ts';
import { buildTarget, targetNamed } from '../../scripts/build.ts';
import { idleFacts, servingFacts, tempDir } from '../../scripts/sim/ledger.ts';
import { startTestController } from '../helpers/controller.ts';

/**
 * Shared harness of the sparkctl and MCP tests: a real controller on loopback with API tokens, an
 * agent stand-in that speaks the real agent API over HTTP (heartbeat, poll, report: what the relay
 * agent does, without the host work), and the sparkctl bundle run as real child processes (or the
 * CLI's `main()` in this process, `runSparkctlHere`, for the cases about a command's behaviour). The
 * tests read state through the operator API, so they depend on the controller's interfaces only.
 */

export const FAST_TIMINGS = { heartbeatIntervalS: 1, offlineAfterS: 30 } as const;

/** A controller the stand-ins talk to: its root URL and an operate token. */
export interface ApiTarget {
  url: string;
  ops: string;
}

export async function startApiController(opts: { config?: SparkConfigInput; clock?: () => number } = {}) {
  const c = await startTestController({
    config: { timings: { ...FAST_TIMINGS }, ...(opts.config ?? {}) },
    ...(opts.clock ? { clock: opts.clock } : {}),
  });
  const ops = await createApiToken(c.ledger, { name: 'ops', scopes: ['operate'] }, 'test');
  const dev = await createApiToken(c.ledger, { name: 'dev', scopes: ['develop'] }, 'test');
  const dev2 = await createApiToken(c.ledger, { name: 'dev2', scopes: ['develop'] }, 'test');
  const em = await createApiToken(c.ledger, { name: 'oncall', scopes: ['operate', 'emergency'] }, 'test');
  const call = (token: string | null, method: string, path: string, body?: unknown) =>
    http(c.url, token, method, path, body);
  const target: ApiTarget = { url: c.url, ops: ops.token };
  return { c, target, tokens: { ops: ops.token, dev: dev.token, dev2: dev2.token, em: em.token }, call };
}

/** One JSON call; answers the status and the parsed body. */
export async function http(url: string, token: string | null, method: string, path: string, body?: unknown) {
  const res = await fetch(`${url}${path}`, {
    method,
    headers: {
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
    },
    ...(body !== undefined ? { body: typeof body === 'string' ? body : JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null, text };
}

async function must(t: ApiTarget, token: string, method: string, path: string, body?: unknown) {
  const r = await http(t.url, token, method, path, body);
  if (r.status >= 300) throw new Error(`${method} ${path} answered ${r.status}: ${r.text}`);
  return r.body;
}

/** A reservation as the operator API shows it. */
export async function reservationOf(t: ApiTarget, id: string): Promise<ReservationInfo | null> {
  const r = await http(t.url, t.ops, 'GET', `/api/v1/reservations/${id}`);
  if (r.status === 404) return null;
  if (r.status !== 200) throw new Error(`GET reservation ${id}: ${r.status} ${r.text}`);
  return ReservationResponse.parse(r.body).reservation;
}

/** A host as the public fleet view shows it. */
export async function hostOf(t: ApiTarget, id: string) {
  const f = FleetResponse.parse(await must(t, t.ops, 'GET', '/api/v1/fleet'));
  const h = f.hosts.find((x) => x.id === id);
  if (!h) throw new Error(`no host ${id} in the fleet`);
  return h;
}

const agentTokens = new Map<string, string>();

/** The host's agent token (created once per controller through the operator API). */
async function agentToken(t: ApiTarget, hostId: string): Promise<string> {
  const key = `${t.url} ${hostId}`;
  let token = agentTokens.get(key);
  if (!token) {
    token = (await must(t, t.ops, 'POST', `/api/v1/hosts/${hostId}/agent-tokens`)).token as string;
    agentTokens.set(key, token);
  }
  return token;
}

/** An agent heartbeat (POST /agent/v1/heartbeat) with these facts. */
export async function heartbeat(t: ApiTarget, hostId: string, facts: HostFacts): Promise<void> {
  await must(t, await agentToken(t, hostId), 'POST', '/agent/v1/heartbeat', { facts });
}

/** Adopts hosts and heartbeats them like live agents (home-service hosts report serving). */
export async function agentOnline(t: ApiTarget, hostIds?: string[]): Promise<void> {
  const fleet = FleetResponse.parse(await must(t, t.ops, 'GET', '/api/v1/fleet'));
  for (const h of fleet.hosts) {
    if (hostIds && !hostIds.includes(h.id)) continue;
    await must(t, t.ops, 'POST', `/api/v1/hosts/${h.id}/adopt`, {});
    await heartbeat(t, h.id, h.homeService ? servingFacts() : idleFacts());
  }
}

/** Polls the host's desired state until it is `state`; answers it. */
async function desired(t: ApiTarget, hostId: string, state: DesiredState['state']) {
  const token = await agentToken(t, hostId);
  return until(`${hostId} to be asked to ${state}`, async () => {
    const d = PollResponseSchema.parse(
      await must(t, token, 'POST', '/agent/v1/poll', { maxWaitMs: 0 }),
    ).desired;
    return d.state === state ? d : undefined;
  });
}

async function report(t: ApiTarget, hostId: string, body: Report): Promise<void> {
  await must(t, await agentToken(t, hostId), 'POST', '/agent/v1/report', body);
}

/**
 * What each host's agent does for a granted lease: (a lent home service drained, stopped and the
 * GPU verified free, so the heartbeat says so) then the `prepared` report with the lease's
 * fencing token.
 */
export async function agentReportsPrepared(t: ApiTarget, reservationId: string): Promise<void> {
  const r = await reservationOf(t, reservationId);
  for (const l of r?.leases.filter((x) => x.status === 'active') ?? []) {
    const d = await desired(t, l.hostId, 'prepare');
    if (d.state !== 'prepare') continue;
    if (d.lease.lend) await heartbeat(t, l.hostId, idleFacts({ serviceState: 'stopped' }));
    await report(t, l.hostId, {
      type: 'prepared',
      fencingToken: d.lease.fencingToken,
      serviceLent: d.lease.lend,
    });
  }
}

/** What a `dstack` host's agent reports once the dev environment runs: `lease_active` with its attach command. */
export async function agentReportsActive(
  t: ApiTarget,
  reservationId: string,
  attach: (hostId: string) => string,
) {
  const r = await reservationOf(t, reservationId);
  for (const l of r?.leases.filter((x) => x.status === 'active') ?? []) {
    const d = await desired(t, l.hostId, 'develop');
    if (d.state === 'develop')
      await report(t, l.hostId, {
        type: 'lease_active',
        fencingToken: d.lease.fencingToken,
        attach: attach(l.hostId),
      });
  }
}

/** What each host's agent does when asked to clean: the `cleaned` report with the fencing token. */
export async function agentReportsCleaned(t: ApiTarget, reservationId: string): Promise<void> {
  const r = await reservationOf(t, reservationId);
  for (const l of r?.leases.filter((x) => x.status === 'releasing') ?? []) {
    const d = await desired(t, l.hostId, 'clean');
    if (d.state === 'clean')
      await report(t, l.hostId, { type: 'cleaned', fencingToken: d.lease.fencingToken });
  }
}

/**
 * What a home-service host's agent does when asked to restore: recreate the service, then report
 * `restored` with the host's fencing token once its model-ready check passed (`ok`) or failed.
 */
export async function agentReportsRestored(t: ApiTarget, hostId: string, ok = true): Promise<void> {
  const d = await desired(t, hostId, 'restore');
  if (d.state !== 'restore') return;
  await report(t, hostId, {
    type: 'restored',
    fencingToken: d.fencingToken,
    ok,
    detail: ok ? 'model-ready check: HTTP 200' : 'model-ready check: HTTP 503',
  });
  await heartbeat(t, hostId, ok ? servingFacts() : idleFacts({ serviceState: 'failed' }));
}

// ------------------------------------------------------------ in-process ledger shortcuts
// Used by the controller's own API tests (metrics, dashboard, operator API): they write the
// ledger directly; the sparkctl and MCP tests use the agent API stand-in above instead.

/** Adopts hosts and heartbeats them like live agents (spark-1 style hosts serve their service). */
export async function bringOnline(ledger: Ledger, hostIds?: string[]): Promise<void> {
  for (const h of ledger.config.hosts) {
    if (hostIds && !hostIds.includes(h.id)) continue;
    await ledger.setManaged(h.id, true, 'operator:test');
    await ledger.recordHeartbeat(h.id, h.homeService ? servingFacts() : idleFacts());
  }
}

/**
 * Every host heartbeated once, an hour ago, from an agent that runs the dstack executor: the fleet's
 * backends are known, so development requests are accepted (ADR 0176), and every host is offline
 * now, so they stay queued.
 */
export async function heardAnHourAgo(ledger: Ledger): Promise<void> {
  for (const h of ledger.config.hosts)
    await ledger.recordHeartbeat(h.id, h.homeService ? servingFacts() : idleFacts());
  await ledger.db.update(schema.hosts).set({ lastHeartbeatAt: ledger.clock() - 3_600_000 });
}

/** What the agent API does when every lease reported `prepared`. */
export async function agentPrepared(ledger: Ledger, reservationId: string): Promise<void> {
  await ledger.write(async (tx, now, changed) => {
    for (const l of await ledger.leasesOf(tx, reservationId)) {
      await tx.update(schema.leases).set({ preparedAt: now }).where(eq(schema.leases.id, l.id));
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

export async function reservationRow(ledger: Ledger, id: string) {
  return ledger.getReservation(undefined, id);
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

let bundle: { path: string; cleanup: () => void } | null = null;

/**
 * The sparkctl single-file bundle (the artefact users run): the one the run's global setup built
 * (test/setup/sparkctl-bundle.ts), else built once for this file.
 */
export async function sparkctlBundle(): Promise<string> {
  const built = process.env.SPARK_TEST_SPARKCTL_BUNDLE;
  if (built) return built;
  if (bundle) return bundle.path;
  const { dir, cleanup } = tempDir('sparkctl-bundle-');
  const path = join(dir, 'sparkctl.mjs');
  await buildTarget(targetNamed('sparkctl'), path);
  bundle = { path, cleanup };
  return path;
}

/** Removes a bundle this file built (the run's shared one stays for the files after it). */
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
    env: sparkctlEnv(env, home),
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

/** The environment a sparkctl run gets: nothing of the test process's but PATH. */
function sparkctlEnv(env: Record<string, string>, home: string): Record<string, string> {
  return {
    PATH: process.env.PATH ?? '',
    HOME: home,
    XDG_CONFIG_HOME: join(home, '.config'),
    SPARKCTL_POLL_MS: '100',
    ...env,
  };
}

/**
 * One sparkctl invocation in this process: the CLI's `main(argv, io, env)` (cli/main.ts), which
 * `runProcess` runs for the bundle, with the same arguments and environment `spawnSparkctl` gives
 * the process, and its output lines as `runProcess` writes them. A sparkctl process costs ~0.4 s of
 * CPU to start (docs/performance.md "Test wall time"); cases about a command's behaviour run here,
 * and the cases about the process (the bundle users run, its help, Ctrl-C, `--wait`, the working
 * directory, an unreachable controller) run the bundle (docs/adr/0345-system-tests-share-their-workers.md).
 */
export async function runSparkctlHere(
  args: string[],
  env: Record<string, string>,
  home: string,
): Promise<RunResult> {
  const { main } = await import('../../cli/main.ts');
  let stdout = '';
  let stderr = '';
  const code = await main(
    args,
    {
      out: (t) => {
        stdout += `${t}\n`;
      },
      err: (t) => {
        stderr += `${t}\n`;
      },
      // no Ctrl-C reaches a run in this process; the process cases cover it
      onInterrupt: () => () => undefined,
    },
    sparkctlEnv(env, home),
  );
  return { code, stdout, stderr };
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
