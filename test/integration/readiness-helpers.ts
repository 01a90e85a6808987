import { count, eq } from 'drizzle-orm';
import { expect } from 'vitest';
import type { HostFacts } from '../../core/model.ts';
import type { DoctorResponse } from '../../core/protocol/readiness.ts';
import type { Ledger } from '../../functions/ledger/ledger.ts';
import * as t from '../../functions/ledger/schema.ts';
import type { Harness } from '../../scripts/sim/fake-github/harness.ts';
import { idleFacts, servingFacts } from '../../scripts/sim/ledger.ts';
import { agentCleaned } from './cli-harness.ts';

/**
 * Worlds for the rollout readiness checks (docs/adr/0165-enable-is-a-gate.md): a fleet that is
 * ready through the ledger's own commands — adopted, heartbeating, and Deckard lent and restored
 * the way a real lease does it — and what "nothing changed" means.
 */

/** Every host adopted and heartbeating now (home-service hosts serving); `facts` adds to each. */
export async function heartbeatAll(
  ledger: Ledger,
  facts: (hostId: string) => Partial<HostFacts> = () => ({}),
) {
  for (const h of ledger.config.hosts) {
    await ledger.setManaged(h.id, true, 'test');
    await ledger.recordHeartbeat(h.id, (h.homeService ? servingFacts : idleFacts)(facts(h.id)));
  }
}

/**
 * A lend and restore of `hostId`'s home service through the ledger's commands, as a development
 * lease does it: granted with the service lent, prepared (service stopped, GPU free), released,
 * cleaned, then the agent's `restored` report. `restore: false` stops after the cleanup (the host
 * is `restoring`); `ok: false` reports a failed model-ready check.
 */
export async function lendAndRestore(
  ledger: Ledger,
  hostId = 'spark-1',
  o: { restore?: boolean; ok?: boolean } = {},
): Promise<string> {
  const r = await ledger.createReservation(
    { kind: 'development', topology: 'single', targetHost: hostId, requester: 'api:test-operator' },
    'api:test-operator',
  );
  await ledger.admissionPass();
  const leases = await ledger.leasesOf(undefined, r.id);
  expect(leases.map((l) => [l.hostId, l.lend])).toEqual([[hostId, true]]);
  // the agent drained and stopped the service and saw the GPU free, then reported `prepared`
  await ledger.recordHeartbeat(hostId, idleFacts({ serviceState: 'stopped' }));
  await ledger.write(async (tx, now, changed) => {
    await tx.update(t.leases).set({ preparedAt: now }).where(eq(t.leases.id, leases[0]!.id));
    await ledger.advanceReservation(r.id, 'preparing', 'every lease prepared', `agent:${hostId}`, tx);
    changed.add('reservation').add(`host:${hostId}`);
  });
  await ledger.beginRelease(r.id, 'released', 'restore drill: lent, now released', 'api:test-operator');
  await agentCleaned(ledger, r.id);
  if (o.restore === false) return r.id;
  await ledger.recordRestore(
    hostId,
    o.ok ?? true,
    o.ok === false ? 'model-ready check: HTTP 503' : 'model-ready check: HTTP 200',
    `agent:${hostId}`,
  );
  if (o.ok !== false) await ledger.recordHeartbeat(hostId, servingFacts());
  return r.id;
}

/** Adopted, heartbeating, Deckard restored: every fleet check passes. */
export async function readyFleet(ledger: Ledger): Promise<void> {
  await heartbeatAll(ledger);
  for (const h of ledger.config.hosts) if (h.homeService) await lendAndRestore(ledger, h.id);
}

/** `enable` with the whole gate (no override). */
export function enableStrict(h: Harness, repo: string, body: Record<string, unknown> = {}) {
  return h.enable(repo, { override: [], ...body });
}

/** `GET /api/v1/doctor/github[/owner/name]` with the operator token. */
export async function doctorGithub(
  h: Harness,
  repo?: string,
): Promise<{ status: number; body: DoctorResponse }> {
  const res = await fetch(`${h.c.url}/api/v1/doctor/github${repo ? `/${repo}` : ''}`, {
    headers: { authorization: `Bearer ${await h.operatorToken()}` },
  });
  return { status: res.status, body: (await res.json()) as DoctorResponse };
}

/**
 * What a refused enable or a doctor run must leave alone: the repositories and the history (all
 * of it but the audit rows of reads). Creates the harness's operator token first, so its own
 * `token.created` row is not counted as a change.
 */
export async function snapshot(h: Harness) {
  await h.operatorToken();
  return ledgerState(h.c.ledger);
}

export async function ledgerState(ledger: Ledger) {
  const repositories = await ledger.db.select().from(t.repositories);
  const [events] = await ledger.db.select({ n: count() }).from(t.events);
  const changes = (await ledger.db.select().from(t.events)).filter((e) => e.subjectType !== 'audit');
  return {
    repositories,
    events: events?.n ?? 0,
    changes: changes.map((e) => `${e.type} ${e.subjectId} ${e.cause}`),
  };
}

/** The status of each check by id. */
export const statuses = (checks: { id: string; status: string }[]) =>
  Object.fromEntries(checks.map((c) => [c.id, c.status]));
