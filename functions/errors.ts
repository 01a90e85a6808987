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
export const badRequest = (message: string, code = 'invalid_request') => new ApiError(400, code, message);
export const staleFencingToken = (hostId: string, got: number, current: number | null) =>
  new ApiError(
    409,
    'stale_fencing_token',
    `fencing token ${got} for ${hostId} is not current${current == null ? ' (no active lease)' : ` (current ${current})`}`,
  );
