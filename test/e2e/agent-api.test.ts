import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { eq } from 'drizzle-orm';
import { afterEach, describe, expect, it } from 'vitest';
import { type PollResponse, PollResponseSchema } from '../../core/protocol/agent.ts';
import { agentApiModule } from '../../functions/agent-api/index.ts';
import { createApp } from '../../functions/app.ts';
import { createAgentToken, createApiToken, sha256Hex } from '../../functions/auth/tokens.ts';
import * as t from '../../functions/ledger/schema.ts';
import type { RunningController } from '../../functions/node-server.ts';
import { idleFacts, servingFacts } from '../../scripts/sim/ledger.ts';
import { startTestController } from '../helpers/controller.ts';

/**
 * The agent API over a real loopback HTTP port with a real libSQL file: authentication, limits,
 * fencing, long-poll and the one-time JIT handoff. (The GitHub part normally writes the
 * jit_handoffs row; these tests insert it themselves.)
 */

let c: (RunningController & { dir: string }) | null = null;
afterEach(async () => {
  await c?.close();
  c = null;
});

async function boot(env: Record<string, string> = {}) {
  c = await startTestController({
    config: {
      hosts: [
        { id: 'spark-1', homeService: 'deckard' },
        { id: 'spark-2', homeService: null },
      ],
      timings: { heartbeatIntervalS: 1, offlineAfterS: 4 },
    },
    env: { SPARK_AGENT_LONG_POLL_S: '5', ...env },
    modules: [agentApiModule],
  });
  const tok: Record<string, string> = {};
  for (const id of ['spark-1', 'spark-2']) {
    await c.ledger.setManaged(id, true, 'test');
    tok[id] = (await createAgentToken(c.ledger, id, 'test')).token;
  }
  return { c, tok };
}

