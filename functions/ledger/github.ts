import { and, eq, gte, isNull, sql } from 'drizzle-orm';
import { notFound } from '../errors.ts';
import type { Tx } from './db.ts';
import { readMeta } from './github-meta.ts';
import { enqueue } from './outbox.ts';
import type { HandoffRow, RepositoryRow, ReservationRow } from './rows.ts';
import * as t from './schema.ts';
import type { LedgerStore } from './store.ts';

/**
 * The GitHub integration's ledger commands: webhook delivery records, enabled repositories,
 * JIT runner registrations and handoffs, refusals. The GitHub part decides; these write.
 */

// webhook deliveries: see inbox.ts

// ---------------------------------------------------------------- repositories

const byName = (fullName: string) => sql`lower(${t.repositories.fullName}) = lower(${fullName})`;

/** Enables (or re-enables) a repository; settings not given keep their previous value. */
export function enableRepository(
  s: LedgerStore,
  input: {
    fullName: string;
    installationId: number | null;
    defaultBranch: string;
    pairEnabled?: boolean | undefined;
    workflow?: string | null | undefined;
  },
  actor: string,
  describe: (row: RepositoryRow) => { cause: string; data: Record<string, unknown> },
): Promise<RepositoryRow> {
  return s.write(async (tx, now) => {
    const existing = (await tx.select().from(t.repositories).where(byName(input.fullName)))[0];
    const values: RepositoryRow = {
      fullName: existing?.fullName ?? input.fullName,
      installationId: input.installationId,
      defaultBranch: input.defaultBranch,
      pairEnabled: input.pairEnabled ?? existing?.pairEnabled ?? false,
      workflow: input.workflow ?? existing?.workflow ?? null,
      enabledAt: now,
      disabledAt: null,
    };
    await tx
      .insert(t.repositories)
      .values(values)
      .onConflictDoUpdate({ target: t.repositories.fullName, set: values });
    const d = describe(values);
    await s.record(tx, now, {
      subjectType: 'repository',
      subjectId: values.fullName,
      type: 'repository.enabled',
      cause: d.cause,
      actor,
      data: d.data,
    });
    return values;
  });
}

/** Disables a repository: new webhooks are ignored; queued and active work is untouched. */
export function disableRepository(
  s: LedgerStore,
  fullName: string,
  actor: string,
  cause: string,
): Promise<RepositoryRow> {
  return s.write(async (tx, now) => {
    const existing = (await tx.select().from(t.repositories).where(byName(fullName)))[0];
    if (!existing) throw notFound(`repository ${fullName}`);
    if (existing.disabledAt != null) return existing;
    await tx
      .update(t.repositories)
      .set({ disabledAt: now })
      .where(sql`${t.repositories.fullName} = ${existing.fullName}`);
    await s.record(tx, now, {
      subjectType: 'repository',
      subjectId: existing.fullName,
      type: 'repository.disabled',
      cause,
      actor,
    });
    return { ...existing, disabledAt: now };
  });
}

// ---------------------------------------------------------------- refusals and faults

/**
 * A visible refusal: a neutral check run on the commit (when known; never the result check's
 * name, docs/architecture.md "Refusals") plus an audited `github.refused` event.
 */
export async function recordRefusal(
  s: LedgerStore,
  tx: Tx,
  now: number,
  o: {
    /**
     * Write nothing when the same subject and commit got a refusal within this many ms (a stranger repeating a command costs one bounded refusal per window, not one each).
     */
    throttleMs?: number;
    deliveryId: string;
    event: string;
    repo: string;
    pr: number | null;
    headSha: string | null;
    installationId: number | null;
    sender: string;
    reason: string;
    view: Record<string, unknown>;
  },
): Promise<boolean> {
  const subjectId = o.pr != null ? `${o.repo}#${o.pr}` : o.repo;
  if (o.throttleMs) {
    const recent = await tx
      .select({ id: t.events.id })
      .from(t.events)
      .where(
        and(
          eq(t.events.subjectType, 'audit'),
          eq(t.events.subjectId, subjectId),
          eq(t.events.type, 'github.refused'),
          gte(t.events.at, now - o.throttleMs),
          o.headSha
            ? sql`json_extract(${t.events.dataJson}, '$.headSha') = ${o.headSha}`
            : sql`json_extract(${t.events.dataJson}, '$.headSha') IS NULL`,
        ),
      )
      .limit(1);
    if (recent.length) return false;
  }
  if (o.headSha) {
    await enqueue(tx, now, {
      kind: 'refusal-check',
      key: `refusal:${o.deliveryId}`,
      payload: { repo: o.repo, headSha: o.headSha, installationId: o.installationId, view: o.view },
    });
  }
  await s.record(tx, now, {
    subjectType: 'audit',
    subjectId,
    type: 'github.refused',
    cause: o.reason,
    actor: `github:${o.sender}`,
    data: { delivery: o.deliveryId, event: o.event, headSha: o.headSha },
  });
  return true;
}

