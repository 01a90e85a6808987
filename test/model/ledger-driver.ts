import { join } from 'node:path';
import { createClient } from '@libsql/client';
import type { SparkConfig } from '../../core/config.ts';
import type { HostFacts, Outcome } from '../../core/model.ts';
import { applyReport } from '../../functions/ledger/agent-reports.ts';
import { openLedgerDb } from '../../functions/ledger/db.ts';
import { Ledger } from '../../functions/ledger/ledger.ts';
import { cancelReservation, supersedeQueued } from '../../functions/ledger/reservations.ts';
import * as t from '../../functions/ledger/schema.ts';
import { startFakeSqld } from '../../scripts/sim/fake-sqld/server.ts';
import { makeTestLedger, testClock } from '../../scripts/sim/ledger.ts';
import type { Sut } from './commands.ts';
import { START, type World } from './world.ts';

/**
 * The only place the ledger-level model test touches the ledger: every command goes through the
 * ledger's named commands (the ones production's webhook, agent and operator paths call), every
 * read through the tables. When the ledger renames a command, this file follows.
 */

const ACTOR = 'model';

/** Expected refusals: the ledger's 4xx errors (conflict, not found, stale token), transition errors. */
function isRefusal(e: unknown): boolean {
  if (!(e instanceof Error)) return false;
  const status = (e as { status?: unknown }).status;
  return (typeof status === 'number' && status >= 400 && status < 500) || e.name === 'IllegalTransitionError';
}

async function ok(fn: () => Promise<unknown>): Promise<boolean> {
  try {
    await fn();
    return true;
  } catch (e) {
    if (isRefusal(e)) return false;
    throw e;
  }
}

export interface LedgerSut extends Sut {
  readonly ledger: Ledger;
  close(): void | Promise<void>;
}

/**
 * A fresh, migrated libSQL file ledger for `cfg`, with a clock the model moves. `remote`: the same
 * file served by the sqld stand-in (scripts/sim/fake-sqld) and reached through `@libsql/client` over HTTP,
 * as a Worker reaches Turso, so admission passes take the batched path
 * (docs/adr/0185-admission-pass-in-two-round-trips.md).
 */
