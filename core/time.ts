/**
 * The one way a time leaves the controller as text: epoch milliseconds (as the domain model keeps
 * them, `core/model.ts`) to ISO 8601 in UTC, `2026-12-02T08:00:00.000Z`
 * (https://tc39.es/ecma262/#sec-date.prototype.toisostring). No time stays null.
 * A libSQL row may carry an integer as a bigint: it is converted first.
 */
export function isoTime(ms: number | bigint): string;
export function isoTime(ms: number | bigint | null | undefined): string | null;
export function isoTime(ms: number | bigint | null | undefined): string | null {
  return ms == null ? null : new Date(Number(ms)).toISOString();
}
