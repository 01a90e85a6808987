import { PASS_VERSION_KEY } from './admission-input.ts';

/**
 * The pass version's statements for a remote ledger's batched admission pass
 * (docs/adr/0185-admission-pass-in-two-round-trips.md): every pass that writes moves the version
 * on in its own transaction, and a write batch starts with {@link GUARD}, so a batch planned from
 * a read that another pass or a change has since overtaken is refused as a whole.
 */

export const SEED_VERSION = `INSERT OR IGNORE INTO meta (key, value) VALUES ('${PASS_VERSION_KEY}', '0')`;
export const BUMP_VERSION = `INSERT INTO meta (key, value) VALUES ('${PASS_VERSION_KEY}', '1') ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1`;
/**
 * The first statement of a batched pass's write (after {@link SEED_VERSION}): moves the pass
 * version on when nothing the pass decided on changed since its read — no other pass wrote, every
 * reservation it grants or records a wait for is still queued, every host it grants still has the
 * phase, fencing token and adoption it read — and otherwise sets the mark to NULL, which its NOT
 * NULL column refuses: the statement fails, and with it the whole batch (one transaction).
 */
export const GUARD = `UPDATE meta SET value = CASE WHEN value = ?
  AND (SELECT count(*) FROM reservations WHERE id IN (SELECT value FROM json_each(?)) AND +status = 'queued') = ?
  AND (SELECT count(*) FROM json_each(?) AS g JOIN hosts AS h ON h.id = json_extract(g.value, '$[0]') AND h.phase = json_extract(g.value, '$[1]') AND h.fencing_token = json_extract(g.value, '$[2]') AND h.managed = 1) = ?
  THEN CAST(value AS INTEGER) + 1 ELSE NULL END WHERE key = '${PASS_VERSION_KEY}'`;
const GUARD_STEP = 1;

/** The guard refused the batch (and nothing else failed). */
export function isGuardConflict(e: unknown): boolean {
  for (let cur: unknown = e, depth = 0; cur && depth < 4; depth++) {
    const err = cur as { statementIndex?: unknown; code?: unknown; cause?: unknown };
    if (err.statementIndex === GUARD_STEP && err.code === 'SQLITE_CONSTRAINT') return true;
    cur = err.cause;
  }
  return false;
}
