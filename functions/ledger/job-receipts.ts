import { isActiveStatus } from '../../core/model.ts';
import {
  overallResult,
  parseStoredReceipts,
  type Receipt,
  type StoredReceipts,
} from '../../core/protocol/receipt.ts';
import { ApiError, conflict, notFound, staleFencingToken, unauthorized } from '../errors.ts';
import type { Tx } from './db.ts';
import { hasHostEvidence } from './host-evidence.ts';
import * as leases from './leases.ts';
import * as reservations from './reservations.ts';
import type { LeaseRow } from './rows.ts';
import type { LedgerStore } from './store.ts';

/**
 * The in-job lease endpoints' ledger side (docs/api.md; ADR 0160): the per-lease job token
 * resolved to its lease, and a job's receipt stored in one named command
 * (docs/adr/0260-outbox-and-sweeps-as-ledger-commands.md). A receipt is what the job reported —
 * detail beside the host's evidence, never the check's verdict.
 */

/**
 * The lease of a job token (stored as SHA-256 in `leases.job_token_hash`), checked to belong to
 * `reservationId` and `hostId`. Unknown token → 401; a token of another reservation or host → 403.
 */
export async function leaseForJobToken(
  s: LedgerStore,
  tx: Tx | undefined,
  jobTokenHash: string,
  reservationId: string,
  hostId: string,
): Promise<LeaseRow> {
  const lease = await leases.leaseByJobTokenHash(s, tx, jobTokenHash);
  if (!lease)
    throw unauthorized(
      'unknown job token: it was never issued or belongs to a finished lease',
      'spark-lease',
    );
  if (lease.reservationId !== reservationId) {
    throw new ApiError(
      403,
      'forbidden',
      `this job token belongs to another reservation, not ${reservationId}`,
    );
  }
  if (lease.hostId !== hostId) {
    throw new ApiError(403, 'forbidden', `this job token was issued for another host, not ${hostId}`);
  }
  return lease;
}

/** Canonical JSON (sorted keys) so a retried POST of the same receipt is recognised. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object') {
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(v);
}

/**
 * What a job cannot know and so may not claim (ADR 0160): only the agent runs a CI task (`mode:
 * task`) and holds its clone token; the backend is the one the agent reported for the lease.
 */
function agentOnlyClaims(receipt: Receipt, leaseEvidence: string | null): string[] {
  const out: string[] = [];
  if (receipt.mode === 'task')
    out.push('mode task: a job runs on a runner; only the agent reports a CI task, with its exit');
  if (Object.hasOwn(receipt.toolchain, 'cloneToken'))
    out.push(
      'toolchain.cloneToken: a job holds no clone token; only a CI task (built by the agent) reports one',
    );
  let executor: unknown = null;
  try {
    executor = leaseEvidence ? (JSON.parse(leaseEvidence) as { executor?: unknown }).executor : null;
  } catch {
    executor = null;
  }
  if (receipt.executor && typeof executor === 'string' && receipt.executor !== executor)
    out.push(`executor ${receipt.executor} ≠ ${executor}, the backend the agent reported for this lease`);
  return out;
}

/** The answer to a receipt: how many of the leased hosts reported, and the overall result once all did. */
export function receiptSummary(stored: StoredReceipts, expected: number, duplicate: boolean) {
  const receipts: Receipt[] = Object.values(stored.byHost);
  return {
    ok: true as const,
    /** A receipt is what the job reported: detail beside the host's evidence (ADR 0160). */
    reportedBy: 'job' as const,
    duplicate,
    hostsReported: receipts.length,
    hostsExpected: expected,
    /** null until every leased host has reported. */
    overall: receipts.length >= expected ? overallResult(receipts) : null,
  };
}

/**
 * A job's receipt for its host (ADR 0160), posted with its job token: checked against the lease
 * (current fencing token), the reservation (active; what was admitted) and what only the agent
 * may claim, then stored and recorded. A retried POST of the same receipt answers as before
 * (`duplicate`, nothing written); a different one from the same host, or one after the runner
 * exited, is refused. `created` is false for a duplicate.
 */