export async function openLedgerSut(cfg: SparkConfig, opts: { remote?: boolean } = {}): Promise<LedgerSut> {
  const clock = testClock(START);
  // one ledger per generated case: copy a migrated file instead of migrating 1,000 times
  const local = await makeTestLedger({ config: cfg, clock, copyMigrated: true });
  let tl: { ledger: Ledger; close(): void | Promise<void> } = local;
  if (opts.remote) {
    local.ledger.store.close();
    const sqld = await startFakeSqld({ path: join(local.dir, 'spark.db') });
    const remote = await openLedgerDb({ url: sqld.url, createClient });
    const ledger = new Ledger(remote, { config: local.config, clock });
    tl = {
      ledger,
      async close() {
        remote.close();
        await sqld.close();
        local.close();
      },
    };
  }
  const ledger = tl.ledger;
  const store = ledger.store;

  /** Every row of every table: what "changed nothing" is measured against. */
  async function dump(): Promise<string> {
    const tables = await store.client.execute(
      "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
    );
    const out: Record<string, unknown[]> = {};
    for (const row of tables.rows) {
      const name = String(row.name);
      out[name] = (await store.client.execute(`SELECT * FROM "${name}" ORDER BY rowid`)).rows;
    }
    return JSON.stringify(out);
  }

  return {
    ledger,
    close: () => tl.close(),
    tick: (ms) => clock.advance(ms),

    async request(q) {
      try {
        const row = await ledger.createReservation(
          {
            kind: q.kind,
            topology: q.topology,
            targetHost: q.target,
            repo: q.repo,
            pr: q.pr,
            headSha: q.sha,
            suite: q.repo ? 'smoke' : null,
            ttlS: q.ttlS,
            requester: ACTOR,
          },
          ACTOR,
        );
        return row.id;
      } catch (e) {
        if (isRefusal(e)) return null;
        throw e;
      }
    },
    // the cancel and supersede commands the webhook intake (`/spark cancel`, unlabel, push) calls
    cancel: (id) => ok(() => cancelReservation(ledger, id, ACTOR, 'cancelled by requester')),
    async supersede(repo, pr, sha) {
      return (await supersedeQueued(ledger, { repo, pr }, sha, ACTOR)).map((r) => r.id);
    },
    heartbeat: (hostId, facts: HostFacts) => ledger.recordHeartbeat(hostId, facts),
    async setManaged(hostId, managed) {
      await ledger.setManaged(hostId, managed, 'operator');
    },
    advance: (id, to) => ok(() => ledger.advanceReservation(id, to, `agent reported ${to}`, 'agent')),
    beginRelease: (id, outcome) =>
      ok(() => ledger.beginRelease(id, outcome as Outcome, 'work finished', ACTOR)),
    confirmReleased: (hostId, token, processesRemain) =>
      ok(() => ledger.confirmReleased(hostId, token, `agent:${hostId}`, { processesRemain })),
    verifyLease: (hostId, token) => ok(() => ledger.requireCurrentLease(undefined, hostId, token)),
    // agent reports go through the same command the agent API calls
    recordRestore: (hostId, healthy, fencingToken) =>
      ok(() =>
        applyReport(ledger, hostId, {
          type: 'restored',
          fencingToken,
          ok: healthy,
          detail: healthy ? 'model-ready' : 'health check failed',
        }),
      ),
    report: (hostId, fencingToken, type) =>
      ok(() =>
        applyReport(
          ledger,
          hostId,
          type === 'cleaned'
            ? { type, fencingToken }
            : { type, fencingToken, processes: [{ pid: 100, name: 'proc-0', usedMemoryMiB: 512 }] },
        ),
      ),
    clearQuarantine: (hostId) => ok(() => ledger.clearQuarantine(hostId, 'operator')),

    async unchanged(fn) {
      const before = await dump();
      const result = await fn();
      const after = await dump();
      if (after !== before) throw new Error('a refused command changed the ledger');
      return result;
    },

    async pass() {
      const res = await ledger.admissionPass(ACTOR);
      const tokens = new Map<string, number>();
      for (const g of res.granted)
        for (const l of g.leases) tokens.set(`${g.reservationId}/${l.hostId}`, l.fencingToken);
      return {
        plan: res.plan,
        tokenFor: (resId, hostId) => {
          const tok = tokens.get(`${resId}/${hostId}`);
          if (tok == null) throw new Error(`pass granted ${resId} on ${hostId} without a lease token`);
          return tok;
        },
      };
    },

    async check(w: World) {
      const db = ledger.db;
      const [hosts, resv, leases] = await Promise.all([
        db.select().from(t.hosts),
        db.select().from(t.reservations),
        db.select().from(t.leases),
      ]);
      const diff: string[] = [];
      const eq = (what: string, real: unknown, model: unknown) => {
        if (JSON.stringify(real) !== JSON.stringify(model))
          diff.push(`${what}: ledger ${JSON.stringify(real)}, model ${JSON.stringify(model)}`);
      };
      eq('now', clock(), w.now);
      eq('host ids', hosts.map((h) => h.id).sort(), [...w.hosts.keys()].sort());
      for (const h of hosts) {
        const m = w.hosts.get(h.id);
        if (!m) continue;
        eq(`${h.id}.phase`, h.phase, m.phase);
        eq(`${h.id}.managed`, h.managed, m.managed);
        eq(`${h.id}.lastHeartbeatAt`, h.lastHeartbeatAt, m.lastHeartbeatAt);
        eq(`${h.id}.restoreAttempts`, h.restoreAttempts, m.restoreAttempts);
        eq(`${h.id}.fencingToken`, h.fencingToken, m.tokens.at(-1) ?? 0);
      }
      eq('reservation ids', resv.map((r) => r.id).sort(), [...w.res.keys()].sort());
      for (const r of resv) {
        const m = w.res.get(r.id);
        if (!m) continue;
        eq(`${r.id}.status`, r.status, m.status);
        eq(`${r.id}.headSha`, r.headSha, m.sha);
        eq(`${r.id}.priority`, r.priority, m.priority);
        eq(`${r.id}.queueDeadline`, r.queueDeadline, m.deadline);
        const { outcome, wait } = outcomeAndWait(r);
        eq(`${r.id}.wait`, wait, m.wait);
        if (m.status !== 'queued') eq(`${r.id}.outcome`, outcome, m.outcome);
      }
      const key = (l: { resId: string; hostId: string; token: number }) =>
        `${l.resId}/${l.hostId}/${l.token}`;
      const real = leases
        .map((l) => ({
          resId: l.reservationId,
          hostId: l.hostId,
          token: l.fencingToken,
          status: l.status,
          grantedAt: l.grantedAt,
          expiresAt: l.expiresAt,
        }))
        .sort((a, b) => key(a).localeCompare(key(b)));
      const model = w.leases
        .map((l) => ({
          resId: l.resId,
          hostId: l.hostId,
          token: l.token,
          status: l.status,
          grantedAt: l.grantedAt,
          expiresAt: l.expiresAt,
        }))
        .sort((a, b) => key(a).localeCompare(key(b)));
      eq('leases', real, model);
      if (diff.length) throw new Error(`ledger and model differ:\n  ${diff.join('\n  ')}`);
    },
  };
}

/** A reservation's end outcome and its current wait code (two columns, never mixed). */
function outcomeAndWait(r: typeof t.reservations.$inferSelect): {
  outcome: string | null;
  wait: string | null;
} {
  return { outcome: r.outcome, wait: r.waitCode };
}
