import { isReleasableStatus } from '../../core/model.ts';
import {
  LeaseVerifyRequestSchema,
  type LeaseVerifyResponse,
  MAX_RECEIPT_BYTES,
  ReceiptSchema,
} from '../../core/protocol/receipt.ts';
import { limitBody, parseBody } from '../api/body.ts';
import type { AppModule } from '../app.ts';
import { sha256Hex } from '../auth/tokens.ts';
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

export const leasesApiModule: AppModule = {
  name: 'leases-api',
  routes(app, ctx) {
    app.post('/api/v1/leases/:reservationId/verify', limit(VERIFY_MAX_BYTES), async (c) => {
      const reservationId = c.req.param('reservationId');
      const token = requireBearer(c.req.header('authorization'));
      const body = await parseBody(c, LeaseVerifyRequestSchema);
      const { ledger } = ctx;
      const lease = await leaseForJobToken(ledger, token, reservationId, body.hostId);
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
      const { summary, created } = await ctx.ledger.api.recordJobReceipt({
        jobTokenHash: await sha256Hex(token),
        reservationId,
        receipt,
      });
      return c.json(summary, created ? 201 : 200);
    });
  },
};