export function recordJobReceipt(
  s: LedgerStore,
  input: { jobTokenHash: string; reservationId: string; receipt: Receipt },
): Promise<{ summary: ReturnType<typeof receiptSummary>; created: boolean }> {
  const { reservationId, receipt } = input;
  return s.write(async (tx, now, changed) => {
    const lease = await leaseForJobToken(s, tx, input.jobTokenHash, reservationId, receipt.hostId);
    const current = await leases.requireCurrentLease(s, tx, receipt.hostId, receipt.fencingToken);
    if (current.id !== lease.id) {
      throw staleFencingToken(receipt.hostId, receipt.fencingToken, current.fencingToken);
    }
    const r = await reservations.getReservation(s, tx, reservationId);
    if (!r) throw notFound(`reservation ${reservationId}`);
    // a receipt may still land while the release has begun (the job's last step races the exit)
    if (!isActiveStatus(r.status)) {
      throw conflict(
        'reservation_not_active',
        `reservation ${reservationId} is ${r.status}; a receipt is accepted only while it is active`,
      );
    }
    const mismatches = [
      r.headSha && r.headSha !== receipt.headSha
        ? `headSha ${receipt.headSha} ≠ admitted ${r.headSha}`
        : null,
      r.topology !== receipt.topology ? `topology ${receipt.topology} ≠ admitted ${r.topology}` : null,
      r.suite && r.suite !== receipt.suite ? `suite ${receipt.suite} ≠ admitted ${r.suite}` : null,
    ].filter((m): m is string => m != null);
    mismatches.push(...agentOnlyClaims(receipt, lease.evidenceJson));
    if (mismatches.length) {
      throw conflict(
        'receipt_mismatch',
        `receipt does not match reservation ${reservationId}: ${mismatches.join('; ')}`,
      );
    }
    // once the runner exited the agent holds the evidence: a receipt after that is not the
    // job's own (the job ends before its runner does), e.g. one left over in a later lease
    if (await hasHostEvidence(tx, lease.id)) {
      throw conflict(
        'runner_exited',
        `the runner on ${receipt.hostId} has exited and its host evidence is recorded; a receipt can only come from the running job`,
      );
    }
    const stored: StoredReceipts = parseStoredReceipts(r.receiptJson) ?? { byHost: {} };
    const expected = (await leases.leasesOf(s, tx, reservationId)).length;
    const prior = stored.byHost[receipt.hostId];
    if (prior) {
      if (canonical(prior) !== canonical(receipt)) {
        throw conflict(
          'receipt_already_recorded',
          `a different receipt from ${receipt.hostId} is already recorded for ${reservationId}`,
        );
      }
      return { summary: receiptSummary(stored, expected, true), created: false };
    }
    stored.byHost[receipt.hostId] = receipt;
    await reservations.storeReceipts(s, tx, reservationId, JSON.stringify(stored));
    const summary = receiptSummary(stored, expected, false);
    await s.record(tx, now, {
      subjectType: 'reservation',
      subjectId: reservationId,
      type: 'reservation.receipt',
      cause: `receipt reported by the job on ${receipt.hostId}: ${receipt.result} (${receipt.suite}, ${receipt.topology}); detail only, the host's evidence decides`,
      actor: `job:${receipt.hostId}`,
      // no log lines, no tokens: the history is rendered in public views
      data: {
        reportedBy: 'job',
        result: receipt.result,
        headSha: receipt.headSha,
        hostId: receipt.hostId,
        suite: receipt.suite,
        topology: receipt.topology,
        hostsReported: summary.hostsReported,
        hostsExpected: summary.hostsExpected,
        overall: summary.overall,
      },
    });
    changed.add('reservation');
    return { summary, created: true };
  });
}
