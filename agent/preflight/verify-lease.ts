import type { Topology } from '../../core/model.ts';
import {
  describeIssues,
  type LeaseVerifyResponse,
  LeaseVerifyResponseSchema,
} from '../../core/protocol/receipt.ts';
import { type CheckResult, failed, passed } from './check.ts';

export interface LeaseCredentials {
  controllerUrl: string;
  reservationId: string;
  hostId: string;
  fencingToken: number;
  jobToken: string;
  topology: Topology;
}

/**
 * Asks the controller whether this lease is current (docs/architecture.md rule 8: fencing check
 * unavailable → preflight fails). Every error — unreachable, 401, 409, a body that does not
 * match the contract or names another host/token — fails closed. Tokens are never printed.
 */
export async function verifyLease(
  fetchFn: typeof fetch,
  cred: LeaseCredentials,
  timeoutMs = 10_000,
): Promise<{ check: CheckResult; answer: LeaseVerifyResponse | null }> {
  const name = 'lease';
  const fail = (detail: string) => ({ check: failed(name, detail), answer: null });
  const url = `${cred.controllerUrl.replace(/\/+$/, '')}/api/v1/leases/${encodeURIComponent(cred.reservationId)}/verify`;
  let res: Response;
  try {
    res = await fetchFn(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${cred.jobToken}` },
      body: JSON.stringify({ hostId: cred.hostId, fencingToken: cred.fencingToken }),
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (e) {
    const err = e as Error & { cause?: { code?: string } };
    const why =
      err.name === 'TimeoutError'
        ? `no answer within ${timeoutMs / 1000} s`
        : (err.cause?.code ?? err.message);
    return fail(
      `controller unreachable (SPARK_CONTROLLER_URL): ${why}; no work may start without a verified lease`,
    );
  }
  let body: unknown = null;
  try {
    body = await res.json();
  } catch {
    body = null;
  }
  const message = (body as { error?: { message?: unknown } } | null)?.error?.message;
  const said = typeof message === 'string' ? `: ${message.slice(0, 200)}` : '';
  if (res.status === 401) return fail(`controller rejected the lease token (401)${said}`);
  if (res.status === 409) return fail(`lease is not current (409)${said}; this job must not run`);
  if (res.status !== 200) return fail(`controller answered ${res.status}${said}`);
  const parsed = LeaseVerifyResponseSchema.safeParse(body);
  if (!parsed.success) return fail(`malformed answer from the controller: ${describeIssues(parsed.error)}`);
  const a = parsed.data;
  const wrong = [
    a.reservation.id !== cred.reservationId ? `reservation ${a.reservation.id}` : null,
    a.lease.hostId !== cred.hostId ? `host ${a.lease.hostId}` : null,
    a.lease.fencingToken !== cred.fencingToken ? 'another fencing token' : null,
    a.reservation.topology !== cred.topology ? `topology ${a.reservation.topology}` : null,
  ].filter((x): x is string => x != null);
  if (wrong.length) return fail(`controller verified a different lease (${wrong.join(', ')}): refusing`);
  const left = Math.round((a.lease.expiresAt - Date.now()) / 1000);
  return {
    check: passed(name, `${a.reservation.id} is current on ${a.lease.hostId} (expires in ${left} s)`),
    answer: a,
  };
}