async function call(path: string, token: string | null, body: unknown, method = 'POST') {
  const res = await fetch(`${c!.url}${path}`, {
    method,
    headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, json: text ? JSON.parse(text) : null };
}

async function eventCount() {
  return (await c!.ledger.db.select().from(t.events)).length;
}

async function heartbeat(token: string, facts = idleFacts()) {
  const r = await call('/agent/v1/heartbeat', token, { facts });
  expect(r.status).toBe(200);
}

async function poll(token: string, body: unknown = {}): Promise<PollResponse> {
  const r = await call('/agent/v1/poll', token, body);
  expect(r.status, JSON.stringify(r.json)).toBe(200);
  return PollResponseSchema.parse(r.json);
}

/** spark-2 granted a single reservation; returns the reservation id and lease. */
async function grantSpark2(tok: Record<string, string>) {
  await heartbeat(tok['spark-1']!, servingFacts());
  await heartbeat(tok['spark-2']!);
  const r = await c!.ledger.createReservation(
    {
      kind: 'manual',
      topology: 'single',
      repo: 'acme/butter',
      pr: 1,
      headSha: 'a'.repeat(40),
      suite: 'smoke',
      requester: 't',
    },
    'test',
  );
  await c!.loop.runNow();
  const [lease] = await c!.ledger.leasesOf(undefined, r.id);
  expect(lease!.hostId).toBe('spark-2');
  return { id: r.id, lease: lease! };
}

describe('agent API: authentication and limits', () => {
  it('answers 401 for a missing, unknown or revoked agent token, and binds a token to its host', async () => {
    const { tok } = await boot();
    expect((await call('/agent/v1/poll', null, {})).status).toBe(401);
    const unknown = await call('/agent/v1/poll', 'spk_agent_nope', {});
    expect(unknown.status).toBe(401);
    expect(unknown.json.error.code).toBe('unauthorized');
    expect((await poll(tok['spark-2']!)).hostId).toBe('spark-2');

    const operator = (await createApiToken(c!.ledger, { name: 'ops', scopes: ['operate'] }, 'test')).token;
    const dev = (await createApiToken(c!.ledger, { name: 'dev', scopes: ['develop'] }, 'test')).token;
    expect((await call('/api/v1/hosts/spark-2/agent-tokens', null, {})).status).toBe(401);
    expect((await call('/api/v1/hosts/spark-2/agent-tokens', dev, {})).status).toBe(403);
    expect((await call('/api/v1/hosts/spark-9/agent-tokens', operator, {})).status).toBe(404);
    const created = await call('/api/v1/hosts/spark-2/agent-tokens', operator, {});
    expect(created.status).toBe(201);
    expect(created.json).toMatchObject({ hostId: 'spark-2', token: expect.stringMatching(/^spk_agent_/) });
    const row = (
      await c!.ledger.db.select().from(t.agentTokens).where(eq(t.agentTokens.id, created.json.id))
    )[0]!;
    expect(row.tokenHash).toBe(await sha256Hex(created.json.token));
    expect((await poll(created.json.token)).hostId).toBe('spark-2');

    const revoked = await call(`/api/v1/agent-tokens/${created.json.id}`, operator, undefined, 'DELETE');
    expect(revoked.status).toBe(200);
    expect((await call('/agent/v1/poll', created.json.token, {})).status).toBe(401);
  });

  it('bootstraps a token from the command line against the ledger file (npm run agent-token)', async () => {
    await boot();
    const { execFile } = await import('node:child_process');
    const { join } = await import('node:path');
    const run = (...args: string[]) =>
      new Promise<{ code: number; stdout: string; stderr: string }>((res) => {
        execFile(
          process.execPath,
          ['--import', 'tsx', 'scripts/agent-token.ts', ...args],
          { env: { ...process.env, SPARK_LEDGER_URL: `file:${join(c!.dir, 'spark.db')}`, SPARK_CONFIG: '' } },
          (err, stdout, stderr) => res({ code: err ? Number(err.code) : 0, stdout, stderr }),
        );
      });
    const created = await run('create', 'spark-2');
    expect(created.code, created.stderr).toBe(0);
    const token = created.stdout.trim();
    expect(token).toMatch(/^spk_agent_/);
    expect((await poll(token)).hostId).toBe('spark-2');
  });

  it('refuses bodies over the limit with 413 and malformed ones with 400, writing nothing', async () => {
    const { tok } = await boot();
    const before = await eventCount();
    const big = await call('/agent/v1/report', tok['spark-2']!, {
      type: 'runner_exited',
      fencingToken: 1,
      runnerName: 'x',
      exitCode: 1,
      lastLines: ['x'.repeat(70 * 1024)],
    });
    expect(big.status).toBe(413);
    expect(big.json.error.code).toBe('payload_too_large');
    const bad = await call('/agent/v1/report', tok['spark-2']!, { type: 'prepared', fencingToken: 'one' });
    expect(bad.status).toBe(400);
    expect(bad.json.error.message).toContain('fencingToken');
    const badFacts = await call('/agent/v1/heartbeat', tok['spark-2']!, { facts: { gpuProcesses: 'idle' } });
    expect(badFacts.status).toBe(400);
    expect(await eventCount()).toBe(before);
    expect((await c!.ledger.getHost(undefined, 'spark-2'))!.lastHeartbeatAt).toBeNull();
  });

  it('rate-limits an agent with 429 and Retry-After', async () => {
    const { tok } = await boot({ SPARK_AGENT_RATE_LIMIT: '6' });
    const statuses: number[] = [];
    for (let i = 0; i < 8; i++) statuses.push((await call('/agent/v1/poll', tok['spark-2']!, {})).status);
    expect(statuses.slice(0, 5)).toEqual([200, 200, 200, 200, 200]);
    const limited = await call('/agent/v1/poll', tok['spark-2']!, {});
    expect(limited.status).toBe(429);
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
    // another host's agent has its own budget
    expect((await call('/agent/v1/poll', tok['spark-1']!, {})).status).toBe(200);
  });
});

describe('agent API: desired state, fencing and the JIT handoff', () => {
  it('rejects a report with a stale fencing token with 409 and changes nothing', async () => {
    const { tok } = await boot();
    const { lease } = await grantSpark2(tok);
    const before = await eventCount();
    const stale = await call('/agent/v1/report', tok['spark-2']!, {
      type: 'prepared',
      fencingToken: lease.fencingToken + 1,
      serviceLent: false,
    });
    expect(stale.status).toBe(409);
    expect(stale.json.error.code).toBe('stale_fencing_token');
    // a token bound to spark-1 cannot report for spark-2's lease either
    const other = await call('/agent/v1/report', tok['spark-1']!, {
      type: 'prepared',
      fencingToken: lease.fencingToken,
      serviceLent: false,
    });
    expect(other.status).toBe(409);
    expect(await eventCount()).toBe(before);
    expect((await c!.ledger.leasesOf(undefined, lease.reservationId))[0]!.preparedAt).toBeNull();
  });

  it('refuses "prepared" for a lending lease until the service was lent (no grant while Deckard holds the GPU)', async () => {
    const { tok } = await boot();
    await heartbeat(tok['spark-1']!, servingFacts());
    const r = await c!.ledger.createReservation(
      { kind: 'development', topology: 'single', targetHost: 'spark-1', requester: 'dev' },
      'test',
    );
    await c!.loop.runNow();
    const d = await poll(tok['spark-1']!);
    expect(d.desired).toMatchObject({ state: 'prepare', lease: { lend: true, reservationId: r.id } });
    const token = (d.desired as { lease: { fencingToken: number } }).lease.fencingToken;
    const res = await call('/agent/v1/report', tok['spark-1']!, {
      type: 'prepared',
      fencingToken: token,
      serviceLent: false,
    });
    expect(res.status).toBe(409);
    expect(res.json.error.code).toBe('service_not_lent');
    // lent: the development lease goes preparing, then running once the agent reports it active
    expect(
      (
        await call('/agent/v1/report', tok['spark-1']!, {
          type: 'prepared',
          fencingToken: token,
          serviceLent: true,
        })
      ).status,
    ).toBe(200);
    expect((await poll(tok['spark-1']!)).desired.state).toBe('develop');
    expect(
      (await call('/agent/v1/report', tok['spark-1']!, { type: 'lease_active', fencingToken: token })).status,
    ).toBe(200);
    expect((await c!.ledger.getReservation(undefined, r.id))!.status).toBe('running');
    // processes are expected while the lease lasts
    const early = await call('/agent/v1/report', tok['spark-1']!, {
      type: 'processes_remain',
      fencingToken: token,
      processes: [],
    });
    expect(early.status).toBe(409);
    // once it has run out (and the controller's expiry pass has not acted yet), the agent's
    // report makes the host release-required; nothing is killed, the lease stays bound
    await c!.ledger.write(async (tx, now) => {
      await tx
        .update(t.leases)
        .set({ expiresAt: now - 1 })
        .where(eq(t.leases.reservationId, r.id));
    });
    const late = await call('/agent/v1/report', tok['spark-1']!, {
      type: 'processes_remain',
      fencingToken: token,
      processes: [{ pid: 4321, name: '/usr/bin/python3', usedMemoryMiB: 2048 }],
    });
    expect(late.status).toBe(200);
    expect((await c!.ledger.getHost(undefined, 'spark-1'))!.phase).toBe('release-required');
    expect((await poll(tok['spark-1']!)).desired).toMatchObject({
      state: 'hold',
      lease: { fencingToken: token },
    });
  });

  it('hands the JIT config over exactly once, with a job token whose hash is stored', async () => {
    const { tok } = await boot();
    const { id, lease } = await grantSpark2(tok);
    const d0 = await poll(tok['spark-2']!);
    expect(d0.desired).toMatchObject({
      state: 'prepare',
      lease: { fencingToken: lease.fencingToken, lend: false },
    });
    expect(
      (
        await call('/agent/v1/report', tok['spark-2']!, {
          type: 'prepared',
          fencingToken: lease.fencingToken,
          serviceLent: false,
        })
      ).json.result,
    ).toBe(`reservation ${id} preparing`);
    expect((await poll(tok['spark-2']!)).desired.state).toBe('wait');

    const jit = 'eyJydW5uZXIiOiJzZWNyZXQtaml0LWNvbmZpZyJ9';
    await c!.ledger.write(async (tx, now, changed) => {
      await tx.insert(t.jitHandoffs).values({
        runnerName: `spark-spark-2-${id}-a0`,
        leaseId: lease.id,
        reservationId: id,
        hostId: 'spark-2',
        attempt: 0,
        jitConfig: jit,
        createdAt: now,
      });
      changed.add('host:spark-2');
    });
    const first = await poll(tok['spark-2']!);
    expect(first.desired).toMatchObject({
      state: 'run',
      runnerName: `spark-spark-2-${id}-a0`,
      jitConfig: jit,
    });
    const jobToken = (first.desired as { jobToken: string }).jobToken;
    expect(jobToken).toMatch(/^spk_job_/);
    const second = await poll(tok['spark-2']!);
    expect(second.desired).toMatchObject({ state: 'run', runnerName: `spark-spark-2-${id}-a0` });
    expect(second.desired).not.toHaveProperty('jitConfig');
    expect(second.desired).not.toHaveProperty('jobToken');
    expect(second.version).toBe(first.version);

    const h = (await c!.ledger.db.select().from(t.jitHandoffs))[0]!;
    expect(h.jitConfig).toBeNull();
    expect(h.consumedAt).not.toBeNull();
    const l = (await c!.ledger.leasesOf(undefined, id))[0]!;
    expect(l.jobTokenHash).toBe(await sha256Hex(jobToken));
    // the config is in no event row
    for (const e of await c!.ledger.db.select().from(t.events)) {
      expect(`${e.cause} ${e.dataJson ?? ''}`).not.toContain(jit);
      expect(`${e.cause} ${e.dataJson ?? ''}`).not.toContain(jobToken);
    }
    // nor in any byte of the ledger files — the database, its -wal and -shm
    // (the config was erased in place and the WAL truncated after the hand-over); all 0600. The
    // truncation was queued with the answer, ahead of any later write of this process: once one
    // write has run after it, it is done
    await c!.ledger.write(async () => undefined);
    const files = readdirSync(c!.dir).filter((f) => f.startsWith('spark.db'));
    expect(files).toContain('spark.db');
    for (const f of files) {
      const bytes = readFileSync(join(c!.dir, f));
      expect(bytes.includes(Buffer.from(jit)), `JIT config recoverable from ${f}`).toBe(false);
      expect(statSync(join(c!.dir, f)).mode & 0o777, `mode of ${f}`).toBe(0o600);
    }

    // runner reports move the reservation: running, then releasing on exit, done after cleanup
    const rs = (body: object) =>
      call('/agent/v1/report', tok['spark-2']!, { fencingToken: lease.fencingToken, ...body });
    expect((await rs({ type: 'runner_started', runnerName: 'spark-other' })).status).toBe(409);
    expect((await rs({ type: 'runner_started', runnerName: `spark-spark-2-${id}-a0` })).json.result).toBe(
      `reservation ${id} running`,
    );
    expect((await rs({ type: 'cleaned' })).json.error.code).toBe('not_releasing');
    await rs({
      type: 'runner_exited',
      runnerName: `spark-spark-2-${id}-a0`,
      exitCode: 1,
      lastLines: ['boom'],
    });
    expect((await poll(tok['spark-2']!)).desired.state).toBe('clean');
    // the last heartbeat still listed the job on the GPU; the report that frees the host says
    // what the GPU shows now, and the controller stores it with the release
    const job = { pid: 5151, name: 'python3', usedMemoryMiB: 1024 };
    await heartbeat(tok['spark-2']!, idleFacts({ gpuProcesses: [job], runnerState: 'running' }));
    const beatAt = (await c!.ledger.getHost(undefined, 'spark-2'))!.lastHeartbeatAt;
    expect((await rs({ type: 'cleaned', facts: idleFacts() })).json.result).toBe(
      `${lease.id} released; reservation ${id} failed`,
    );
    const freed = (await c!.ledger.getHost(undefined, 'spark-2'))!;
    expect(freed.phase).toBe('idle');
    expect(JSON.parse(freed.factsJson!)).toMatchObject({ gpuProcesses: [], runnerState: 'none' });
    // a report is not a heartbeat: liveness still comes from heartbeats alone
    expect(freed.lastHeartbeatAt).toBe(beatAt);
    // a repeat of the same report is stale now: nothing changes
    expect((await rs({ type: 'cleaned' })).status).toBe(409);
    expect((await poll(tok['spark-2']!)).desired.state).toBe('idle');
  });

  it('holds a long-poll until the host changes (Node) and answers at once on Workers, saying why', async () => {
    const { tok } = await boot();
    await heartbeat(tok['spark-1']!, servingFacts());
    await heartbeat(tok['spark-2']!);
    const idle = await poll(tok['spark-2']!);
    expect(idle.desired.state).toBe('idle');
    // no version known yet: answered with the state as it is
    expect(idle.answered).toBe('changed');

    // held with nothing changing: the server waits the whole (short) wait the agent allowed
    const quiet = await poll(tok['spark-2']!, { since: idle.version, maxWaitMs: 300 });
    expect(quiet).toMatchObject({ version: idle.version, answered: 'timeout' });

    // the change is made once the poll is open on the server (its change listener registered)
    const ledger = c!.ledger;
    const subscribe = ledger.subscribe.bind(ledger);
    const open = new Promise<void>((resolve) => {
      ledger.subscribe = (fn) => {
        const off = subscribe(fn);
        resolve();
        return off;
      };
    });
    const held = poll(tok['spark-2']!, { since: idle.version, maxWaitMs: 20_000 });
    await open;
    ledger.subscribe = subscribe;
    await c!.ledger.createReservation(
      {
        kind: 'manual',
        topology: 'single',
        repo: 'acme/butter',
        pr: 1,
        headSha: 'b'.repeat(40),
        suite: 'smoke',
        requester: 't',
      },
      'test',
    );
    const changed = await held;
    expect(changed.desired.state).toBe('prepare');
    // answered because of the grant's change notice: not the periodic re-read, not the 5 s server
    // cap, not the 20 s the agent allowed
    expect(changed.answered).toBe('notice');

    const worker = createApp({ ...c!.ctx, runtime: 'worker' }, [agentApiModule]);
    const res = await worker.request('/agent/v1/poll', {
      method: 'POST',
      headers: { authorization: `Bearer ${tok['spark-2']}`, 'content-type': 'application/json' },
      body: JSON.stringify({ since: changed.version, maxWaitMs: 20_000 }),
    });
    expect(res.status).toBe(200);
    // Workers hold nothing: the same version, answered at once because it is not held
    expect(PollResponseSchema.parse(await res.json())).toMatchObject({
      version: changed.version,
      answered: 'no-hold',
    });
  });

  it('tells a restoring host to wait out the restore backoff, and a quarantined one to hold', async () => {
    const { tok } = await boot();
    await c!.ledger.write(async (tx, now) => {
      await tx
        .update(t.hosts)
        .set({ phase: 'restoring', restoreNotBefore: now + 30_000, restoreAttempts: 1 })
        .where(eq(t.hosts.id, 'spark-1'));
    });
    const d = await poll(tok['spark-1']!);
    expect(d.desired).toMatchObject({ state: 'restore', attempt: 1 });
    expect((d.desired as { waitMs: number }).waitMs).toBeGreaterThan(25_000);
    const wrong = await call('/agent/v1/report', tok['spark-1']!, {
      type: 'restored',
      fencingToken: 7,
      ok: true,
      detail: 'HTTP 200',
    });
    expect(wrong.status).toBe(409);
    const ok = await call('/agent/v1/report', tok['spark-1']!, {
      type: 'restored',
      fencingToken: 0,
      ok: true,
      detail: 'HTTP 200',
    });
    expect(ok.json.result).toBe('spark-1 service');
    expect((await poll(tok['spark-1']!)).desired.state).toBe('serve');

    await c!.ledger.write(async (tx) => {
      await tx
        .update(t.hosts)
        .set({ phase: 'quarantined', note: 'restore failed 4 times' })
        .where(eq(t.hosts.id, 'spark-1'));
    });
    const q = await poll(tok['spark-1']!);
    expect(q.desired).toMatchObject({
      state: 'hold',
      reason: expect.stringContaining('restore failed 4 times'),
    });
  });
});