/** A workflow job that names a reservation the ledger does not have (audited; changes nothing). */
export async function recordUnknownJob(
  s: LedgerStore,
  tx: Tx,
  repo: string,
  cause: string,
  data: Record<string, unknown>,
): Promise<void> {
  await s.record(tx, s.clock(), {
    subjectType: 'audit',
    subjectId: repo,
    type: 'github.job_mismatch',
    cause,
    actor: 'github',
    data,
  });
}

// ---------------------------------------------------------------- JIT runners

/** Stores a registered JIT runner and its config, to be handed to the agent exactly once. */
export async function recordRunnerRegistration(
  s: LedgerStore,
  tx: Tx,
  now: number,
  h: {
    runnerName: string;
    leaseId: string;
    reservationId: string;
    hostId: string;
    attempt: number;
    runnerId: number;
    jitConfig: string;
  },
): Promise<void> {
  await tx
    .insert(t.jitHandoffs)
    .values({ ...h, createdAt: now })
    .onConflictDoNothing({ target: t.jitHandoffs.runnerName });
  await s.record(tx, now, {
    subjectType: 'reservation',
    subjectId: h.reservationId,
    type: 'reservation.runner_registered',
    cause: `JIT runner ${h.runnerName} registered for ${h.hostId} (attempt ${h.attempt})`,
    actor: 'github',
    data: { runnerName: h.runnerName, runnerId: h.runnerId, hostId: h.hostId, attempt: h.attempt },
  });
}

/** A config not yet handed over must never be handed over now (release, or a replaced runner). */
export async function withholdJitConfigs(
  tx: Tx,
  which: { reservationId: string } | { runnerName: string },
): Promise<void> {
  await tx
    .update(t.jitHandoffs)
    .set({ jitConfig: null })
    .where(
      'reservationId' in which
        ? eq(t.jitHandoffs.reservationId, which.reservationId)
        : eq(t.jitHandoffs.runnerName, which.runnerName),
    );
}

/** The runner was deregistered on GitHub (release or pickup timeout). */
export async function markRunnerDeleted(tx: Tx, now: number, runnerName: string): Promise<void> {
  await tx
    .update(t.jitHandoffs)
    .set({ deletedAt: now, jitConfig: null })
    .where(eq(t.jitHandoffs.runnerName, runnerName));
}

/** Runners of a reservation GitHub still knows (not deregistered). */
export async function liveRunnersOf(tx: Tx, reservationId: string): Promise<HandoffRow[]> {
  return tx
    .select()
    .from(t.jitHandoffs)
    .where(and(eq(t.jitHandoffs.reservationId, reservationId), isNull(t.jitHandoffs.deletedAt)));
}

/**
 * Whether the admitted job of a reservation is over (ADR 0095): GitHub reported it completed
 * (`reservation.job_completed`), or every lease's one-job runner exited 0 — a JIT runner exits
 * cleanly only after its job, and that exit may come before GitHub's `workflow_job` webhook.
 */
export async function admittedJobFinished(tx: Tx, reservationId: string): Promise<boolean> {
  const reported = await tx
    .select({ id: t.events.id })
    .from(t.events)
    .where(
      and(
        eq(t.events.subjectType, 'reservation'),
        eq(t.events.subjectId, reservationId),
        eq(t.events.type, 'reservation.job_completed'),
      ),
    )
    .limit(1);
  if (reported.length) return true;
  const leases = await tx
    .select({ exitedAt: t.leases.runnerExitedAt, exitCode: t.leases.exitCode })
    .from(t.leases)
    .where(eq(t.leases.reservationId, reservationId));
  return leases.length > 0 && leases.every((l) => l.exitedAt != null && l.exitCode === 0);
}

/**
 * Hands a waiting JIT config to the agent: in one transaction the config is erased, the handoff
 * marked consumed and the fresh job token's SHA-256 stored on the lease — so it is given exactly
 * once (cross-part contract 3).
 */
