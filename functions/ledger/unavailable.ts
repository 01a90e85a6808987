import { ApiError } from '../errors.ts';

/**
 * SQLite result codes that mean the ledger cannot take a write right now, whatever the request
 * was: a read-only file or mount (`SQLITE_READONLY*`), a full disk (`SQLITE_FULL`), an I/O error
 * (`SQLITE_IOERR*`, e.g. an immutable `-wal`), a file that cannot be opened (`SQLITE_CANTOPEN`).
 * See https://www.sqlite.org/rescode.html.
 */
const UNAVAILABLE =
  /\bSQLITE_(READONLY|FULL|IOERR|CANTOPEN|PERM)\w*|database or disk is full|disk I\/O error|readonly database/i;

/**
 * True when `e` (or an error in its `cause` chain, as drizzle and libSQL wrap them) is a ledger
 * storage failure rather than a bug: the caller answers 503 `ledger_unavailable`, never 500.
 */
export function isLedgerUnavailable(e: unknown): boolean {
  for (let cur: unknown = e, depth = 0; cur && depth < 6; depth++) {
    const err = cur as { code?: unknown; extendedCode?: unknown; message?: unknown; cause?: unknown };
    const text = `${String(err.code ?? '')} ${String(err.extendedCode ?? '')} ${String(err.message ?? '')}`;
    if (UNAVAILABLE.test(text)) return true;
    cur = err.cause;
  }
  return false;
}

/**
 * The storage error's own words (`SQLITE_READONLY: attempt to write a readonly database`), found
 * in the `cause` chain under drizzle's "Failed query: …" wrapper (which also lists parameters).
 */
export function storageCause(e: unknown): string {
  let innermost = String((e as Error)?.message ?? e);
  for (let cur: unknown = e, depth = 0; cur && depth < 6; depth++) {
    const err = cur as { code?: unknown; message?: unknown; cause?: unknown };
    const text = `${String(err.code ?? '')} ${String(err.message ?? '')}`;
    if (UNAVAILABLE.test(text)) return String(err.message ?? err.code);
    if (err.message) innermost = String(err.message);
    cur = err.cause;
  }
  return innermost;
}

/** The one answer for a ledger that cannot be written. */
export const ledgerUnavailable = (detail?: string) =>
  new ApiError(
    503,
    'ledger_unavailable',
    `the ledger cannot be written${detail ? ` (${detail})` : ''}; nothing was changed — retry later, and an operator should check the ledger's disk and permissions`,
    { 'Retry-After': '30' },
  );
