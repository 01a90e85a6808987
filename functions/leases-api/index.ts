import { isActiveStatus, isReleasableStatus } from '../../core/model.ts';
import {
  LeaseVerifyRequestSchema,
  type LeaseVerifyResponse,
  MAX_RECEIPT_BYTES,
  overallResult,
  parseStoredReceipts,
  type Receipt,
  ReceiptSchema,
  type StoredReceipts,
} from '../../core/protocol/receipt.ts';
import { limitBody, parseBody } from '../api/body.ts';
import type { AppModule } from '../app.ts';
import { ApiError, badRequest, conflict, notFound, staleFencingToken } from '../errors.ts';
import { leaseForJobToken, requireBearer } from './job-token.ts';

/**
 * The in-job lease endpoints (cross-part contract step 5). The admitted runner calls
 * them with its per-lease job token: `verify` before any PR code runs (lease preflight), and
 * `receipt` with the job's compact report at the end. Neither ever echoes a token back.
 *
 * The job token is readable by the PR's code (it runs as the runner's user: `/proc/$PPID/environ`
 * of the action), so it writes no evidence (ADR 0160): a receipt posted with it is stored as what
 * the job reported — detail beside the host's evidence, never the check's verdict — and it may
 * not claim what only the agent observes (a CI task's mode, a revoked clone token, another backend).
 */

const VERIFY_MAX_BYTES = 4 * 1024;

const limit = (maxSize: number) =>
  limitBody(
    maxSize,
    () => new ApiError(413, 'payload_too_large', `request body is larger than ${maxSize} bytes`),
  );

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

export const leasesApiModule: AppModule = {
  name: 'leases-api',
  routes(app, ctx) {
    app.post('/api/v1/leases/:reservationId/verify', limit(VERIFY_MAX_BYTES), async (c) => {
      const reservationId = c.req.param('reservationId');
      const token = requireBearer(c.req.header('authorization'));
      const body = await parseBody(c, LeaseVerifyRequestSchema);
      const { ledger } = ctx;
      const lease = await leaseForJobToken(ledger, undefined, token, reservationId, body.hostId);
      const current = await ledger.requireCurrentLease(undefined, body.hostId, body.fencingToken);
      if (current.id !== lease.id) {
        throw staleFencingToken(body.hostId, body.fencingToken, current.fencingToken);
      }
      if (lease.status !== 'active') {
        throw conflict(
          'lease_not_active',
          `lease on ${lease.hostId} is ${lease.status}; no new work may start under it`,
        );
      }
      if (lease.expiresAt <= ledger.clock()) {
        throw conflict('lease_expired', `lease on ${lease.hostId} expired; no new work may start under it`);
      }
      const r = await ledger.getReservation(undefined, reservationId);
      if (!r) throw notFound(`reservation ${reservationId}`);
      if (!isReleasableStatus(r.status)) {
        throw conflict(
          'reservation_not_active',
          `reservation ${reservationId} is ${r.status}; no new work may start under it`,
        );
      }
      const answer: LeaseVerifyResponse = {
        ok: true,
        reservation: {
          id: r.id,
          headSha: r.headSha,
          topology: r.topology as LeaseVerifyResponse['reservation']['topology'],
          suite: r.suite as LeaseVerifyResponse['reservation']['suite'],
          kind: r.kind,
        },
        lease: {
          hostId: lease.hostId,
          fencingToken: lease.fencingToken,
          expiresAt: lease.expiresAt,
          lend: lease.lend,
        },
      };
      return c.json(answer);
    });

    app.post('/api/v1/leases/:reservationId/receipt', limit(MAX_RECEIPT_BYTES), async (c) => {
      const reservationId = c.req.param('reservationId');
      const token = requireBearer(c.req.header('authorization'));
      const receipt = await parseBody(c, ReceiptSchema);
      if (receipt.reservationId !== reservationId) {
        throw badRequest(
          `receipt is for ${receipt.reservationId} but was posted to ${reservationId}`,
          'reservation_mismatch',
        );
      }
      const { ledger } = ctx;
      return ledger.write(async (tx, now, changed) => {
        const lease = await leaseForJobToken(ledger, tx, token, reservationId, receipt.hostId);
        const current = await ledger.requireCurrentLease(tx, receipt.hostId, receipt.fencingToken);
        if (current.id !== lease.id) {
          throw staleFencingToken(receipt.hostId, receipt.fencingToken, current.fencingToken);
        }
        const r = await ledger.getReservation(tx, reservationId);
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
        if (await ledger.api.hasHostEvidence(lease.id, tx)) {
          throw conflict(
            'runner_exited',
            `the runner on ${receipt.hostId} has exited and its host evidence is recorded; a receipt can only come from the running job`,
          );
        }
        const stored: StoredReceipts = parseStoredReceipts(r.receiptJson) ?? { byHost: {} };
        const expected = (await ledger.leasesOf(tx, reservationId)).length;
        const prior = stored.byHost[receipt.hostId];
        if (prior) {
          if (canonical(prior) !== canonical(receipt)) {
            throw conflict(
              'receipt_already_recorded',
              `a different receipt from ${receipt.hostId} is already recorded for ${reservationId}`,
            );
          }
          return c.json(summary(stored, expected, true));
        }
        stored.byHost[receipt.hostId] = receipt;
        await ledger.api.storeReceipts(tx, reservationId, JSON.stringify(stored));
        const s = summary(stored, expected, false);
        await ledger.record(tx, now, {
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
            hostsReported: s.hostsReported,
            hostsExpected: s.hostsExpected,
            overall: s.overall,
          },
        });
        changed.add('reservation');
        return c.json(s, 201);
      });
    });
  },
};

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

function summary(stored: StoredReceipts, expected: number, duplicate: boolean) {
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
