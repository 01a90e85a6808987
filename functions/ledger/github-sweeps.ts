import { isReleasableStatus, isRunnerStatus } from '../../core/model.ts';
import * as github from './github.ts';
import { patchMeta, readMeta } from './github-meta.ts';
import { enqueue, enqueueCheckSync, outboxKeyExists } from './outbox.ts';
import * as reservations from './reservations.ts';
import type { LedgerStore } from './store.ts';

/**
 * The GitHub part's periodic sweeps and send bookkeeping as named ledger commands, each one write
 * transaction (docs/adr/0260-outbox-and-sweeps-as-ledger-commands.md): the GitHub part decides
 * what is due from its reads and GitHub's answers, and names the command; the steps live here.
 */

/**
 * A dispatch, run lookup or runner registration gave up for good: the reservation (if it still
 * holds or waits for hosts) is released with outcome `github_failed`, and its check run says why.
 */
export function releaseAfterFailedSend(s: LedgerStore, reservationId: string, why: string): Promise<void> {
  return s.write(async (tx) => {
    const r = await reservations.getReservation(s, tx, reservationId);
    if (!r || !isReleasableStatus(r.status)) return;
    // the check run says why in words (e.g. a workflow that breaks the contract, with its fix)
    await patchMeta(tx, r, { note: why.slice(0, 1000) });
    await reservations.beginRelease(
      s,
      reservationId,
      'github_failed',
      why.slice(0, 400),
      'github-outbox',
      tx,
    );
  });
}

const REDELIVERY_SWEPT_KEY = 'github:redelivery_swept_at';

/**
 * Claims the webhook redelivery sweep (docs/adr/0091): due when `force`d or when the last sweep
 * any controller process made is `intervalMs` old, and then marked as made now. Returns whether it
 * is due and when the last sweep was made (now, when due).
 */
export function claimRedeliverySweep(
  s: LedgerStore,
  intervalMs: number,
  force: boolean,
): Promise<{ due: boolean; sweptAt: number }> {
  return s.write(async (tx, now) => {
    const last = Number((await s.getMark(tx, REDELIVERY_SWEPT_KEY)) ?? 0);
    if (!force && now - last < intervalMs) return { due: false, sweptAt: last };
    await s.setMark(tx, REDELIVERY_SWEPT_KEY, String(now));
    return { due: true, sweptAt: now };
  });
}

const JIT_BUCKET_KEY = 'github:jit_bucket';

/**
 * Takes one JIT registration from the App-wide hourly bucket of `perHour` (a ledger mark, so
 * every controller process shares it). Null when taken; else when the bucket refills.
 */
export function takeJitRegistration(s: LedgerStore, perHour: number): Promise<number | null> {
  return s.write(async (tx, now) => {
    const hour = Math.floor(now / 3_600_000);
    const mark = await s.getMark(tx, JIT_BUCKET_KEY);
    const cur = mark ? (JSON.parse(mark) as { hour: number; used: number }) : { hour, used: 0 };
    const used = cur.hour === hour ? cur.used : 0;
    if (used >= perHour) return (hour + 1) * 3_600_000;
    await s.setMark(tx, JIT_BUCKET_KEY, JSON.stringify({ hour, used: used + 1 }));
    return null;
  });
}

/**
 * A JIT runner not picked up within `timeoutS` (docs/architecture.md "Timings"): deregistered and
 * replaced by attempt + 1 (with backoff), or, after `retries` replacements, the reservation is
 * released with outcome `runner_not_picked_up`. False when there is nothing to do any more (the
 * job was picked up, the work ended, or the replacement is queued already).
 */
export function replaceUnpickedRunner(
  s: LedgerStore,
  h: {
    reservationId: string;
    leaseId: string;
    hostId: string;
    runnerName: string;
    attempt: number;
    /** When the runner's wait began (its registration, or its nodes' preparation if later). */
    since: number;
    retries: number;
    timeoutS: number;
  },
): Promise<boolean> {
  const rid = h.reservationId;
  const next = h.attempt + 1;
  return s.write(async (tx, now, changed) => {
    const cur = await reservations.getReservation(s, tx, rid);
    if (!cur || !isRunnerStatus(cur.status) || readMeta(cur)?.jobPickedUpAt) return false;
    const key = `jit:${h.leaseId}:a${next}`;
    if (await outboxKeyExists(tx, key)) return false;
    const waited = Math.round((now - h.since) / 1000);
    if (h.attempt >= h.retries) {
      await reservations.beginRelease(
        s,
        rid,
        'runner_not_picked_up',
        `runner not picked up: ${h.retries + 1} runner(s) waited ${h.timeoutS} s each without a job`,
        'github',
        tx,
        // the check shows why the test did not run (ADR 0177)
        { showCause: true },
      );
      changed.add('reservation');
      return true;
    }
    await github.enqueueRunnerDeletes(tx, now, cur, h.runnerName);
    await enqueue(tx, now, {
      kind: 'generate-jitconfig',
      key,
      reservationId: rid,
      payload: { reservationId: rid, leaseId: h.leaseId, attempt: next },
      notBefore: now + Math.min(10 * 60_000, 15_000 * 2 ** h.attempt),
    });
    await reservations.setRunnerAttempt(tx, rid, next);
    await s.record(tx, now, {
      subjectType: 'reservation',
      subjectId: rid,
      type: 'reservation.runner_retry',
      cause: `runner ${h.runnerName} not picked up after ${waited} s; replacing it (attempt ${next} of ${h.retries})`,
      actor: 'github',
      data: { hostId: h.hostId, attempt: next },
    });
    return true;
  });
}

/** A queued reservation's check run renders differently now (queue position, wait reason): sync it. */
export function queueCheckSync(s: LedgerStore, reservationId: string): Promise<void> {
  return s.write((tx, now) => enqueueCheckSync(tx, now, reservationId));
}

/** A schedule seen for the first time starts counting at `at` (never backfilled); kept if set. */
export function startSchedule(s: LedgerStore, key: string, at: number): Promise<void> {
  return s.write((tx) => s.setMark(tx, key, String(at), { onlyIfAbsent: true }));
}

/**
 * A schedule's slot is due: marked fired now and its reservation queued, unless another
 * controller process fired it first (the mark moved from `seenMark`) or one of its kind still
 * waits in the queue for that repository. Returns the new reservation's id, or null.
 */
export function fireSchedule(
  s: LedgerStore,
  key: string,
  seenMark: string,
  input: reservations.NewReservation & { repo: string },
): Promise<string | null> {
  return s.write(async (tx, now, changed) => {
    // another controller process fired this slot already
    if ((await s.getMark(tx, key)) !== seenMark) return null;
    await s.setMark(tx, key, String(now));
    if ((await reservations.queuedOfKind(s, tx, input.repo, input.kind)).length) return null;
    const r = await reservations.createReservation(s, input, 'schedule', tx);
    changed.add('reservation');
    return r.id;
  });
}
