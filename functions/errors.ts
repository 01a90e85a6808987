import type { ContentfulStatusCode } from 'hono/utils/http-status';
import { StatusError } from '../core/errors.ts';

/**
 * The controller's status-carrying error (the family's `StatusError`, `core/errors.ts`). Handlers and ledger operations throw it;
 * the app's single `onError` turns it into `{ "error": { "code", "message" } }`.
 */
export class ApiError extends StatusError {
  override name = 'ApiError';
  constructor(
    override readonly status: ContentfulStatusCode,
    code: string,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(status, code, message);
  }
}

export const notFound = (what: string) => new ApiError(404, 'not_found', `${what} not found`);
export const conflict = (code: string, message: string) => new ApiError(409, code, message);
/** 401 with the bearer challenge of its realm (RFC 6750 section 3): `spark` for API tokens, `spark-lease` for job tokens. */
export const unauthorized = (message: string, realm: 'spark' | 'spark-lease') =>
  new ApiError(401, 'unauthorized', message, { 'WWW-Authenticate': `Bearer realm="${realm}"` });
export const badRequest = (message: string, code = 'invalid_request') => new ApiError(400, code, message);
export const staleFencingToken = (hostId: string, got: number, current: number | null) =>
  new ApiError(
    409,
    'stale_fencing_token',
    `fencing token ${got} for ${hostId} is not current${current == null ? ' (no active lease)' : ` (current ${current})`}`,
  );
