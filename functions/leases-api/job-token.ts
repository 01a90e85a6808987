import { sha256Hex } from '../auth/tokens.ts';
import { unauthorized } from '../errors.ts';
import type { LeaseRow, Ledger } from '../ledger/ledger.ts';

/** The bearer job token of a request, or a 401 saying what is missing. */
export function requireBearer(header: string | undefined): string {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
  if (!m)
    throw unauthorized('missing bearer job token (Authorization: Bearer $SPARK_LEASE_TOKEN)', 'spark-lease');
  return m[1]!;
}

/**
 * Resolves the per-lease job token (issued by the agent API, stored as SHA-256 in
 * leases.job_token_hash) to its lease, checking that it belongs to `reservationId` and `hostId`.
 * Unknown token → 401; a token of another reservation or host → 403 (`ledger.api.leaseForJobToken`).
 */
export async function leaseForJobToken(
  ledger: Ledger,
  token: string,
  reservationId: string,
  hostId: string,
): Promise<LeaseRow> {
  return ledger.api.leaseForJobToken(await sha256Hex(token), reservationId, hostId);
}