export async function handOverJitConfig(
  s: LedgerStore,
  tx: Tx,
  now: number,
  h: HandoffRow,
  jobTokenHash: string,
  hostId: string,
): Promise<void> {
  // zero the config's bytes in the page rather than only unlinking them; the
  // caller truncates the WAL after commit (`checkpointWal`)
  await s.secureErase(tx);
  await tx
    .update(t.jitHandoffs)
    .set({ jitConfig: null, consumedAt: now })
    .where(and(eq(t.jitHandoffs.runnerName, h.runnerName), isNull(t.jitHandoffs.consumedAt)));
  await tx.update(t.leases).set({ jobTokenHash }).where(eq(t.leases.id, h.leaseId));
  await s.record(tx, now, {
    subjectType: 'lease',
    subjectId: h.leaseId,
    type: 'lease.runner_handoff',
    cause:
      h.runnerId == null
        ? `clone token for CI task ${h.runnerName} handed to the agent`
        : `JIT config for runner ${h.runnerName} handed to the agent (attempt ${h.attempt})`,
    actor: `agent:${hostId}`,
    data: { runnerName: h.runnerName, attempt: h.attempt, reservationId: h.reservationId },
  });
}

// ---------------------------------------------------------------- run identity

/**
 * Records the workflow run a dispatch created: merges `runId`/`runAttempt` into
 * the reservation's integration meta and audits it. A run already recorded is kept (the first
 * identification wins; a later lookup can only find the same run or an impostor).
 */
export async function recordDispatchedRun(
  s: LedgerStore,
  tx: Tx,
  reservationId: string,
  run: {
    runId: number;
    runAttempt: number;
    via: 'dispatch-response' | 'job-label';
    /** More integration meta written with the run (e.g. whether the runners carry the nonce label). */
    meta?: Record<string, unknown>;
  },
): Promise<boolean> {
  const r = (await tx.select().from(t.reservations).where(eq(t.reservations.id, reservationId)))[0];
  if (!r?.metaJson) return false;
  const meta = JSON.parse(r.metaJson) as Record<string, unknown>;
  if (meta.runId != null) return false;
  const now = s.clock();
  await tx
    .update(t.reservations)
    .set({
      metaJson: JSON.stringify({
        ...meta,
        ...(run.meta ?? {}),
        runId: run.runId,
        runAttempt: run.runAttempt,
      }),
      updatedAt: now,
    })
    .where(eq(t.reservations.id, reservationId));
  await s.record(tx, now, {
    subjectType: 'reservation',
    subjectId: reservationId,
    type: 'reservation.run_recorded',
    cause: `dispatched workflow run ${run.runId} (attempt ${run.runAttempt}) identified by ${run.via === 'dispatch-response' ? 'the dispatch response' : "its jobs' runner label"}`,
    actor: 'github',
    data: { runId: run.runId, runAttempt: run.runAttempt, via: run.via },
  });
  return true;
}

/** The outbox key of the one cancellation of a reservation's recorded run. */
export const cancelRunKey = (reservationId: string, runId: number) => `cancel-run:${reservationId}:${runId}`;

/**
 * Queues the cancellation of `r`'s recorded workflow run (ADR 0090, 0095) unless its admitted
 * job is already over. Called when the reservation's release begins and when a run is recorded
 * for work that already ended: no runner of ours takes a job of ended work, so the run would
 * stay queued on GitHub for 24 h, or run on with a stopped runner. Idempotent (one key per run).
 */
export async function enqueueRunCancel(tx: Tx, now: number, r: ReservationRow): Promise<boolean> {
  const meta = readMeta(r);
  if (meta?.runId == null || !r.repo) return false;
  if (await admittedJobFinished(tx, r.id)) return false;
  return enqueue(tx, now, {
    kind: 'cancel-run',
    key: cancelRunKey(r.id, meta.runId),
    reservationId: r.id,
    payload: {
      reservationId: r.id,
      repo: r.repo,
      runId: meta.runId,
      installationId: meta.installationId ?? null,
    },
  });
}

/** Queues deregistration of every runner of `r` that GitHub still knows (release, retry). */
export async function enqueueRunnerDeletes(tx: Tx, now: number, r: ReservationRow, only?: string) {
  const meta = readMeta(r);
  for (const h of await liveRunnersOf(tx, r.id)) {
    if (only && h.runnerName !== only) continue;
    if (h.runnerId == null) continue;
    await enqueue(tx, now, {
      kind: 'delete-runner',
      key: `delete-runner:${h.runnerName}`,
      reservationId: r.id,
      payload: {
        runnerName: h.runnerName,
        runnerId: h.runnerId,
        repo: r.repo,
        installationId: meta?.installationId ?? null,
      },
    });
  }
}
